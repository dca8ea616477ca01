"""NNX speed beyond graph-mode split: tree mode, ``update``/``state``/``merge``, the
functional split/jit/merge pattern, ``cached_partial`` and an eager ``Linear`` call.

Each case runs flaxen's ``nnx``, the reference ``flax.nnx`` (0.12.8, when installed) and a
hand-written JAX equivalent (the limit, named ``jax``) side by side:

- ``tree split+merge``: ``merge(*split(model, graph=False))`` vs a pytree flatten+unflatten
  of the same parameters.
- ``tree state``: ``state(model, graph=False)`` vs a pytree flatten.
- ``update``: ``update(model, state)`` vs a ``tree_map`` over the same leaves.
- ``merge``: ``merge(graphdef, state)`` (graph mode) vs a pytree unflatten, of split's own
  State (whose leaves split remembers) and of a ``jax.tree.map`` copy (read afresh).
- ``split+merge of a pair``: a tuple root ``(model_a, model_b)``, as ``(model, optimizer)``.
- ``functional``: Flax's performance-guide pattern (split once, ``jax.jit`` over a step
  that merges, trains and splits) vs the hand-written jitted step.
- ``cached_partial``: ``nnx.cached_partial(step, model, opt)`` vs the hand-written step.
- ``linear eager``: an eager ``nnx.Linear`` call vs ``x @ w + b``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from benchmarks._harness import Result, compare, have_flax
from benchmarks.bench_nnx import _mlp

SUITE = "nnx-tree"
_N, _WIDTH = 100, 4


def _deep(nnx, n: int, width: int):
    class Deep(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(n)])

    return Deep


def _params(n: int, width: int) -> dict:
    return {"layers": {i: {"kernel": jnp.ones((width, width)), "bias": jnp.ones(width)}
                       for i in range(n)}}


def _models():
    from flaxen import nnx

    out = {"flaxen": (nnx, _deep(nnx, _N, _WIDTH)(nnx.Rngs(0)))}
    if have_flax():
        from flax import nnx as fnnx

        out["flax"] = (fnnx, _deep(fnnx, _N, _WIDTH)(fnnx.Rngs(0)))
    return out


def _tree_split_merge(quick: bool) -> Result:
    impls = {name: (lambda m=m, mod=mod: m.merge(*m.split(mod, graph=False)))
             for name, (m, mod) in _models().items()}
    params = _params(_N, _WIDTH)

    def jax_impl():
        leaves, treedef = jax.tree_util.tree_flatten(params)
        return treedef.unflatten(leaves)

    impls["jax"] = jax_impl
    return compare(SUITE, f"tree split+merge {_N} layers", impls, rounds=5 if quick else 9,
                   note="jax = pytree flatten+unflatten")


def _tree_state(quick: bool) -> Result:
    impls = {name: (lambda m=m, mod=mod: m.state(mod, graph=False))
             for name, (m, mod) in _models().items()}
    params = _params(_N, _WIDTH)
    impls["jax"] = lambda: jax.tree_util.tree_flatten(params)
    return compare(SUITE, f"tree state {_N} layers", impls, rounds=5 if quick else 9,
                   note="jax = pytree flatten")


def _update(quick: bool, graph: bool) -> Result:
    impls = {}
    sources = _models()
    for name, (m, mod) in _models().items():
        # another model's State: writing a model's own Variables back is a no-op
        st = m.state(sources[name][1], graph=graph)
        impls[name] = lambda m=m, mod=mod, st=st: m.update(mod, st)
    params = _params(_N, _WIDTH)
    impls["jax"] = lambda: jax.tree_util.tree_map(lambda v: v, params)
    mode = "graph" if graph else "tree"
    return compare(SUITE, f"update ({mode}) {_N} layers", impls, rounds=5 if quick else 9,
                   note="jax = tree_map over the same leaves")


def _merge(quick: bool, mapped: bool = False) -> Result:
    """``mapped``: the State is not split's own but a copy made by ``jax.tree.map`` (what
    a jitted step returns), which merge must read afresh."""
    impls = {}
    for name, (m, mod) in _models().items():
        gd, st = m.split(mod)
        if mapped:
            st = jax.tree.map(lambda x: x, st)
        impls[name] = lambda m=m, gd=gd, st=st: m.merge(gd, st)
    leaves, treedef = jax.tree_util.tree_flatten(_params(_N, _WIDTH))
    impls["jax"] = lambda: treedef.unflatten(leaves)
    impls["floor"] = _object_floor(impls["flaxen"]())
    what = "a tree_map'd State" if mapped else "split's State"
    return compare(SUITE, f"merge (graph, {what}) {_N} layers", impls,
                   rounds=5 if quick else 9,
                   note="jax = pytree unflatten; floor = CPython making the same objects")


def _object_floor(model):
    """The least any merge into these classes can cost in CPython: one ``object.__new__``
    and one copy of a finished attribute dict per graph node (what the merged model holds),
    nothing looked up or placed. A Module's class has a managed ``__dict__`` (3.11+), so
    each node costs an object, its inline-values block and a dict, where an unflatten makes
    only the dict."""
    import collections

    from flaxen import nnx

    nodes = [n for _, n in nnx.iter_graph(model) if isinstance(n, nnx.Pytree)]
    classes = tuple(type(n) for n in nodes)
    dicts = tuple(dict(vars(n)) for n in nodes)
    # the ``__dict__`` descriptor all graph nodes share (their most basic class's)
    set_dict = next(k.__dict__["__dict__"] for k in reversed(nnx.Pytree.__mro__)
                    if "__dict__" in k.__dict__).__set__
    new, copy, drain = object.__new__, dict.copy, collections.deque(maxlen=0).extend

    def floor():
        objs = list(map(new, classes))
        drain(map(set_dict, objs, map(copy, dicts)))
        return objs

    return floor


def _pair_split_merge(quick: bool, graph: bool) -> Result:
    """``merge(*split((model_a, model_b)))``: a tuple root, as ``(model, optimizer)``."""
    impls = {}
    for name, (m, mod) in _models().items():
        other = _deep(m, _N, _WIDTH)(m.Rngs(1))
        impls[name] = (lambda m=m, a=mod, b=other:
                       m.merge(*m.split((a, b), graph=graph)))
    pair = (_params(_N, _WIDTH), _params(_N, _WIDTH))

    def jax_impl():
        leaves, treedef = jax.tree_util.tree_flatten(pair)
        return treedef.unflatten(leaves)

    impls["jax"] = jax_impl
    mode = "graph" if graph else "tree"
    return compare(SUITE, f"split+merge ({mode}) of a pair, 2x{_N} layers", impls,
                   rounds=5 if quick else 9, note="jax = pytree flatten+unflatten")


def _jax_step(din: int, dh: int, dout: int, tx, x, y):
    k1, k2 = jax.random.split(jax.random.key(0))
    init = jax.nn.initializers.lecun_normal()
    params = {
        "l1": {"kernel": init(k1, (din, dh)), "bias": jnp.zeros(dh)},
        "l2": {"kernel": init(k2, (dh, dout)), "bias": jnp.zeros(dout)},
    }
    box = [{"params": params, "opt": tx.init(params)}]

    def apply(p, x):
        h = jax.nn.relu(x @ p["l1"]["kernel"] + p["l1"]["bias"])
        return h @ p["l2"]["kernel"] + p["l2"]["bias"]

    @jax.jit
    def jstep(state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((apply(p, x) - y) ** 2))(
            state["params"])
        updates, opt_state = tx.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt": opt_state}, loss

    def jax_impl():
        box[0], loss = jstep(box[0], x, y)
        return loss

    return jax_impl


def _functional(quick: bool) -> Result:
    din, dh, dout, batch = (16, 32, 4, 8) if quick else (64, 128, 10, 32)
    x, y = jnp.ones((batch, din)), jnp.zeros((batch, dout))
    tx = optax.adam(1e-3)
    impls = {}
    for name, (m, _) in _models().items():
        model = _mlp(m, din, dh, dout)(m.Rngs(0))
        opt = m.Optimizer(model, tx, wrt=m.Param)
        gd, st = m.split((model, opt))

        def make(m=m, gd=gd, st=st):
            @jax.jit
            def step(st, x, y):
                model, opt = m.merge(gd, st)

                def loss_fn(model):
                    return jnp.mean((model(x) - y) ** 2)

                loss, grads = m.value_and_grad(loss_fn)(model)
                opt.update(model, grads)
                return loss, m.split((model, opt))[1]

            box = [st]

            def run():
                loss, box[0] = step(box[0], x, y)
                return loss

            return run

        impls[name] = make()
    impls["jax"] = _jax_step(din, dh, dout, tx, x, y)
    return compare(SUITE, f"functional split/jit/merge mlp {din}-{dh}-{dout}", impls,
                   rounds=5 if quick else 21, note="jax = hand-written jitted step")


def _cached_partial(quick: bool) -> Result:
    din, dh, dout, batch = (16, 32, 4, 8) if quick else (64, 128, 10, 32)
    x, y = jnp.ones((batch, din)), jnp.zeros((batch, dout))
    tx = optax.adam(1e-3)
    impls = {}
    for name, (m, _) in _models().items():
        model = _mlp(m, din, dh, dout)(m.Rngs(0))
        opt = m.Optimizer(model, tx, wrt=m.Param)

        def make(m=m, model=model, opt=opt):
            @m.jit
            def step(model, opt, x, y):
                def loss_fn(model):
                    return jnp.mean((model(x) - y) ** 2)

                loss, grads = m.value_and_grad(loss_fn)(model)
                opt.update(model, grads)
                return loss

            cached = m.cached_partial(step, model, opt)
            return lambda: cached(x, y)

        impls[name] = make()
    impls["jax"] = _jax_step(din, dh, dout, tx, x, y)
    return compare(SUITE, f"cached_partial mlp {din}-{dh}-{dout}", impls,
                   rounds=5 if quick else 21, note="jax = hand-written jitted step")


def _linear_eager(quick: bool) -> Result:
    din, dout, batch = 16, 16, 8
    x = jnp.ones((batch, din))
    impls = {}
    for name, (m, _) in _models().items():
        layer = m.Linear(din, dout, rngs=m.Rngs(0))
        impls[name] = lambda layer=layer: layer(x)
    w, b = jnp.ones((din, dout)), jnp.ones(dout)
    impls["jax"] = lambda: x @ w + b
    return compare(SUITE, f"linear eager {din}->{dout} b{batch}", impls,
                   rounds=5 if quick else 9, note="jax = x @ w + b")


def run(quick: bool) -> list[Result]:
    return [_tree_split_merge(quick), _tree_state(quick), _update(quick, graph=False),
            _update(quick, graph=True), _merge(quick), _merge(quick, mapped=True),
            _pair_split_merge(quick, graph=True), _pair_split_merge(quick, graph=False),
            _functional(quick), _cached_partial(quick), _linear_eager(quick)]
