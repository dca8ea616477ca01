"""nnx.capture (today's API): sow/perturb stores carried through transforms, grads of
perturbations, filters that select nothing, and method_outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


class Scale(nnx.Module):
    """Multiplies by a Param; sows its output and perturbs its input."""

    def __init__(self, n: int):
        self.w = nnx.Param(jnp.arange(1.0, n + 1.0))

    def __call__(self, x):
        x = self.perturb("dx", x)
        y = x * self.w[...]
        self.sow(nnx.Intermediate, "out", y)
        return y


class Chain(nnx.Module):
    def __init__(self):
        self.first = Scale(3)
        self.second = Scale(3)

    def __call__(self, x):
        return self.second(self.first(x))


def test_nothing_is_left_on_the_modules():
    model = Chain()
    before = set(vars(model.first))
    _, sown = nnx.capture(model, nnx.Intermediate)(jnp.ones(3))
    assert set(vars(model.first)) == before
    assert "__captures__" not in vars(model) and "__captures__" not in model._pytree__nodes
    assert sorted(sown) == ["first", "second"]
    assert type(model) is Chain


def test_sow_outside_a_capture_still_sets_the_attribute():
    model = Scale(2)
    model(jnp.ones(2))
    assert isinstance(model.out, nnx.Intermediate)
    assert isinstance(model.dx, nnx.Perturbation)


def test_a_type_not_captured_is_dropped():
    class Both(nnx.Module):
        def __call__(self, x):
            kept = self.sow(nnx.Intermediate, "a", x)
            dropped = self.sow(nnx.BatchStat, "b", x)
            return kept, dropped

    model = Both()
    (kept, dropped), sown = nnx.capture(model, nnx.Intermediate)(1.0)
    assert (kept, dropped) == (True, False)
    assert list(sown) == ["a"] and "b" not in vars(model)


def test_several_types_give_a_tuple_of_states():
    model = Scale(2)
    _, inter, pert = nnx.capture(model, nnx.Intermediate, nnx.Perturbation)(jnp.ones(2))
    assert list(inter) == ["out"] and list(pert) == ["dx"]
    assert isinstance(pert["dx"], nnx.Perturbation)
    np.testing.assert_array_equal(pert["dx"][...], jnp.zeros(2))


def test_sow_inside_vmap_reaches_the_capture_graph_mode():
    model = Scale(3)
    axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})

    @nnx.vmap(in_axes=(axes, 0), graph=True, graph_updates=True)
    def batched(m, x):
        return m(x)

    @nnx.jit
    def run(m, xs):
        return nnx.capture(batched, nnx.Intermediate)(m, xs)

    xs = jnp.arange(6.0).reshape(2, 3)
    ys, sown = run(model, xs)
    np.testing.assert_allclose(sown["out"][0], ys)
    assert sown["out"][0].shape == (2, 3)
    assert "out" not in vars(model)


def test_sow_inside_vmap_reaches_the_capture_tree_mode():
    model = Scale(3)

    def batched(m, xs):
        axes = nnx.prefix(m, {nnx.Intermediate: 0, ...: None}, graph=False)
        return nnx.vmap(lambda m, x: m(x), in_axes=(axes, 0), graph=False,
                        graph_updates=False)(m, xs)

    xs = jnp.arange(6.0).reshape(2, 3)
    ys, sown = nnx.capture(batched, nnx.Intermediate)(model, xs)
    np.testing.assert_allclose(sown["out"][0], ys)
    assert sown["out"][0].shape == (2, 3)


def test_sow_inside_a_method_scan_reaches_the_capture():
    axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})

    class Steps(nnx.Module):
        def __init__(self):
            self.inc = nnx.Param(jnp.array(1.0))

        @nnx.scan(in_axes=(axes, nnx.Carry), out_axes=nnx.Carry, length=4, graph=True,
                  graph_updates=True)
        def __call__(self, c):
            c = c + self.inc[...]
            self.sow(nnx.Intermediate, "c", c)
            return c

    model = Steps()
    final, sown = nnx.capture(model, nnx.Intermediate)(jnp.array(0.0))
    assert float(final) == 4.0
    np.testing.assert_array_equal(sown["c"][0], jnp.arange(1.0, 5.0))
    assert "c" not in vars(model)


def test_grad_filter_matching_nothing_gives_an_empty_state():
    class NoParams(nnx.Module):
        def __init__(self):
            self.count = nnx.BatchStat(jnp.array(0.0))

        def __call__(self, x):
            return x * 2.0

    model = NoParams()
    g_model, g_x = nnx.grad(lambda m, x: m(x), argnums=(0, 1))(model, 3.0)
    assert isinstance(g_model, nnx.State) and len(g_model) == 0
    assert float(g_x) == 2.0
    g = nnx.grad(lambda m, x: m(x), argnums=nnx.DiffState(0, nnx.Param), graph=True,
                 graph_updates=True)(model, 1.0)
    assert len(g) == 0


@pytest.mark.parametrize("graph", [True, False])
def test_gradient_of_an_intermediate_through_perturbations(graph):
    model = Chain()
    x = jnp.ones(3)
    _, perturbations = nnx.capture(model, nnx.Perturbation)(x)
    assert sorted(perturbations) == ["first", "second"]

    @nnx.jit(graph=graph)
    def step(model, perturbations, x):
        def loss(model, perturbations, x):
            y, sown = nnx.capture(model, nnx.Intermediate, init=perturbations)(x)
            return jnp.sum(y), sown

        (g_model, g_pert), sown = nnx.grad(loss, argnums=(0, 1), has_aux=True,
                                           graph=graph)(model, perturbations, x)
        return g_model, g_pert, sown

    g_model, g_pert, sown = step(model, perturbations, x)
    w = jnp.arange(1.0, 4.0)
    # d sum(w * (w * x)) / d(first input) = w * w; / d(second input) = w
    np.testing.assert_allclose(g_pert["first"]["dx"][...], w * w)
    np.testing.assert_allclose(g_pert["second"]["dx"][...], w)
    np.testing.assert_allclose(sown["second"]["out"][0], w * w)
    assert "dx" not in sown["first"]  # perturbations are not Intermediate captures
    if graph:
        assert sorted(g_model["first"]) == ["w"]
    else:  # tree mode: the gradient has the argument's own structure
        np.testing.assert_allclose(g_model.first.w[...], w * x)


def test_method_outputs_record_every_method():
    class Inner(nnx.Module):
        def __call__(self, x):
            return x + 1

        def twice(self, x):
            return 2 * x

    class Outer(nnx.Module):
        def __init__(self):
            self.inner = Inner()
            self.layers = nnx.List([Inner()])

        def __call__(self, x):
            self.sow(nnx.Intermediate, "seen", x)
            return self.inner.twice(self.inner(x)) + self.layers[0](x)

        def run(self, x):
            return self(x) * 10

    model = Outer()
    out, sown = nnx.capture(model.run, nnx.Intermediate,
                            method_outputs=nnx.Intermediate)(jnp.array(1.0))
    assert float(out) == 60.0
    assert float(sown["run"][0]) == 60.0 and float(sown["__call__"][0]) == 6.0
    assert float(sown["seen"][0]) == 1.0
    assert float(sown["inner"]["__call__"][0]) == 2.0
    assert float(sown["inner"]["twice"][0]) == 4.0
    assert float(sown["layers"][0]["__call__"][0]) == 2.0
    assert type(model) is Outer and type(model.inner) is Inner
    assert len(model.layers) == 1


def test_method_outputs_inside_a_transform():
    class Lin(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array(3.0))

        def __call__(self, x):
            return self.w[...] * x

    model = Lin()

    @nnx.jit
    def f(m, x):
        return m(x)

    out, sown = nnx.capture(lambda m, x: f(m, x), nnx.Intermediate,
                            method_outputs=nnx.Intermediate)(model, 2.0)
    assert float(out) == 6.0 and float(sown["__call__"][0]) == 6.0


def test_nested_captures_keep_their_own_stores():
    class Two(nnx.Module):
        def __call__(self, x):
            self.sow(nnx.Intermediate, "x", x)
            return x

    model = Two()

    def outer(m, x):
        m(x)
        _, inner = nnx.capture(m, nnx.Intermediate)(x + 1)
        m(x + 2)
        return inner

    inner, sown = nnx.capture(outer, nnx.Intermediate)(model, 0.0)
    assert [float(v) for v in inner["x"].value] == [1.0]
    assert [float(v) for v in sown["x"].value] == [0.0, 2.0]
    assert "__captures__" not in vars(model)


def test_capture_of_a_jitted_method_and_vmapped_train_step():
    """A jitted ``__call__``, a vmapped batch of perturbations, and grads of both."""

    class Foo(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))

        @nnx.jit
        def __call__(self, x):
            x = self.perturb("dx", x)
            return jnp.dot(x, self.w[...])

    model = Foo()
    xs = jnp.ones((4, 2))
    _, perts = nnx.capture(nnx.vmap(lambda m, x: m(x), in_axes=(
        nnx.StateAxes({nnx.Perturbation: 0, ...: None}), 0)), nnx.Perturbation)(model, xs)
    assert perts["dx"][...].shape == (4, 2)

    def per_example(m, p, x):
        def loss(m, p, x):
            return nnx.capture(m, nnx.Intermediate, init=p)(x)[0]

        return nnx.grad(loss, argnums=1)(m, p, x)

    grads = nnx.vmap(per_example, in_axes=(None, 0, 0))(model, perts, xs)
    np.testing.assert_allclose(grads["dx"][...], jnp.broadcast_to(model.w[...], (4, 2)))
    assert jax.tree.leaves(nnx.state(model, nnx.Perturbation)) == []


def test_method_outputs_of_a_jitted_method_and_a_graph_only_module():
    class Jitted(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array(2.0))

        @nnx.jit
        def __call__(self, x):
            self.sow(nnx.Intermediate, "inside", x)
            return self.w[...] * x

    y, sown = nnx.capture(Jitted(), nnx.Intermediate, method_outputs=nnx.Intermediate)(3.0)
    assert float(sown["__call__"][0]) == float(y) == 6.0
    assert float(sown["inside"][0]) == 3.0

    class GraphOnly(nnx.Module, pytree=False):
        def __call__(self, x):
            self.sow("intermediates", "a", x)  # a collection name works as the type
            return x + 1

    g = GraphOnly()
    out, sown = nnx.capture(g, "intermediates", method_outputs="intermediates")(1.0)
    assert out == 2.0 and sown["a"][0] == 1.0 and sown["__call__"][0] == 2.0
    assert type(g) is GraphOnly and "__captures__" not in vars(g)
