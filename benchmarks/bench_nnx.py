"""NNX speed: ``nnx.jit`` train step, split+merge round trip, model construction.

Each case runs flaxen's ``nnx``, the reference ``flax.nnx`` (0.12.8, when installed) and a
hand-written pure-JAX equivalent (the limit) side by side:

- ``train_step``: a 2-layer MLP trained with Adam; ``nnx.jit`` over a step that uses
  ``nnx.value_and_grad`` and ``nnx.Optimizer`` vs ``jax.jit`` over a params pytree.
- ``split_merge``: ``merge(*split(model))`` of a 100-layer model vs a pytree
  flatten/unflatten of the same parameters.
- ``construct``: building a 100-layer model eagerly vs pure JAX init of the same arrays
  (the same ``lecun_normal`` kernels and zero biases, 2 arrays per layer). NNX draws one key
  per parameter with ``fold_in`` as Flax does (2 per layer), the pure-JAX side one ``split``
  per layer, so the comparison is not tilted towards NNX.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from benchmarks._harness import Result, compare, have_flax

SUITE = "nnx"


def _mlp(nnx, din: int, dh: int, dout: int):
    """A two-layer MLP class for the given ``nnx`` namespace (flaxen's or flax's)."""
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(din, dh, rngs=rngs)
            self.l2 = nnx.Linear(dh, dout, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    return MLP


def _mlp_case(quick: bool, today: bool = False, graph_updates: bool = True) -> Result:
    if today:  # today's flax.nnx API (Optimizer(wrt=), update(model, grads))
        from flaxen import nnx
    else:  # the Flax 0.8.3 API
        from flaxen.experimental import nnx

    din, dh, dout, batch = (16, 32, 4, 8) if quick else (64, 128, 10, 32)
    x = jnp.ones((batch, din))
    y = jnp.zeros((batch, dout))
    tx = optax.adam(1e-3)

    MLP = _mlp(nnx, din, dh, dout)

    model = MLP(nnx.Rngs(0))
    if today:
        opt = nnx.Optimizer(model, tx, wrt=nnx.Param)

        @nnx.jit(graph_updates=graph_updates)
        def step(model, opt, x, y):
            def loss_fn(model):
                return jnp.mean((model(x) - y) ** 2)

            loss, grads = nnx.value_and_grad(loss_fn, graph_updates=graph_updates)(model)
            opt.update(model, grads)
            return loss
    else:
        opt = nnx.Optimizer(model, tx)

        @nnx.jit
        def step(model, opt, x, y):
            def loss_fn(model):
                return jnp.mean((model(x) - y) ** 2)

            loss, grads = nnx.value_and_grad(loss_fn)(model)
            opt.update(grads)
            return loss

    impls = {"flaxen": lambda: step(model, opt, x, y)}

    if have_flax():
        from flax import nnx as fnnx

        fmodel = _mlp(fnnx, din, dh, dout)(fnnx.Rngs(0))
        fopt = fnnx.Optimizer(fmodel, tx, wrt=fnnx.Param)

        @fnnx.jit(graph_updates=graph_updates)
        def fstep(model, opt, x, y):
            def loss_fn(model):
                return jnp.mean((model(x) - y) ** 2)

            loss, grads = fnnx.value_and_grad(loss_fn, graph_updates=graph_updates)(model)
            opt.update(model, grads)
            return loss

        impls["flax"] = lambda: fstep(fmodel, fopt, x, y)

    k1, k2 = jax.random.split(jax.random.key(0))
    init = jax.nn.initializers.lecun_normal()
    params = {
        "l1": {"kernel": init(k1, (din, dh)), "bias": jnp.zeros(dh)},
        "l2": {"kernel": init(k2, (dh, dout)), "bias": jnp.zeros(dout)},
    }
    state = {"params": params, "opt": tx.init(params)}

    def apply(p, x):
        h = jax.nn.relu(x @ p["l1"]["kernel"] + p["l1"]["bias"])
        return h @ p["l2"]["kernel"] + p["l2"]["bias"]

    @jax.jit
    def jstep(state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((apply(p, x) - y) ** 2))(
            state["params"])
        updates, opt_state = tx.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt": opt_state}, loss

    box = [state]

    def jax_impl():
        box[0], loss = jstep(box[0], x, y)
        return loss

    impls["jax"] = jax_impl
    api = ("today " + ("graph" if graph_updates else "graph_updates=False")) if today \
        else "0.8.3"
    return compare(SUITE, f"train_step mlp {din}-{dh}-{dout} b{batch} ({api} API)", impls,
                   rounds=5 if quick else 9)


def _jit_modes_case(quick: bool) -> Result:
    """Today's ``nnx.jit`` train step three ways in one run: graph mode, ``graph_updates=False``
    and ``nnx.cached_partial`` (the functional mode and the cached copies must cost no more
    than plain ``nnx.jit``). The baseline is plain ``nnx.jit``."""
    from flaxen import nnx

    din, dh, dout, batch = (16, 32, 4, 8) if quick else (64, 128, 10, 32)
    x = jnp.ones((batch, din))
    y = jnp.zeros((batch, dout))
    tx = optax.adam(1e-3)

    MLP = _mlp(nnx, din, dh, dout)

    def make(graph_updates: bool):
        def step(model, opt, x, y):
            def loss_fn(model):
                return jnp.mean((model(x) - y) ** 2)

            loss, grads = nnx.value_and_grad(loss_fn, graph_updates=graph_updates)(model)
            opt.update(model, grads)
            return loss

        return step

    def bound(graph_updates: bool):
        model = MLP(nnx.Rngs(0))
        opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
        step = nnx.jit(make(graph_updates), graph_updates=graph_updates)
        return lambda: step(model, opt, x, y)

    impls = {"nnx.jit": bound(True), "graph_updates=False": bound(False)}
    model = MLP(nnx.Rngs(0))
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    cached = nnx.cached_partial(nnx.jit(make(True)), model, opt)
    impls["cached_partial"] = lambda: cached(x, y)
    # more rounds than the other cases: the three differ by a few microseconds of Python per
    # call, so a loaded machine's noise needs more samples to settle (a round is ~50 ms)
    return compare(SUITE, f"train_step mlp {din}-{dh}-{dout} b{batch} (today: jit modes)",
                   impls, rounds=15 if quick else 25, baseline="nnx.jit")


def _deep(nnx, n: int, width: int):
    class Deep(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(n)])

    return Deep


def _split_merge_case(quick: bool) -> Result:
    from flaxen import nnx

    n, width = 100, 4
    model = _deep(nnx, n, width)(nnx.Rngs(0))
    impls = {"flaxen": lambda: nnx.merge(*nnx.split(model))}
    if have_flax():
        from flax import nnx as fnnx

        fmodel = _deep(fnnx, n, width)(fnnx.Rngs(0))
        impls["flax"] = lambda: fnnx.merge(*fnnx.split(fmodel))
    params = {"layers": {i: {"kernel": jnp.ones((width, width)), "bias": jnp.ones(width)}
                         for i in range(n)}}

    def jax_impl():
        leaves, treedef = jax.tree_util.tree_flatten(params)
        return treedef.unflatten(leaves)

    impls["jax"] = jax_impl
    return compare(SUITE, f"split+merge {n} layers", impls, rounds=5 if quick else 9,
                   note="jax = pytree flatten+unflatten")


def _construct_case(quick: bool) -> Result:
    from flaxen import nnx

    n, width = (30, 4) if quick else (100, 4)
    impls = {"flaxen": lambda: _deep(nnx, n, width)(nnx.Rngs(0))}
    if have_flax():
        from flax import nnx as fnnx

        impls["flax"] = lambda: _deep(fnnx, n, width)(fnnx.Rngs(0))
    init = jax.nn.initializers.lecun_normal()

    def jax_impl():
        key = jax.random.key(0)
        layers = []
        for _ in range(n):
            key, k = jax.random.split(key)
            layers.append({"kernel": init(k, (width, width)), "bias": jnp.zeros(width)})
        return layers

    impls["jax"] = jax_impl
    return compare(SUITE, f"construct {n} layers", impls, rounds=3 if quick else 5,
                   note=f"jax = same initializers, same {2 * n} arrays")


def run(quick: bool) -> list[Result]:
    return [_mlp_case(quick), _mlp_case(quick, today=True),
            _mlp_case(quick, today=True, graph_updates=False), _jit_modes_case(quick),
            _split_merge_case(quick),
            _construct_case(quick)]
