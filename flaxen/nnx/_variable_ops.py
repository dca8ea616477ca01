"""Array-like operators for Variables: ``param + 1``, ``x @ param``, ``-param``, ``param == 0``.

Each operator reads the Variable's value (``get_value()``, so subclass overrides and hooks
apply), unwraps a Variable on the other side, and calls the value's own dunder method (as
Flax 0.12.8 does): what the value's type answers is the answer, ``NotImplemented`` included,
so ``round(param)`` keeps a float array's dtype and ``math.floor(param)`` fails for a JAX array
as it does in Flax. In-place operators (``param += 1``) raise
:class:`~flaxen.errors.VariableInPlaceError`, as in Flax 0.12.8: ``param[...] += 1`` updates
the value.

The set of dunders is Flax 0.12.8's: no ``__array__`` (so ``np.float64(2) * param`` defers
to the Variable and stays a JAX array, also under ``jit``), no ``__bool__``, no ``__ne__``
(Python negates ``__eq__``), no ordering (``<`` ...) and no ``divmod``; read the value for
those (``param[...] > 0``).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> p = nnx.Param(jnp.array(2.0))
>>> float(p * 3), float(1 - p), float(-p), bool(p[...] > 1), round(p).dtype
(6.0, -1.0, -2.0, True, dtype('float32'))
"""

from __future__ import annotations

import typing as tp

from flaxen.errors import VariableInPlaceError


def _unwrap(x: tp.Any) -> tp.Any:
    get = getattr(type(x), "_variable_get_value", None)
    return get(x) if get is not None else x


def _binary(name: str) -> tp.Callable:
    def method(self: tp.Any, other: tp.Any) -> tp.Any:
        return getattr(self.get_value(), name)(_unwrap(other))

    method.__name__ = name
    return method


def _inplace(op: str) -> tp.Callable:
    def method(self: tp.Any, other: tp.Any) -> tp.Any:
        sym = _BINARY[op]
        raise VariableInPlaceError(
            "", f"In-place operations are no longer supported for Variable: `v {sym}= x` on "
            f"a {type(self).__name__}",
            f"Use `v[...] {sym}= x` to update its value in place (the Variable stays the "
            f"same object), or `y = v {sym} x` for a new array.")

    method.__name__ = f"__i{op}__"
    return method


def _unary(name: str) -> tp.Callable:
    def method(self: tp.Any) -> tp.Any:
        return getattr(self.get_value(), name)()

    method.__name__ = name
    return method


# the binary operators, by dunder name, with their symbol (for the in-place error message)
_BINARY = {"add": "+", "sub": "-", "mul": "*", "matmul": "@", "truediv": "/",
           "floordiv": "//", "mod": "%", "pow": "**", "lshift": "<<", "rshift": ">>",
           "and": "&", "xor": "^", "or": "|"}
_UNARY = ("neg", "pos", "abs", "invert", "complex", "int", "float", "index", "trunc", "floor",
          "ceil")


class ArrayOps:
    """Mixin: the operator protocol of the wrapped value (see the module docstring)."""

    __slots__ = ()

    def __round__(self, ndigits: int = 0) -> tp.Any:
        # Flax passes ndigits=0 on: round(param) is a float array for a float param
        return self.get_value().__round__(ndigits)  # type: ignore[attr-defined]

    def __eq__(self, other: tp.Any) -> tp.Any:  # type: ignore[override]
        return self.get_value().__eq__(_unwrap(other))  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.get_value())  # type: ignore[attr-defined]

    def __iter__(self) -> tp.Iterator[tp.Any]:
        return iter(self.get_value())  # type: ignore[attr-defined]

    def __contains__(self, item: tp.Any) -> bool:
        return item in self.get_value()  # type: ignore[attr-defined]

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return self.get_value()(*args, **kwargs)  # type: ignore[attr-defined]


for _name in _BINARY:
    setattr(ArrayOps, f"__{_name}__", _binary(f"__{_name}__"))
    setattr(ArrayOps, f"__r{_name}__", _binary(f"__r{_name}__"))
    setattr(ArrayOps, f"__i{_name}__", _inplace(_name))
for _name in _UNARY:
    setattr(ArrayOps, f"__{_name}__", _unary(f"__{_name}__"))
del _name
