"""The ahead-of-time stages of ``nnx.jit``: ``Traced``, ``Lowered`` and ``Compiled``.

``jit(f).trace(*args)`` / ``.lower(*args)`` hand back these wrappers around the
``jax.stages`` objects of the underlying ``jax.jit``; they forward JAX's queries (``in_tree``,
``as_text``, ``cost_analysis``, ...) and, for ``Compiled``, accept the same graph-node
arguments as the jitted function and write the state updates back, as a plain call does.
The ``Simple*`` twins are what the functional jit (``graph_updates=False`` or
``graph=False``) and ``jit_partial`` produce; they behave the same and are distinct types
so ``isinstance`` tells the modes apart, as in Flax.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> count = nnx.Variable(jnp.array(0))
>>> @nnx.jit
... def inc(c, x):
...     c.value += 1
...     return x * 2
>>> compiled = inc.trace(count, jnp.ones(2)).lower().compile()
>>> compiled(count, jnp.ones(2)).tolist(), int(count.value)
([2.0, 2.0], 1)
"""

from __future__ import annotations

import dataclasses
import typing as tp

from flaxen.errors import NNXTransformError

__all__ = [
    "Compiled", "Lowered", "SimpleCompiled", "SimpleLowered", "SimplePartialCompiled",
    "SimplePartialLowered", "SimplePartialTraced", "SimpleTraced", "Stage", "Traced",
]


class Stage:
    """Base of the jit stages: the queries every ``jax.stages`` object answers.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> lowered = nnx.jit(lambda x: x + 1).lower(jnp.ones(3))
    >>> isinstance(lowered, Stage), lowered.in_avals is not None
    (True, True)
    """

    @property
    def _inner_obj(self) -> tp.Any:
        raise NotImplementedError(f"{type(self).__name__} wraps no jax.stages object")

    @property
    def in_tree(self) -> tp.Any:
        """The pytree structure of the (pure) inputs the jitted function was staged with."""
        return self._inner_obj.in_tree

    @property
    def in_avals(self) -> tp.Any:
        """The abstract values of those inputs."""
        return self._inner_obj.in_avals

    @property
    def donate_argnums(self) -> tp.Any:
        """The donated positions of the staged call."""
        return self._inner_obj.donate_argnums


def _stage_call(stage: tp.Any, fn: tp.Callable, args: tuple, kwargs: dict) -> tp.Any:
    """Runs a staged ``jax`` callable ``fn`` on graph-node arguments the way the jitted
    function itself does: lift the inputs, call, write the updates back."""
    wrapped = stage.jit_wrapped
    lift, values, leaves, donate_idx = wrapped._prepare(args, kwargs)
    if donate_idx:
        raise NNXTransformError(
            "", f"{type(stage).__name__}: calling a compiled function with donated arguments "
            "is not supported",
            "Call the jitted function itself, or jit without donate_argnums.")
    return wrapped._finish(lift, fn(lift.static, values, leaves), values, leaves)


class _CompiledMixin:
    __slots__ = ()
    compiled: tp.Any
    jit_wrapped: tp.Any

    @property
    def _inner_obj(self) -> tp.Any:
        return self.compiled

    @property
    def args_info(self) -> tp.Any:
        """JAX's ``ArgInfo`` pytree of the staged inputs."""
        return self.compiled.args_info

    @staticmethod
    def call(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        """``Compiled.call(compiled, *args)``: calls ``compiled`` (as ``jax``'s does)."""
        if not args or not isinstance(args[0], _CompiledMixin):
            raise NNXTransformError(
                "", "Compiled.call expects the Compiled object as its first argument",
                "Call it as `Compiled.call(compiled, *args)` or simply `compiled(*args)`.")
        return args[0](*args[1:], **kwargs)

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        # the executable was compiled for jit_wrapped's (static, values, leaves) triple; the
        # static half is a static argument, so the jax object is called with the other two
        return _stage_call(self, lambda _static, values, leaves: self.compiled(values, leaves),
                           args, kwargs)

    @property
    def out_tree(self) -> tp.Any:
        """The pytree structure of the (pure) outputs."""
        return self.compiled.out_tree

    def as_text(self) -> str | None:
        """The executable as human-readable text (``None`` where unavailable)."""
        return self.compiled.as_text()

    def cost_analysis(self) -> tp.Any | None:
        """The compiler's execution cost estimates."""
        return self.compiled.cost_analysis()

    def memory_analysis(self) -> tp.Any | None:
        """The compiler's memory estimates."""
        return self.compiled.memory_analysis()

    def runtime_executable(self) -> tp.Any | None:
        """The backend's executable object (for debugging)."""
        return self.compiled.runtime_executable()

    @property
    def input_shardings(self) -> tp.Any:
        return self.compiled.input_shardings

    @property
    def output_shardings(self) -> tp.Any:
        return self.compiled.output_shardings

    @property
    def input_layouts(self) -> tp.Any:
        return self.compiled.input_formats


class _LoweredMixin:
    __slots__ = ()
    lowered: tp.Any
    jit_wrapped: tp.Any
    _compiled_type: tp.ClassVar[type]

    @property
    def _inner_obj(self) -> tp.Any:
        return self.lowered

    @property
    def args_info(self) -> tp.Any:
        """JAX's ``ArgInfo`` pytree of the staged inputs."""
        return self.lowered.args_info

    @property
    def out_tree(self) -> tp.Any:
        """The pytree structure of the (pure) outputs."""
        return self.lowered.out_tree

    @classmethod
    def from_flat_info(cls, lowering: tp.Any, in_tree: tp.Any, in_avals: tp.Any,
                       donate_argnums: tuple[int, ...], out_tree: tp.Any,
                       no_kwargs: bool = False) -> tp.Any:
        """Not available: an nnx ``Lowered`` needs the jitted function that made it."""
        raise NotImplementedError(
            f"{cls.__name__}.from_flat_info: an nnx Lowered comes from "
            "`nnx.jit(f).lower(*args)` (it needs the jitted function to lift arguments); "
            "build a plain jax Lowered with jax's own APIs instead.")

    def compile(self, compiler_options: tp.Any = None) -> tp.Any:
        """Compiles, returning the matching ``Compiled`` stage."""
        return self._compiled_type(self.lowered.compile(compiler_options), self.jit_wrapped)

    def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
        """The lowering as text (``dialect``: ``'stablehlo'`` or ``'hlo'``)."""
        return self.lowered.as_text(dialect=dialect, debug_info=debug_info)

    def compiler_ir(self, dialect: str | None = None) -> tp.Any | None:
        """The lowering as a compiler IR object."""
        return self.lowered.compiler_ir(dialect=dialect)

    def cost_analysis(self) -> tp.Any | None:
        """The compiler's cost estimates of the lowering."""
        return self.lowered.cost_analysis()


class _TracedMixin:
    __slots__ = ()
    traced: tp.Any
    jit_wrapped: tp.Any
    _lowered_type: tp.ClassVar[type]

    @property
    def _inner_obj(self) -> tp.Any:
        return self.traced

    @property
    def out_info(self) -> tp.Any:
        """The shapes/dtypes of the (pure) outputs."""
        return self.traced.out_info

    def lower(self, *, lowering_platforms: tuple[str, ...] | None = None) -> tp.Any:
        """Lowers to compiler input, returning the matching ``Lowered`` stage."""
        return self._lowered_type(self.traced.lower(lowering_platforms=lowering_platforms),
                                  self.jit_wrapped)


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled(_CompiledMixin, Stage):
    """``nnx.jit(f).lower(...).compile()``: call it with the same arguments as ``f``."""

    compiled: tp.Any
    jit_wrapped: tp.Any


@dataclasses.dataclass(frozen=True, slots=True)
class Lowered(_LoweredMixin, Stage):
    """``nnx.jit(f).lower(...)``: ``compile()`` gives a :class:`Compiled`."""

    lowered: tp.Any
    jit_wrapped: tp.Any
    _compiled_type = Compiled


@dataclasses.dataclass(frozen=True, slots=True)
class Traced(_TracedMixin, Stage):
    """``nnx.jit(f).trace(...)``: ``lower()`` gives a :class:`Lowered`."""

    traced: tp.Any
    jit_wrapped: tp.Any
    _lowered_type = Lowered


@dataclasses.dataclass(frozen=True, slots=True)
class SimpleCompiled(_CompiledMixin, Stage):
    """:class:`Compiled` of the functional jit (``graph_updates=False``/``graph=False``)."""

    compiled: tp.Any
    jit_wrapped: tp.Any


@dataclasses.dataclass(frozen=True, slots=True)
class SimpleLowered(_LoweredMixin, Stage):
    """:class:`Lowered` of the functional jit; ``compile()`` gives a ``SimpleCompiled``."""

    lowered: tp.Any
    jit_wrapped: tp.Any
    _compiled_type = SimpleCompiled


@dataclasses.dataclass(frozen=True, slots=True)
class SimpleTraced(_TracedMixin, Stage):
    """:class:`Traced` of the functional jit; ``lower()`` gives a ``SimpleLowered``."""

    traced: tp.Any
    jit_wrapped: tp.Any
    _lowered_type = SimpleLowered


@dataclasses.dataclass(frozen=True, slots=True)
class SimplePartialCompiled(_CompiledMixin, Stage):
    """:class:`Compiled` of ``nnx.jit_partial``: call it with the remaining arguments."""

    compiled: tp.Any
    jit_wrapped: tp.Any


@dataclasses.dataclass(frozen=True, slots=True)
class SimplePartialLowered(_LoweredMixin, Stage):
    """:class:`Lowered` of ``nnx.jit_partial``."""

    lowered: tp.Any
    jit_wrapped: tp.Any
    _compiled_type = SimplePartialCompiled


@dataclasses.dataclass(frozen=True, slots=True)
class SimplePartialTraced(_TracedMixin, Stage):
    """:class:`Traced` of ``nnx.jit_partial``."""

    traced: tp.Any
    jit_wrapped: tp.Any
    _lowered_type = SimplePartialLowered
