"""Differential tests: flaxen.nnx vs flax.nnx 0.12.8 (same Rngs seed -> same params/outputs)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _flat(mod, module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = mod.state(module, mod.Param)
        out = {}
        flat = dict(st.flat_state())
        for path, v in (flat.items() if isinstance(flat, dict) else flat):
            out[tuple(path)] = np.asarray(v.value)
        return out


CASES = [
    ("Linear", lambda m, r: m.Linear(3, 4, rngs=r), (2, 3)),
    ("LinearGeneral", lambda m, r: m.LinearGeneral((2, 3), (4, 5), axis=(-2, -1), rngs=r),
     (2, 2, 3)),
    ("Conv", lambda m, r: m.Conv(2, 3, (3, 3), rngs=r), (1, 5, 5, 2)),
    ("Embed", lambda m, r: m.Embed(6, 3, rngs=r), None),
    ("LayerNorm", lambda m, r: m.LayerNorm(3, rngs=r), (2, 3)),
    ("BatchNorm", lambda m, r: m.BatchNorm(3, rngs=r), (4, 3)),
    ("RMSNorm", lambda m, r: m.RMSNorm(3, rngs=r), (2, 3)),
    ("MHA", lambda m, r: m.MultiHeadAttention(2, 4, decode=False, rngs=r), (1, 3, 4)),
]


@pytest.mark.parametrize("name,make,shape", CASES, ids=[c[0] for c in CASES])
def test_same_params_and_outputs(name, make, shape):
    ours = make(nnx, nnx.Rngs(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = make(fnnx, fnnx.Rngs(0))
    a, b = _flat(nnx, ours), _flat(fnnx, ref)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))
    if shape is None:
        x = jnp.array([0, 3, 5])
    else:
        x = jax.random.normal(jax.random.key(1), shape)
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-5, atol=1e-6)


def test_grad_state_structure_matches():
    x, y = jnp.ones((1, 2)), jnp.ones((1, 3))
    loss = lambda m: jnp.mean((m(x) - y) ** 2)
    g = nnx.grad(loss)(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fg = fnnx.grad(loss)(fnnx.Linear(2, 3, rngs=fnnx.Rngs(0)))
        fflat = {tuple(p): np.asarray(v.value) for p, v in fg.flat_state()}  # list of pairs
    for p, v in dict(g.flat_state()).items():
        np.testing.assert_allclose(v.value, fflat[p], rtol=1e-6)
