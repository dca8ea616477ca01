"""Differential tests of the Linen lifted transforms against the reference ``flax``.

Every model is written once, as a function of the ``nn`` namespace, and built with both
``flax.linen`` and ``flaxen.linen``. The same key must give the same parameter tree
(names, shapes, dtypes) with bit-identical values (RNG splitting included), and the same
parameters must give the same outputs and gradients.
"""

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import broadcast as fbroadcast

import flaxen.linen as xnn
from flaxen.core import broadcast as xbroadcast

KEY = jax.random.PRNGKey(42)
X = jnp.asarray(np.random.RandomState(0).randn(4, 3), jnp.float32)


def _bits_equal(a, b):
    ta, tb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), (ta, tb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        np.testing.assert_array_equal(x, y)


def _paths(tree):
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return sorted((jax.tree_util.keystr(p), np.shape(v)) for p, v in flat)


def _compare(build, args, rngs=None, apply_rngs=None, method=None, mutable=False,
             grads=True):
    """Builds the model with both libraries; compares init, apply and gradients.

    Everything runs under ``jax.jit`` (one compile for init, one for apply + gradients):
    eager lifted transforms would compile each scan/cond on every call.
    """
    rngs = KEY if rngs is None else rngs
    fmodel, xmodel = build(fnn), build(xnn)
    static = tuple(i for i, a in enumerate(args) if isinstance(a, (bool, int)))
    dyn = [a for i, a in enumerate(args) if i not in static]

    def full(a):
        it = iter(a)
        return tuple(args[i] if i in static else next(it) for i in range(len(args)))

    def init(model):
        return jax.jit(lambda r, a: model.init(r, *full(a), method=method))(rngs, dyn)

    fv, xv = init(fmodel), init(xmodel)
    assert _paths(fv) == _paths(xv)
    _bits_equal(jax.tree_util.tree_map(np.asarray, dict(fv)),
                jax.tree_util.tree_map(np.asarray, dict(xv)))

    def run(model, v):
        def loss(params, a):
            out = model.apply({**v, "params": params}, *full(a), rngs=apply_rngs,
                              method=method, mutable=mutable)
            value = out[0] if mutable else out
            return sum(jnp.sum(t ** 2) for t in jax.tree_util.tree_leaves(value)), out

        params = v.get("params", {})
        if grads and params:
            (_, out), g = jax.jit(jax.value_and_grad(loss, has_aux=True))(params, dyn)
        else:
            out, g = jax.jit(loss)(params, dyn)[1], None
        return out, g

    (fy, fg), (xy, xg) = run(fmodel, fv), run(xmodel, xv)
    np.testing.assert_allclose(
        np.concatenate([np.ravel(t) for t in jax.tree_util.tree_leaves(fy)]),
        np.concatenate([np.ravel(t) for t in jax.tree_util.tree_leaves(xy)]),
        rtol=1e-6, atol=1e-6)
    if fg is not None:
        assert _paths(fg) == _paths(xg)
        for a, b in zip(jax.tree_util.tree_leaves(fg), jax.tree_util.tree_leaves(xg)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
    return fv, xv


# ---------------------------------------------------------------------------------- vmap


def _mlp(nn):
    class MLP(nn.Module):
        features: int = 4

        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(self.features)(x))
            return nn.Dense(2, name="out")(x)

    return MLP


@pytest.mark.parametrize("split, axes", [(True, 0), (False, None), (True, 1)])
def test_vmap_class_params(split, axes):
    def build(nn):
        MLP = _mlp(nn)

        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                V = nn.vmap(MLP, variable_axes={"params": axes}, split_rngs={"params": split},
                            in_axes=0)
                return V(name="mlp")(x) + V()(x)

        return Model()

    # gradients once (axis 0); the other layouts only need init and apply
    fv, xv = _compare(build, (X[:, None, :],), grads=axes == 0)
    assert "VmapMLP_0" in xv["params"] and "mlp" in xv["params"]


def test_vmap_method_target():
    def build(nn):
        class Model(nn.Module):
            def setup(self):
                self.dense = nn.Dense(3)

            def inner(self, x):
                return self.dense(x)

            def __call__(self, x):
                return nn.vmap(type(self).inner, variable_axes={"params": 0},
                               split_rngs={"params": True}, in_axes=1, out_axes=1)(self, x)

        return Model()

    _compare(build, (X.reshape(2, 2, 3),))


def test_vmap_function_target_on_submodule():
    def build(nn):
        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                dense = nn.Dense(3)
                y = nn.vmap(lambda mdl, x: mdl(x), variable_axes={"params": None},
                            split_rngs={"params": False}, in_axes=0)(dense, x)
                return y + dense(x)

        return Model()

    _compare(build, (X,))


def _noisy(nn):
    class Noisy(nn.Module):
        """Dropout-like noise and a running statistic, without depending on nn.Dropout."""

        @nn.compact
        def __call__(self, x, train=True):
            x = nn.Dense(5)(x)
            stat = self.variable("batch_stats", "mean", jnp.zeros, x.shape[-1:])
            if train:
                stat.value = 0.9 * stat.value + 0.1 * x.mean(axis=0)
                keep = jax.random.bernoulli(self.make_rng("dropout"), 0.5, x.shape)
                x = jnp.where(keep, x * 2, 0.0)
            return x - stat.value

    return Noisy


def test_vmap_split_dropout_rngs_and_batch_stats():
    def build(nn):
        return nn.vmap(_noisy(nn), variable_axes={"params": 0, "batch_stats": 0},
                       split_rngs={"params": True, "dropout": True}, in_axes=0)()

    rngs = {"params": KEY, "dropout": jax.random.PRNGKey(1)}
    _compare(build, (jnp.ones((2, 4, 3)),), rngs=rngs,
             apply_rngs={"dropout": jax.random.PRNGKey(2)}, mutable=["batch_stats"])


def test_vmap_axis_size_with_broadcast_input():
    def build(nn):
        return nn.vmap(nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                       in_axes=None, axis_size=3)(2)

    _compare(build, (X,))


# ---------------------------------------------------------------------------------- scan


def test_scan_over_layers_with_partition_metadata():
    def build(nn):
        class DotReluDot(nn.Module):
            depth: int

            @nn.compact
            def __call__(self, x, _):
                w1 = self.param("W1", nn.with_partitioning(nn.initializers.xavier_normal(),
                                                           (None, "model")),
                                (x.shape[-1], self.depth))
                y = jax.nn.relu(x @ w1)
                w2 = self.param("W2", nn.with_partitioning(nn.initializers.xavier_normal(),
                                                           ("model", None)),
                                (self.depth, x.shape[-1]))
                return y @ w2, None

        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                S = nn.scan(DotReluDot, length=3, variable_axes={"params": 0},
                            split_rngs={"params": True},
                            metadata_params={nn.PARTITION_NAME: "layers"})
                x, _ = S(8)(x, None)
                return x

        return MLP()

    fv, xv = _compare(build, (X,))
    box = xv["params"]["ScanDotReluDot_0"]["W1"]
    fbox = fv["params"]["ScanDotReluDot_0"]["W1"]
    assert type(box).__name__ == "Partitioned"
    assert box.names == fbox.names == ("layers", None, "model")
    assert nn_spec(xv) == nn_spec(fv)


def nn_spec(v):
    return jax.tree_util.tree_map(
        lambda s: tuple(s), xnn.get_partition_spec(v) if "flaxen" in str(
            type(jax.tree_util.tree_leaves(v, is_leaf=lambda x: hasattr(x, "names"))[0]))
        else fnn.get_partition_spec(v), is_leaf=lambda s: isinstance(
            s, jax.sharding.PartitionSpec))


def test_scan_lstm_broadcast_params_and_reverse():
    def build(nn):
        class Cell(nn.Module):
            @nn.compact
            def __call__(self, c, x):
                h = nn.tanh(nn.Dense(3, name="ih")(x) + nn.Dense(3, name="hh")(c))
                return h, h * 2

        class Model(nn.Module):
            @nn.compact
            def __call__(self, xs):
                S = nn.scan(Cell, variable_broadcast="params", split_rngs={"params": False},
                            in_axes=1, out_axes=1, reverse=True)
                c, ys = S()(jnp.zeros((xs.shape[0], 3)), xs)
                return c, ys

        return Model()

    _compare(build, (jnp.asarray(np.random.RandomState(1).randn(2, 5, 3), jnp.float32),))


def test_scan_carry_variables_and_broadcast_input():
    # carry variables must exist before the scan: pass the counter in explicitly
    def build2(nn):
        broadcast = fbroadcast if nn is fnn else xbroadcast

        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, x, ctx):
                count = self.variable("counter", "n", jnp.zeros, ())
                count.value += 1
                return c + nn.Dense(3)(x) * ctx, c

        return nn.scan(Body, variable_axes={"params": 0}, variable_carry="counter",
                       split_rngs={"params": True}, in_axes=(0, broadcast))()

    f, x = build2(fnn), build2(xnn)
    xs = jnp.asarray(np.random.RandomState(2).randn(4, 3), jnp.float32)
    counter = {"counter": {"n": jnp.zeros(())}}
    fy, fv = f.apply(counter, jnp.zeros((3,)), xs, 2.0, rngs={"params": KEY},
                     mutable=["params", "counter"])
    xy, xv = x.apply(counter, jnp.zeros((3,)), xs, 2.0, rngs={"params": KEY},
                     mutable=["params", "counter"])
    _bits_equal(dict(fv), dict(xv))
    _bits_equal(fy, xy)
    assert float(xv["counter"]["n"]) == 4.0


def test_remat_scan():
    def build(nn):
        return nn.remat_scan(nn.Dense, lengths=(2, 3))(3)

    _compare(build, (X,))


# --------------------------------------------------------------------------- remat / jit


@pytest.mark.parametrize("transform", ["remat", "jit"])
def test_remat_and_jit_class_with_static_arg(transform):
    def build(nn):
        class Block(nn.Module):
            @nn.compact
            def __call__(self, x, double):
                y = nn.Dense(4)(x)
                y = y * jax.random.bernoulli(self.make_rng("dropout"), 0.7, y.shape)
                return y * 2 if double else y

        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                B = getattr(nn, transform)(Block, static_argnums=(2,))
                return B()(x, True) + B()(x, False)

        return Model()

    rngs = {"params": KEY, "dropout": jax.random.PRNGKey(3)}
    _compare(build, (X,), rngs=rngs, apply_rngs={"dropout": jax.random.PRNGKey(4)})


def test_remat_and_jit_decorators():
    def build(nn):
        class Model(nn.Module):
            @nn.jit
            @nn.compact
            def __call__(self, x):
                return self.helper(nn.Dense(3)(x))

            @nn.remat
            @nn.compact
            def helper(self, x):
                return nn.Dense(2)(x)

        return Model()

    # several compact methods are allowed in today's Flax; under jit/remat too
    _compare(build, (X,))

    def build2(nn):
        class Model(nn.Module):
            def setup(self):
                self.a = nn.Dense(3)
                self.b = nn.Dense(2)

            @nn.jit
            def __call__(self, x):
                return self.helper(self.a(x))

            @nn.remat
            def helper(self, x):
                return self.b(x)

        return Model()

    _compare(build2, (X,))


# ------------------------------------------------------------------------ map_variables


def test_map_variables_causal_mask():
    def build(nn):
        class CausalDense(nn.Module):
            n_out: int

            def apply_mask(self, variables):
                return (jax.tree_util.tree_map(jnp.triu, variables)
                        if not self.is_initializing() else variables)

            def setup(self):
                self.dense = nn.map_variables(nn.Dense, "params", self.apply_mask, init=True)(
                    features=self.n_out, use_bias=False)

            def __call__(self, x):
                return self.dense(x)

        return CausalDense(3)

    fv, xv = _compare(build, (X,))


def test_add_metadata_axis():
    def build(nn):
        class Layer(nn.Module):
            @nn.compact
            def __call__(self, x):
                w = self.param("w", nn.with_partitioning(nn.initializers.ones, ("in", "out")),
                               (x.shape[-1], 2))
                return x @ w

        return nn.add_metadata_axis(Layer, variable_axes={"params": 0},
                                    metadata_params={nn.PARTITION_NAME: "stack"})()

    fv, xv = _compare(build, (X,), grads=False)
    assert xv["params"]["w"].names == fv["params"]["w"].names


# ------------------------------------------------------------------------- control flow


def test_cond_switch_while_loop():
    def build(nn):
        class Model(nn.Module):
            def setup(self):
                self.dense = nn.Dense(3)
                self.other = nn.Dense(3)

            def __call__(self, x, pred, idx):
                if self.is_initializing():
                    self.other(x)  # branches must see the same variables: create both first
                y = nn.cond(pred, lambda m, x: m.dense(x), lambda m, x: -m.dense(x), self, x)
                z = nn.switch(idx, [lambda m, x: m.other(x), lambda m, x: 2 * m.dense(x)],
                              self, x)

                def body(mdl, c):
                    i, v = c
                    return i + 1, jnp.tanh(mdl.dense(v))

                _, w = nn.while_loop(lambda mdl, c: c[0] < 3, body, self, (0, z))
                return y + z + w

        return Model()

    for pred, idx in [(True, 0), (False, 1)]:
        # reverse-mode differentiation of a while_loop is not defined in JAX
        _compare(build, (X, pred, idx), grads=False)


def test_autodiff_transforms():
    def build(nn):
        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                dense = nn.Dense(3)
                dense(x)  # create the params before differentiating with respect to them
                y, bwd = nn.vjp(lambda m, x: m(x), dense, x)
                p_grad, x_grad = bwd(jnp.ones_like(y))
                value, (g,) = nn.value_and_grad(lambda m, x: jnp.sum(m(x) ** 2), dense, x)
                (g2,), aux = nn.grad(lambda m, x: (jnp.sum(m(x)), 1.0), dense, x,
                                     has_aux=True)
                out, tangent = nn.jvp(lambda m, x: m(x), dense, (x,), (jnp.ones_like(x),),
                                      {"params": jax.tree_util.tree_map(
                                          jnp.ones_like, dense.variables["params"])})

                def f(mdl, x):
                    return mdl(x)

                def fwd(mdl, x):
                    return nn.vjp(f, mdl, x)

                def bwd2(vjp_fn, y_t):
                    params_t, *inputs_t = vjp_fn(y_t)
                    return (jax.tree_util.tree_map(jnp.sign, params_t), *inputs_t)

                sign = nn.custom_vjp(f, forward_fn=fwd, backward_fn=bwd2)(dense, x)
                p_sum = sum(jnp.sum(t) for t in jax.tree_util.tree_leaves(p_grad))
                return (p_sum + x_grad.sum() + value + g.sum() + g2.sum()
                        + aux + out.sum() + tangent.sum() + sign.sum())

        return Model()

    _compare(build, (X,))


# -------------------------------------------------------------- legacy partitioning API


def test_partitioning_scan_and_vmap_with_axes():
    import flax.linen.partitioning as fp

    import flaxen.linen.partitioning as xp

    def build(nn, P, kind):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, _):
                w = P.param_with_axes("w", nn.initializers.lecun_normal(), (3, 3),
                                      axes=("embed", "mlp"))
                return c @ w, None

        class VBody(nn.Module):
            @nn.compact
            def __call__(self, x):
                return Body()(x, None)[0]

        if kind == "scan":
            return P.scan_with_axes(Body, variable_axes={"params": 0},
                                    split_rngs={"params": True}, length=3)(), (X, None)
        return P.vmap_with_axes(VBody, variable_axes={"params": 1},
                                split_rngs={"params": True},
                                partitioning_axis_names={"params": "ens"})(), (X[None],)

    for kind in ("scan", "vmap"):
        (fm, args), (xm, _) = build(fnn, fp, kind), build(xnn, xp, kind)
        assert type(fm).__name__ == type(xm).__name__
        fv, xv = fm.init(KEY, *args), xm.init(KEY, *args)
        _bits_equal(fv["params"], xv["params"])
        f_names = jax.tree_util.tree_map(tuple, fp.get_axis_names(fv["params_axes"]),
                                         is_leaf=lambda s: isinstance(
                                             s, jax.sharding.PartitionSpec))
        x_names = jax.tree_util.tree_map(tuple, xp.get_axis_names(xv["params_axes"]),
                                         is_leaf=lambda s: isinstance(
                                             s, jax.sharding.PartitionSpec))
        assert dict(f_names) == dict(x_names)


@pytest.mark.parametrize("transform", ["jit", "remat", "vmap"])
def test_function_target_creating_submodules_keeps_auto_names(transform):
    def build(nn):
        kwargs = ({"variable_axes": {"params": None}, "split_rngs": {"params": False}}
                  if transform == "vmap" else {})

        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.Dense(3)(x)
                x = getattr(nn, transform)(lambda mdl, x: nn.Dense(3)(x), **kwargs)(self, x)
                return nn.Dense(2)(x)

        return Model()

    fv, xv = _compare(build, (X,), grads=transform == "remat")
    assert sorted(xv["params"]) == ["Dense_0", "Dense_1", "Dense_2"]
    # a second apply (a cached trace under jit) must see the same names
    model = build(xnn)
    np.testing.assert_allclose(model.apply(xv, X), model.apply(xv, X), rtol=1e-6)


def test_vmap_batchnorm_axis_name_and_dropout_layers():
    """The lifted-transforms note's StatefulMLP: BatchNorm statistics across a vmap axis."""

    def build(nn):
        class StatefulMLP(nn.Module):
            @nn.compact
            def __call__(self, x, train=True):
                h = nn.Dense(4, name="hidden")(x)
                h = nn.BatchNorm(axis_name="batch")(h, use_running_average=not train)
                h = nn.Dropout(0.5, deterministic=not train)(h)
                return nn.Dense(1, name="out")(h)

        return nn.vmap(StatefulMLP, variable_axes={"params": 0, "batch_stats": 0},
                       split_rngs={"params": True, "dropout": True}, in_axes=0,
                       axis_name="batch")()

    rngs = {"params": KEY, "dropout": jax.random.PRNGKey(1)}
    _compare(build, (jnp.asarray(np.random.RandomState(3).randn(3, 2, 5), jnp.float32),),
             rngs=rngs, apply_rngs={"dropout": jax.random.PRNGKey(2)},
             mutable=["batch_stats"], grads=False)


def test_module_inside_pytree_argument_is_lifted():
    """The Module-lifecycle note's workaround: pass Modules inside a pytree, not a closure."""
    import flax.struct as fstruct

    import flaxen.struct as xstruct

    def build(nn):
        struct = fstruct if nn is fnn else xstruct

        class Partial(struct.PyTreeNode):
            fn: object = struct.field(pytree_node=False)
            args: tuple

            def __call__(self, *args):
                return self.fn(*self.args, *args)

        class Foo(nn.Module):
            @nn.compact
            def __call__(self, x):
                dense = nn.Dense(x.shape[-1])
                fn = lambda mdl, x: mdl(x) + 1  # noqa: E731
                vmap_inner = nn.vmap(Foo.inner, in_axes=0, variable_axes={"params": 0},
                                     split_rngs={"params": True})
                return vmap_inner(self, x, Partial(fn, (dense,)))

            def inner(self, x, fn):
                for _ in range(2):
                    x = fn(x)
                return x

        return Foo()

    fv, xv = _compare(build, (X.reshape(2, 2, 3),), grads=False)
    assert xv["params"]["Dense_0"]["kernel"].shape == (2, 3, 3)


def test_scan_setup_style_residual_blocks_in_setup():
    """The API docs' stacked ResidualMLPBlock, with the scan built in the parent's setup."""

    def build(nn):
        class ResidualMLPBlock(nn.Module):
            def setup(self):
                self.up = nn.Dense(6)
                self.down = nn.Dense(3)

            def __call__(self, x, _):
                h = self.down(nn.relu(self.up(x)))
                return x + h, None

        class Model(nn.Module):
            n_layers: int = 3

            def setup(self):
                self.blocks = nn.scan(ResidualMLPBlock, variable_axes={"params": 0},
                                      split_rngs={"params": True}, length=self.n_layers)()

            def __call__(self, x):
                return self.blocks(x, None)[0]

        return Model()

    fv, xv = _compare(build, (X,))
    assert xv["params"]["blocks"]["up"]["kernel"].shape == (3, 3, 6)


@pytest.mark.parametrize("marker", ["In", "Out"])
def test_scan_with_in_out_axis_markers(marker):
    """Initialised with a plain axis, then run with ``In``/``Out`` (t5x's ScanIn/ScanOut)."""
    import flax.core.lift as flift

    import flaxen.core.lift as xlift

    def run(nn, lift):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, x, _):
                y = nn.Dense(3)(x)
                self.sow("intermediates", "y", y)
                return y, None

        def build(axis):
            return nn.scan(Body, variable_axes={"params": axis, "intermediates": 0},
                           split_rngs={"params": True}, length=3)()

        variables = build(0).init(KEY, X, None)
        try:
            return build(getattr(lift, marker)(0)).apply(
                {"params": variables["params"]}, X, None, mutable=["intermediates"])
        except Exception as e:  # noqa: BLE001 - the error class is compared
            return type(e).__name__

    got, want = run(xnn, xlift), run(fnn, flift)
    if isinstance(want, str):
        assert got == want
    else:
        _bits_equal(got, want)


@pytest.mark.parametrize("transform", ["vmap", "scan"])
def test_keyword_arguments_of_mapped_modules_are_dropped_with_flaxs_warning(transform):
    def build(nn):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, x=None, scale=1.0):
                y = nn.Dense(3)(c) * scale
                return (y, x) if transform == "scan" else y

        if transform == "scan":
            return nn.scan(Body, variable_axes={"params": 0}, split_rngs={"params": True},
                           length=2)()
        return nn.vmap(Body, variable_axes={"params": 0}, split_rngs={"params": True})()

    def run(nn):
        args = (X, None) if transform == "scan" else (X[:, None],)
        with pytest.warns(RuntimeWarning) as record:
            out = build(nn).init_with_output(KEY, *args, scale=7.0)
        return out, [str(w.message).split(":")[0] for w in record]

    (fout, fmsgs), (xout, xmsgs) = run(fnn), run(xnn)
    _bits_equal(xout, fout)
    assert xmsgs == fmsgs


@pytest.mark.parametrize("mutable", [False, True])
def test_map_variables_key_order_matches_flax(mutable):
    def order(nn):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))

        cols = ["params", "batch_stats"] if mutable else "params"
        mapped = nn.map_variables(Body, cols, init=True, mutable=mutable)()
        variables = mapped.init(KEY, X)
        _, state = mapped.apply(variables, X, mutable=True)

        def keys(tree):
            return [(k, keys(v)) if hasattr(v, "items") else k for k, v in tree.items()]

        return keys(variables), keys(state)

    assert order(xnn) == order(fnn)
