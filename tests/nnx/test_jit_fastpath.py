"""nnx.jit's per-call fast paths: argument signatures, the reused static half, cache checks.

Repeated calls skip the pytree walk of the arguments (remembered per tuple of argument
types) and the graph walk (remembered per root objects, re-checked by identity). These tests
change what those caches remember between calls and check that every change is seen.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flaxen import nnx


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.BatchStat(jnp.zeros(()))
        self.table = nnx.data({"a": nnx.Param(jnp.ones(2))})


@nnx.jit
def bump(m: Counter, x: jnp.ndarray) -> jnp.ndarray:
    m.count.value += 1
    return sum(p.value.sum() for p in m.table.values()) * x


def test_same_types_other_objects_write_back_to_the_right_one():
    a, b = Counter(), Counter()
    bump(a, 1.0)
    bump(a, 1.0)
    bump(b, 1.0)
    assert float(a.count.value) == 2.0
    assert float(b.count.value) == 1.0


def test_dict_item_replaced_in_place_is_seen():
    m = Counter()
    assert float(bump(m, 1.0)) == 2.0
    m.table["a"] = nnx.Param(jnp.full(2, 3.0))  # the dict object is the same one
    assert float(bump(m, 1.0)) == 6.0
    m.table["b"] = nnx.Param(jnp.ones(3))  # a new key
    assert float(bump(m, 1.0)) == 9.0
    del m.table["b"]
    assert float(bump(m, 1.0)) == 6.0
    assert float(m.count.value) == 4.0


def test_attribute_added_between_calls_is_seen():
    m = Counter()
    bump(m, 2.0)
    m.extra = nnx.BatchStat(jnp.zeros(()))

    @nnx.jit
    def touch(m, x):
        m.extra.value += x
        return m.count.value

    touch(m, 2.0)
    touch(m, 3.0)
    assert float(m.extra.value) == 5.0


def test_signature_with_variable_scalar_and_array_arguments():
    v = nnx.Param(jnp.zeros(3))

    @nnx.jit
    def add(v, s, x):
        v.value += s * x
        return v.value.sum()

    for _ in range(3):
        out = add(v, 2, jnp.ones(3))
    np.testing.assert_allclose(v.value, np.full(3, 6.0))
    assert float(out) == 18.0
    w = nnx.Param(jnp.ones(3))
    add(w, 1, jnp.ones(3))  # same types, another Variable
    np.testing.assert_allclose(w.value, np.full(3, 2.0))
    np.testing.assert_allclose(v.value, np.full(3, 6.0))


def test_argument_order_and_keywords_get_their_own_signature():
    @nnx.jit
    def f(a, b):
        return a.count.value * 10 + b

    m = Counter()
    m.count.value = jnp.array(2.0)
    assert float(f(m, 1.0)) == 21.0
    assert float(f(b=1.0, a=m)) == 21.0
    assert float(f(m, b=3.0)) == 23.0


def test_train_step_matches_plain_optax_every_call():
    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    tx = optax.adam(0.1)
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    params = {"kernel": model.kernel.value, "bias": model.bias.value}
    opt_state = tx.init(params)
    x = jnp.arange(8.0).reshape(4, 2)

    @nnx.jit
    def step(model, opt, x):
        grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
        opt.update(model, grads)

    def loss(p):
        return jnp.mean((x @ p["kernel"] + p["bias"]) ** 2)

    for _ in range(5):
        step(model, opt, x)
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        params = optax.apply_updates(params, updates)
        np.testing.assert_allclose(model.kernel.value, params["kernel"], rtol=1e-6)
        np.testing.assert_allclose(model.bias.value, params["bias"], rtol=1e-6)
    assert int(opt.step.value) == 5
