"""Tests of the Linen lifted transforms (``flaxen.linen.transforms``): targets, naming,
variables created/consumed through the transform, and the error for each bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import errors
from flaxen.core import broadcast

KEY = jax.random.PRNGKey(0)


class MLP(nn.Module):
    features: int = 3

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features)(nn.relu(nn.Dense(4)(x)))


class DotReluDot(nn.Module):
    depth: int

    @nn.compact
    def __call__(self, x, _):
        w1 = self.param("W1", nn.with_partitioning(nn.initializers.xavier_normal(),
                                                   (None, "model")), (x.shape[-1], self.depth))
        y = jax.nn.relu(x @ w1)
        w2 = self.param("W2", nn.with_partitioning(nn.initializers.xavier_normal(),
                                                   ("model", None)), (self.depth, x.shape[-1]))
        return y @ w2, None


# --------------------------------------------------------------------- targets and names


@pytest.mark.parametrize("transform, prefix", [
    (lambda t: nn.vmap(t, variable_axes={"params": 0}, split_rngs={"params": True}), "Vmap"),
    (lambda t: nn.scan(t, variable_axes={"params": 0}, split_rngs={"params": True}), "Scan"),
    (nn.jit, "Jit"), (nn.remat, "Checkpoint"), (nn.checkpoint, "Checkpoint"),
    (nn.map_variables, "Map_variables"), (nn.fold_rngs, "Fold_rngs"),
])
def test_class_transform_names_subclass(transform, prefix):
    cls = transform(MLP)
    assert cls.__name__ == prefix + "MLP"
    assert issubclass(cls, MLP)
    assert cls.__module__ == "flaxen.linen.transforms"


def test_scanned_class_auto_name_and_explicit_name():
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            S = nn.scan(DotReluDot, length=2, variable_axes={"params": 0},
                        split_rngs={"params": True}, metadata_params={nn.PARTITION_NAME: None})
            x, _ = S(5)(x, None)
            x, _ = S(5, name="named")(x, None)
            return x

    variables = Model().init(KEY, jnp.ones((2, 3)))
    assert list(variables["params"]) == ["ScanDotReluDot_0", "named"]
    w1 = variables["params"]["ScanDotReluDot_0"]["W1"]
    assert w1.value.shape == (2, 3, 5)
    assert w1.names == (None, None, "model")
    spec = nn.get_partition_spec(variables)["params"]["ScanDotReluDot_0"]
    assert spec["W2"] == jax.sharding.PartitionSpec(None, "model", None)


@pytest.mark.parametrize("bad", [3, "abc", None, int, MLP(), lambda: 0])
def test_transform_target_error(bad):
    for t in (nn.vmap, nn.jit, nn.remat, nn.map_variables):
        with pytest.raises(errors.TransformTargetError, match="Module"):
            t(bad)


def test_direct_transform_rejects_module_class_and_non_module():
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.vjp(MLP, self, x)

    with pytest.raises(errors.TransformTargetError, match="nn.vjp"):
        Foo().init(KEY, jnp.ones((1, 2)))
    with pytest.raises(ValueError):  # also a ValueError, as Flax raises
        Foo().init(KEY, jnp.ones((1, 2)))

    class NotCallable(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.cond(True, 3, lambda m, x: x, self, x)

    with pytest.raises(errors.TransformTargetError, match="nn.cond.*3"):
        NotCallable().init(KEY, jnp.ones((1, 2)))

    class Bar(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.vjp(lambda m, x: x, "not a module", x)

    with pytest.raises(TypeError, match="Module instance"):
        Bar().init(KEY, jnp.ones((1, 2)))


def test_returning_a_module_is_an_error():
    class Ret(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)

    with pytest.raises(errors.TransformedMethodReturnValueError, match="__call__"):
        nn.jit(Ret)().init(KEY, 1.0)


def test_methods_argument_forms():
    class Two(nn.Module):
        def setup(self):
            self.d = nn.Dense(2)

        def __call__(self, x):
            return self.d(x)

        def other(self, x):
            return self.d(x) * 2

    V = nn.vmap(Two, variable_axes={"params": 0}, split_rngs={"params": True},
                methods=["__call__", "other"])
    v = V().init(KEY, jnp.ones((3, 2, 4)), method="other")
    assert v["params"]["d"]["kernel"].shape == (3, 4, 2)
    V2 = nn.vmap(Two, methods={"other": dict(variable_axes={"params": 0},
                                              split_rngs={"params": True}, in_axes=1)})
    v2 = V2().init(KEY, jnp.ones((3, 2, 4)), method="other")
    assert v2["params"]["d"]["kernel"].shape == (2, 4, 2)
    with pytest.raises(ValueError, match="methods"):
        nn.vmap(Two, methods=3)
    with pytest.raises(AttributeError, match="nope"):
        nn.jit(Two, methods=["nope"])


def test_unbound_call_is_a_clear_error():
    with pytest.raises(ValueError, match="unbound"):
        nn.jit(MLP)()(jnp.ones((1, 2)))


# ------------------------------------------------------------------------ vmap


def test_vmap_in_setup_and_compact_stack_params_and_apply_consumes_them():
    class InSetup(nn.Module):
        def setup(self):
            self.ens = nn.vmap(MLP, variable_axes={"params": 0},
                               split_rngs={"params": True})(2)

        def __call__(self, x):
            return self.ens(x)

    class InCompact(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True})(2)(x)

    x = jnp.arange(12.0).reshape(3, 2, 2)
    for model, name in ((InSetup(), "ens"), (InCompact(), "VmapMLP_0")):
        v = model.init(KEY, x)
        kernels = v["params"][name]["Dense_1"]["kernel"]  # Dense(4), built second
        assert kernels.shape == (3, 2, 4)
        # split rngs: every member is initialised differently
        assert not np.allclose(kernels[0], kernels[1])
        y = model.apply(v, x)
        member0 = MLP(2).apply(
            {"params": jax.tree_util.tree_map(lambda a: a[0], v["params"][name])}, x[0])
        np.testing.assert_allclose(y[0], member0, rtol=1e-6)


def test_vmap_shared_params_are_broadcast():
    V = nn.vmap(MLP, variable_axes={"params": None}, split_rngs={"params": False})
    v = V(2).init(KEY, jnp.ones((5, 1, 3)))
    assert v["params"]["Dense_1"]["kernel"].shape == (3, 4)


def test_vmap_modules_and_variables_as_arguments():
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            a, b = nn.Dense(2, name="a"), nn.Dense(2, name="b")
            counter = self.variable("state", "count", jnp.zeros, ())

            def f(mdl, other, var, x):
                var.value = var.value + 1
                return mdl(x) + other(x)

            y = nn.vmap(f, variable_axes={"params": 0, "state": None},
                        split_rngs={"params": True}, in_axes=(None, None, 0))(a, b, counter, x)
            return y

    x = jnp.ones((3, 1, 4))
    y, v = Model().init_with_output(KEY, x)
    assert v["params"]["a"]["kernel"].shape == (3, 4, 2)
    assert v["params"]["b"]["kernel"].shape == (3, 4, 2)
    assert float(v["state"]["count"]) == 1.0


def test_vmap_write_to_broadcast_collection_is_explained():
    class Stat(nn.Module):
        @nn.compact
        def __call__(self, x):
            s = self.variable("stats", "mean", lambda: jnp.zeros(()))
            s.value = s.value + x.mean()
            return x

    V = nn.vmap(Stat, variable_axes={"stats": None}, split_rngs={"params": False})
    with pytest.raises(ValueError, match=r"/stats/mean.*broadcast.*variable_axes"):
        V().init(KEY, jnp.ones((3, 2)))


def test_vmap_partitioned_metadata_needs_partition_name():
    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x):
            w = self.param("w", nn.with_partitioning(nn.initializers.ones, ("in", "out")),
                           (x.shape[-1], 2))
            return x @ w

    V = nn.vmap(Layer, variable_axes={"params": 0}, split_rngs={"params": True})
    with pytest.raises(errors.PartitioningUnspecifiedError):
        V().init(KEY, jnp.ones((3, 1, 2)))
    V = nn.vmap(Layer, variable_axes={"params": 0}, split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: "ens"})
    v = V().init(KEY, jnp.ones((3, 1, 2)))
    assert v["params"]["w"].names == ("ens", "in", "out")
    assert V().apply(v, jnp.ones((3, 1, 2))).shape == (3, 1, 2)


# ------------------------------------------------------------------------ scan


def test_scan_function_target_scans_from_third_argument():
    class Model(nn.Module):
        @nn.compact
        def __call__(self, xs):
            dense = nn.Dense(3)

            def body(mdl, c, x, scale):
                h = mdl(c) + x * scale
                return h, h.sum()

            return nn.scan(body, variable_broadcast="params", split_rngs={"params": False},
                           in_axes=(0, broadcast))(dense, jnp.zeros((3,)), xs, 2.0)

    (c, ys), v = Model().init_with_output(KEY, jnp.ones((5, 3)))
    assert ys.shape == (5,) and c.shape == (3,)
    assert v["params"]["Dense_0"]["kernel"].shape == (3, 3)


def test_scan_body_must_return_a_pair():
    class Bad(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            return c + x

    with pytest.raises(TypeError, match=r"\(carry, ys\)"):
        nn.scan(Bad)().init(KEY, jnp.zeros(()), jnp.ones((3,)))


def test_scan_carry_variable_created_inside_body_is_an_error():
    class Counter(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            cnt = self.variable("counter", "n", lambda: jnp.zeros(()))
            cnt.value += 1
            return c + x, x

    S = nn.scan(Counter, variable_carry="counter", split_rngs={"params": False},
                variable_broadcast="params")
    with pytest.raises(ValueError, match="[Cc]arry variables cannot be created"):
        S().init(KEY, jnp.zeros(()), jnp.ones((3,)))
    # created before the loop, the carry works and counts the iterations
    (_, _), state = S().apply({"counter": {"n": jnp.zeros(())}}, jnp.zeros(()),
                              jnp.ones((3,)), mutable=["counter"])
    assert float(state["counter"]["n"]) == 3.0


def test_remat_scan_stacks_one_axis_per_level():
    v = nn.remat_scan(nn.Dense, lengths=(2, 2))(3).init(KEY, jnp.ones((1, 3)))
    assert v["params"]["kernel"].shape == (2, 2, 3, 3)


# ------------------------------------------------------------------------ jit / remat


def test_jit_reuses_traces_and_retraces_on_new_config():
    traces = []

    class Traced(nn.Module):
        scale: float = 1.0

        @nn.compact
        def __call__(self, x):
            traces.append(self.scale)
            return nn.Dense(2)(x) * self.scale

    J = nn.jit(Traced)
    x = jnp.ones((1, 3))
    v = J().init(KEY, x)
    n = len(traces)
    J().apply(v, x)
    J().apply(v, x)
    assert len(traces) == n + 1  # one trace for apply, reused by the second call
    J(scale=2.0).apply(v, x)
    assert len(traces) == n + 2
    np.testing.assert_allclose(J(scale=2.0).apply(v, x), 2 * J().apply(v, x), rtol=1e-6)


def test_jit_and_remat_static_argnums_count_self():
    class Flag(nn.Module):
        @nn.compact
        def __call__(self, x, double):
            y = nn.Dense(2)(x)
            return y * 2 if double else y

    x = jnp.ones((1, 3))
    for t in (nn.jit, nn.remat):
        M = t(Flag, static_argnums=(2,))
        v = M().init(KEY, x, True)
        np.testing.assert_allclose(M().apply(v, x, True), 2 * M().apply(v, x, False))
    with pytest.raises(ValueError, match="argument 0 is the Module"):
        nn.remat(Flag, static_argnums=(0,))
    J = nn.jit(Flag, static_argnames=("double",))
    v = J().init(KEY, x, double=True)
    np.testing.assert_allclose(J().apply(v, x, double=True), 2 * J().apply(v, x, double=False))


def test_jit_decorator_keeps_submodule_names():
    class Model(nn.Module):
        @nn.jit
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(nn.Dense(3)(x))

    v = Model().init(KEY, jnp.ones((1, 2)))
    assert sorted(v["params"]) == ["Dense_0", "Dense_1"]
    assert Model().apply(v, jnp.ones((1, 2))).shape == (1, 2)


def test_remat_gradients_match_plain():
    x = jnp.ones((2, 3))
    v = MLP().init(KEY, x)
    g = jax.grad(lambda p: MLP().apply(p, x).sum())(v)
    g2 = jax.grad(lambda p: nn.remat(MLP)().apply(p, x).sum())(v)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# ------------------------------------------------------------------------ variables / rngs


def test_map_variables_out_fn_applied_only_when_mutable_or_init():
    calls = []

    def record(vs):
        calls.append(1)
        return vs

    zero = lambda vs: jax.tree_util.tree_map(jnp.zeros_like, vs)  # noqa: E731
    M = nn.map_variables(nn.Dense, "params", zero, record, init=True)
    x = jnp.ones((1, 3))
    v = M(2).init(KEY, x)
    assert calls  # init: variables go out through trans_out_fn
    calls.clear()
    applied = nn.map_variables(nn.Dense, "params", zero, record)  # init=False, immutable
    assert float(jnp.abs(applied(2).apply(v, x)).sum()) == 0.0  # trans_in_fn zeroes them
    assert not calls  # neither init nor mutable: trans_out_fn is not applied


def test_add_metadata_axis_adds_and_removes_names():
    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x):
            w = self.param("w", nn.with_partitioning(nn.initializers.ones, ("a", "b")), (2, 2))
            return x @ w

    M = nn.add_metadata_axis(Layer, variable_axes={"params": 0},
                             metadata_params={nn.PARTITION_NAME: "stack"})
    v = M().init(KEY, jnp.ones((1, 2)))
    assert v["params"]["w"].names == ("stack", "a", "b")
    assert M().apply(v, jnp.ones((1, 2))).shape == (1, 2)
    assert nn.add_metadata_axis(Layer) is Layer


def test_fold_rngs_gives_fresh_keys_per_call():
    class Noise(nn.Module):
        @nn.compact
        def __call__(self):
            return jax.random.uniform(self.make_rng("noise"))

    class Model(nn.Module):
        @nn.compact
        def __call__(self):
            F = nn.fold_rngs(Noise)
            return F()(), F()()

    a, b = Model().apply({}, rngs={"noise": KEY})
    assert float(a) != float(b)


# ------------------------------------------------------------------------ autodiff / control


def test_grad_value_and_grad_and_vjp_shapes():
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            dense = nn.Dense(2)
            dense(x)
            f = lambda m, x: jnp.sum(m(x))  # noqa: E731
            value, (gx,) = nn.value_and_grad(f, dense, x)
            (gx2,), aux = nn.grad(lambda m, x: (f(m, x), 7.0), dense, x, has_aux=True)
            y, bwd, aux2 = nn.vjp(lambda m, x: (m(x), 1.0), dense, x, has_aux=True)
            pg, xg = bwd(jnp.ones_like(y))
            return value, gx, gx2, aux, pg, xg, aux2

    x = jnp.ones((1, 3))
    (value, gx, gx2, aux, pg, xg, aux2), v = Model().init_with_output(KEY, x)
    kernel = v["params"]["Dense_0"]["kernel"]
    np.testing.assert_allclose(gx, jnp.broadcast_to(kernel.sum(1), (1, 3)), rtol=1e-6)
    np.testing.assert_allclose(gx2, gx)
    assert aux == 7.0 and aux2 == 1.0
    np.testing.assert_allclose(pg["params"]["kernel"], jnp.ones((3, 2)))
    np.testing.assert_allclose(xg, gx, rtol=1e-6)


def test_cond_branches_share_variables_and_switch_selects():
    class Model(nn.Module):
        def setup(self):
            self.dense = nn.Dense(2)

        def __call__(self, x, pred, i):
            y = nn.cond(pred, lambda m, x: m.dense(x), lambda m, x: -m.dense(x), self, x)
            z = nn.switch(i, [lambda m, x: x.sum(), lambda m, x: 10 * x.sum()], self, x)
            return y, z

    x = jnp.ones((1, 3))
    v = Model().init(KEY, x, True, 0)
    (y1, z0), (y2, z1) = Model().apply(v, x, True, 0), Model().apply(v, x, False, 1)
    np.testing.assert_allclose(y1, -y2)
    assert float(z1) == 10 * float(z0)


def test_while_loop_carry_variables():
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            count = self.variable("state", "n", jnp.zeros, ())

            def body(mdl, c):
                mdl.put_variable("state", "n", mdl.get_variable("state", "n") + 1)
                return c * 2

            return nn.while_loop(lambda mdl, c: jnp.sum(c) < 100, body, self, x,
                                 carry_variables="state"), count.value

    (y, _), state = Model().apply({"state": {"n": jnp.zeros(())}}, jnp.ones(()),
                                  mutable=["state"])
    assert float(y) == 128.0
    assert float(state["state"]["n"]) == 7.0


def test_named_call_labels_and_returns():
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.transforms.named_call(lambda self, x: x * 2)(self, x)

    assert float(Foo().apply({}, 2.0)) == 4.0


def test_jit_cache_distinguishes_unhashable_fields():
    class AddConst(nn.Module):
        const: jnp.ndarray

        @nn.compact
        def __call__(self, x):
            return x + self.const

    J = nn.jit(AddConst)
    for value in (1.0, 2.0, 3.0):
        out = J(jnp.full((2,), value)).apply({}, jnp.zeros((2,)))
        np.testing.assert_allclose(out, [value, value])


def test_value_and_grad_has_aux_nests_value_and_aux():
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x):
            d = nn.Dense(2)
            d(x)
            (value, aux), (gx,) = nn.value_and_grad(
                lambda m, x: (jnp.sum(m(x)), m(x)), d, x, has_aux=True)
            (gx2,), aux2 = nn.grad(lambda m, x: (jnp.sum(m(x)), m(x)), d, x, has_aux=True)
            return value.shape, aux.shape, gx.shape, gx2.shape, aux2.shape

    out, _ = Foo().init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    assert out == ((), (1, 2), (1, 3), (1, 3), (1, 2))


@pytest.mark.parametrize("transform", ["scan", "vmap"])
def test_params_initialised_mapped_can_be_applied_as_input_only_axes(transform):
    """maxtext applies a scanned stack with ``variable_axes={'params': ScanIn(0)}``: the
    params go in mapped and nothing of theirs comes out."""
    from flaxen.core.lift import In

    class Body(nn.Module):
        @nn.compact
        def __call__(self, x, *rest):
            y = nn.Dense(3)(x)
            return (y, None) if rest else y

    def build(axis):
        if transform == "scan":
            return nn.scan(Body, variable_axes={"params": axis}, split_rngs={"params": True},
                           length=2)()
        return nn.vmap(Body, variable_axes={"params": axis}, split_rngs={"params": True})()

    args = (jnp.ones((1, 3)), None) if transform == "scan" else (jnp.ones((2, 1, 3)),)
    variables = build(0).init(KEY, *args)
    out = build(In(0)).apply(variables, *args)
    expected = build(0).apply(variables, *args)
    np.testing.assert_array_equal(out[0] if transform == "scan" else out,
                                  expected[0] if transform == "scan" else expected)


@pytest.mark.parametrize("transform", ["vmap", "scan", "custom_vjp"])
def test_keywords_to_a_vmapped_scanned_or_custom_vjp_call_are_dropped_with_a_warning(transform):
    class Body(nn.Module):
        @nn.compact
        def __call__(self, x, ys=None, scale=1.0):
            y = nn.Dense(2)(x) * scale
            return (y, ys) if transform == "scan" else y

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            if transform == "vmap":
                layer = nn.vmap(Body, variable_axes={"params": 0},
                                split_rngs={"params": True})()
                return layer(x, scale=5.0)
            if transform == "scan":
                layer = nn.scan(Body, variable_axes={"params": 0},
                                split_rngs={"params": True}, length=2)()
                return layer(x, None, scale=5.0)[0]
            fn = nn.custom_vjp(lambda m, x, scale=1.0: m(x) * scale,
                               lambda m, x, scale=1.0: (m(x) * scale, None),
                               lambda res, g: ({"params": {}}, g))
            return fn(nn.Dense(2), x, scale=5.0)

    x = jnp.ones((2, 1, 2)) if transform == "vmap" else jnp.ones((1, 2))
    with pytest.warns(RuntimeWarning, match=f"kwargs are not supported in {transform}"):
        y, variables = Outer().init_with_output(KEY, x)
    # The keyword never reached the body: the output is the one of the default scale.
    with pytest.warns(RuntimeWarning, match='"scale" is'):
        again = Outer().apply(variables, x)
    np.testing.assert_array_equal(again, y)
    if transform == "custom_vjp":
        dense = variables["params"]["Dense_0"]
        np.testing.assert_allclose(y, x @ dense["kernel"] + dense["bias"], rtol=1e-6)


def test_map_variables_hands_back_variables_in_sorted_key_order():
    """Variables entering a lifted transform are copied with sorted keys (Flax copies them
    with a pytree map); map_variables hands that order back."""

    class Body(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))

    mapped = nn.map_variables(Body, ["params", "batch_stats"], init=True, mutable=True)()
    variables = mapped.init(KEY, jnp.ones((2, 4)))
    assert list(variables) == ["batch_stats", "params"]
    assert list(variables["params"]) == ["BatchNorm_0", "Dense_0"]
    assert list(variables["params"]["Dense_0"]) == ["bias", "kernel"]
