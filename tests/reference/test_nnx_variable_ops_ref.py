"""Differential test: a Variable's numeric dunders (round, floor, int, abs, @, pow, ==,
!=, ...) on several kinds of values, flaxen.nnx next to flax.nnx 0.12.8. In-place operators
are left out: flaxen writes the result back where Flax raises NotImplementedError."""

import math
import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")

VALUES = {"f32": lambda: jnp.array(1.6), "i32": lambda: jnp.array(3), "float": lambda: 1.6,
          "int": lambda: 3, "np.float32": lambda: np.float32(1.6), "vec": lambda: jnp.ones(2),
          "mat": lambda: jnp.eye(2), "np vec": lambda: np.array([1.5, 2.5])}

OPS = {
    "round": round, "round1": lambda v: round(v, 1), "floor": math.floor, "ceil": math.ceil,
    "trunc": math.trunc, "index": operator.index, "int": int, "float": float,
    "complex": complex, "bool": bool, "abs": abs, "neg": operator.neg, "invert": operator.invert,
    "divmod": lambda v: divmod(v, 2), "rdivmod": lambda v: divmod(2, v), "matmul": lambda v: v @ v,
    "pow mod": lambda v: pow(v, 2, 3), "pow": lambda v: v ** 2, "rpow": lambda v: 2 ** v,
    "eq": lambda v: v == 1, "ne": lambda v: v != 1, "lt": lambda v: v < 1,
    "add float": lambda v: v + 1.5, "radd float": lambda v: 1.5 + v,
}


def _describe(r):
    if isinstance(r, (jax.Array, np.ndarray, np.generic)):
        return type(r).__name__, str(r.dtype), np.asarray(r).tolist()
    return type(r).__name__, r


def _outcome(lib, value, op):
    try:
        return _describe(op(lib.Param(value())))
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return type(e).__name__


@pytest.mark.parametrize("value", list(VALUES))
def test_dunders_as_flax(value):
    for name, op in OPS.items():
        assert _outcome(nnx, VALUES[value], op) == _outcome(fnnx, VALUES[value], op), name
