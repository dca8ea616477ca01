"""Array-like operators for Variables: ``param + 1``, ``x @ param``, ``-param``, ``param == 0``.

Each operator reads the Variable's value (``get_value()``, so subclass overrides and hooks
apply), unwraps a Variable on the other side too, and applies Python's own operator, so
reflection between types works as it does for the bare values. In-place operators
(``param += 1``) write the result back with ``set_value`` and keep the same Variable.

The set of dunders is Flax 0.12.8's: no ``__array__`` (so ``np.float64(2) * param`` defers
to the Variable and stays a JAX array, also under ``jit``), no ``__bool__``, no ordering
(``<`` ...) and no ``divmod``; read the value for those (``param[...] > 0``).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> p = nnx.Param(jnp.array(2.0))
>>> float(p * 3), float(1 - p), float(-p), bool(p[...] > 1)
(6.0, -1.0, -2.0, True)
"""

from __future__ import annotations

import math
import operator
import typing as tp


def _unwrap(x: tp.Any) -> tp.Any:
    get = getattr(type(x), "_variable_get_value", None)
    return get(x) if get is not None else x


def _binary(fn: tp.Callable[[tp.Any, tp.Any], tp.Any], name: str) -> tp.Callable:
    def method(self: tp.Any, other: tp.Any) -> tp.Any:
        return fn(self.get_value(), _unwrap(other))

    method.__name__ = name
    return method


def _reflected(fn: tp.Callable[[tp.Any, tp.Any], tp.Any], name: str) -> tp.Callable:
    def method(self: tp.Any, other: tp.Any) -> tp.Any:
        return fn(_unwrap(other), self.get_value())

    method.__name__ = name
    return method


def _inplace(fn: tp.Callable[[tp.Any, tp.Any], tp.Any], name: str) -> tp.Callable:
    def method(self: tp.Any, other: tp.Any) -> tp.Any:
        self.set_value(fn(self.get_value(), _unwrap(other)))
        return self

    method.__name__ = name
    return method


def _unary(fn: tp.Callable[[tp.Any], tp.Any], name: str) -> tp.Callable:
    def method(self: tp.Any) -> tp.Any:
        return fn(self.get_value())

    method.__name__ = name
    return method


_BINARY: dict[str, tp.Callable[[tp.Any, tp.Any], tp.Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "matmul": operator.matmul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow, "lshift": operator.lshift, "rshift": operator.rshift,
    "and": operator.and_, "xor": operator.xor, "or": operator.or_,
}
_COMPARE: dict[str, tp.Callable[[tp.Any, tp.Any], tp.Any]] = {
    "eq": operator.eq, "ne": operator.ne,
}
_UNARY: dict[str, tp.Callable[[tp.Any], tp.Any]] = {
    "neg": operator.neg, "pos": operator.pos, "abs": abs, "invert": operator.invert,
    "complex": complex, "int": int, "float": float, "index": operator.index,
    "trunc": math.trunc, "floor": math.floor, "ceil": math.ceil,
}


class ArrayOps:
    """Mixin: the operator protocol of the wrapped value (see the module docstring)."""

    __slots__ = ()

    def __round__(self, ndigits: int | None = None) -> tp.Any:
        value = self.get_value()  # type: ignore[attr-defined]
        return round(value) if ndigits is None else round(value, ndigits)

    def __len__(self) -> int:
        return len(self.get_value())  # type: ignore[attr-defined]

    def __iter__(self) -> tp.Iterator[tp.Any]:
        return iter(self.get_value())  # type: ignore[attr-defined]

    def __contains__(self, item: tp.Any) -> bool:
        return item in self.get_value()  # type: ignore[attr-defined]

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return self.get_value()(*args, **kwargs)  # type: ignore[attr-defined]


_fn: tp.Callable[..., tp.Any]
for _name, _fn in _BINARY.items():
    setattr(ArrayOps, f"__{_name}__", _binary(_fn, f"__{_name}__"))
    setattr(ArrayOps, f"__r{_name}__", _reflected(_fn, f"__r{_name}__"))
    setattr(ArrayOps, f"__i{_name}__", _inplace(_fn, f"__i{_name}__"))
for _name, _fn in _COMPARE.items():
    setattr(ArrayOps, f"__{_name}__", _binary(_fn, f"__{_name}__"))
for _name, _fn in _UNARY.items():
    setattr(ArrayOps, f"__{_name}__", _unary(_fn, f"__{_name}__"))
del _name, _fn
