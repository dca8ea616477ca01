"""NNX behaviours that must match Flax 0.12.8 exactly (issue 22): each test pins one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

# -- Variable's dunder protocols ---------------------------------------------------------------


def test_numpy_scalar_times_variable_stays_a_jax_array():
    p = nnx.Param(jnp.ones(2))
    out = np.float64(2.0) * p
    assert isinstance(out, jax.Array) and out.tolist() == [2.0, 2.0]
    traced = jax.jit(lambda x: np.float64(2.0) * nnx.Param(x))(jnp.ones(2))
    assert traced.tolist() == [2.0, 2.0]
    # NumPy still converts a Variable explicitly, through the value's own hook
    assert np.asarray(nnx.Param(jnp.array(3.0))).item() == 3.0


def test_variable_is_unhashable_and_has_no_ordering_or_truth():
    p = nnx.Param(jnp.array(1.0))
    with pytest.raises(TypeError, match="unhashable"):
        hash(p)
    with pytest.raises(TypeError):
        _ = p < 2
    with pytest.raises(TypeError):
        divmod(p, 2)
    with pytest.raises(TypeError):
        bool(p)  # falls back to len() of a 0-d value, as in Flax
    assert bool(p == 1.0) and not bool(p != 1.0)
    assert bool(p[...] < 2)


def test_variable_dunders_are_flaxs():
    names = ("__array__", "__bool__", "__divmod__", "__rdivmod__",
             "__lt__", "__le__", "__gt__", "__ge__")
    defined = [n for n in names if any(n in c.__dict__ for c in nnx.Param.__mro__[:-1])]
    assert defined == []
    assert nnx.Param.__hash__ is None


# -- nnx.capture's call forms and return shapes --------------------------------------------------


class _Sower(nnx.Module):
    def __call__(self, x):
        self.sow(nnx.Intermediate, "y", x * 2)
        self.sow(nnx.Perturbation, "p", x * 3)
        return x + 1


def test_capture_as_a_decorator_with_a_variable_type():
    @nnx.capture(nnx.Intermediate)
    def forward(model, x):
        return model(x)

    out, sown = forward(_Sower(), 1.0)
    assert out == 2.0 and sown["y"].get_value() == (2.0,)


def test_capture_return_shapes_follow_the_number_of_types():
    model = _Sower()
    assert nnx.capture(model)(1.0) == 2.0  # no types: the output alone
    out, inter = nnx.capture(model, nnx.Intermediate)(1.0)
    assert out == 2.0 and inter["y"].get_value() == (2.0,)
    out, inter, pert = nnx.capture(model, nnx.Intermediate, nnx.Perturbation)(1.0)
    assert inter["y"].get_value() == (2.0,) and pert["p"].get_value() == (3.0,)
    assert nnx.capture(lambda x: x * 5)(1.0) == 5.0
    # a method_outputs type that is not among var_types records but is not returned
    assert nnx.capture(model, method_outputs=nnx.Intermediate)(1.0) == 2.0


# -- nnx.List ------------------------------------------------------------------------------------


def test_list_attribute_is_static_and_survives_split_merge():
    lst = nnx.List([nnx.Linear(2, 2, rngs=nnx.Rngs(0)), 3])
    lst.tag = "mlp"
    assert len(lst) == 2 and list(lst)[1] == 3
    assert list(nnx.state(lst).keys()) == [0]
    graphdef, state = nnx.split(lst)
    back = nnx.merge(graphdef, state)
    assert back.tag == "mlp" and len(back) == 2 and back[1] == 3
    back.insert(0, 5)
    assert back.pop() == 3 and back.tag == "mlp" and len(back) == 2
    assert "mlp" not in jax.tree_util.tree_leaves(back)  # the tag is static


def test_list_is_generic_and_a_mutable_sequence():
    from collections.abc import MutableSequence

    assert nnx.List[int] is not None
    lst = nnx.List([1, 2])
    assert isinstance(lst, MutableSequence)
    lst += [3]
    assert list(reversed(lst)) == [3, 2, 1] and lst.index(2) == 1


# -- filters ---------------------------------------------------------------------------------------


def test_filters_accept_attributes_and_three_are_frozen_dataclasses():
    import dataclasses

    combined = nnx.Any(nnx.Param, nnx.BatchStat)
    combined.__doc__ = "params and stats"
    assert combined.__doc__ == "params and stats"
    for f in (nnx.All(nnx.Param), nnx.Not(nnx.Param), nnx.PathIn(("a",)),
              nnx.Everything(), nnx.Nothing()):
        f.note = "kept"
        assert f.note == "kept"
    of = nnx.OfType(nnx.Param)
    assert [f.name for f in dataclasses.fields(of)] == ["type"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        of.type = nnx.BatchStat
    assert dataclasses.replace(nnx.PathContains("a"), exact=False) == nnx.PathContains(
        "a", exact=False)
    assert nnx.WithTag("t") == nnx.WithTag("t") and hash(nnx.OfType(nnx.Param)) == hash(of)
    state = nnx.state(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), combined)
    assert sorted(state.keys()) == ["bias", "kernel"]


# -- nnx.scan ------------------------------------------------------------------------------------


class _Counter(nnx.Module):
    def __init__(self):
        self.count = nnx.BatchStat(jnp.array(0))
        self.w = nnx.Param(jnp.array(2.0))


@pytest.mark.parametrize("modes, expected", [
    (dict(graph=False), 5), (dict(graph=True, graph_updates=False), 5), (dict(graph=True), 0)])
def test_scan_broadcast_variable_updates(modes, expected):
    counter = _Counter()

    @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=nnx.Carry, **modes)
    def step(c, total, x):
        c.count[...] += 1
        return total + x

    assert float(step(counter, jnp.array(0.0), jnp.arange(5.0))) == 10.0
    assert int(counter.count[...]) == expected


def test_scan_accepts_carry_inside_state_axes():
    counter = _Counter()
    axes = nnx.StateAxes({nnx.Param: None, nnx.BatchStat: nnx.Carry})

    @nnx.scan(in_axes=(axes, 0), out_axes=0)
    def step(c, x):
        c.count[...] += x
        return c.w * x

    ys = step(counter, jnp.arange(3))
    assert ys.tolist() == [0.0, 2.0, 4.0] and int(counter.count[...]) == 3
    with pytest.raises(Exception, match="Cannot carry output state"):
        nnx.scan(lambda c, x: (c, x), in_axes=(axes, 0),
                 out_axes=(nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: nnx.Carry}), 0))


# -- trace checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", [
    lambda f: jax.vmap(f)(jnp.ones(2)), lambda f: jax.grad(f)(1.0),
    lambda f: jax.jit(f)(1.0)])
def test_mutating_a_captured_pytree_under_another_trace_raises(transform):
    class Box(nnx.Pytree):
        def __init__(self):
            self.a = nnx.data(jnp.array(1.0))

    box, var = Box(), nnx.Param(jnp.array(1.0))

    def set_attr(x):
        box.a = x
        return x

    def set_var(x):
        var[...] = x
        return x

    with pytest.raises(nnx.errors.TraceContextError, match="different trace level"):
        transform(set_attr)
    with pytest.raises(nnx.errors.TraceContextError):
        transform(set_var)
    assert float(box.a) == 1.0 and float(var[...]) == 1.0


# -- WeightNorm ------------------------------------------------------------------------------------


def test_weight_norm_leaves_the_wrapped_kernel_normalized():
    linear = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    layer = nnx.WeightNorm(linear, rngs=nnx.Rngs(1))
    layer.scales[("kernel",)][...] = jnp.array([1.0, 2.0, 3.0, 4.0])
    x = jnp.ones((2, 3))
    y = layer(x)
    kernel = linear.kernel[...]
    assert np.allclose(jnp.linalg.norm(kernel, axis=0), [1.0, 2.0, 3.0, 4.0], atol=1e-5)
    assert np.allclose(y, x @ kernel + linear.bias[...], atol=1e-5)
    # normalising an already normalised kernel changes nothing
    assert np.allclose(layer(x), y, atol=1e-5)


# -- sharding metadata -----------------------------------------------------------------------------


def test_sharding_is_stored_as_out_sharding_and_vmap_stacks_it():
    p = nnx.Param(jnp.ones(2), sharding=("a",), eager_sharding=False)
    assert p.get_metadata("out_sharding") == ("a",) and not p.has_metadata("sharding")
    p.set_metadata(sharding=("b",))
    assert p.get_metadata("out_sharding") == ("b",)

    class Layer(nnx.Module):
        def __init__(self, _):
            self.w = nnx.Param(jnp.ones(3), sharding=("b",), eager_sharding=False)

    for name, expected in ((None, (None, "b")), ("layers", ("layers", "b"))):
        make = nnx.vmap(lambda i: Layer(i), in_axes=0, out_axes=0,
                        transform_metadata={nnx.PARTITION_NAME: name})
        stacked = make(jnp.arange(4))
        assert stacked.w.shape == (4, 3)
        assert stacked.w.get_metadata("out_sharding") == expected


def test_sharding_names_is_a_deprecated_alias_of_out_sharding():
    with pytest.warns(DeprecationWarning, match="'sharding_names' is deprecated"):
        p = nnx.Param(jnp.ones(2), sharding_names=("a",), eager_sharding=False)
    assert p.get_metadata("out_sharding") == ("a",)
    with pytest.warns(DeprecationWarning, match="use 'out_sharding'"):
        assert p.sharding_names == ("a",)
    with pytest.warns(DeprecationWarning):
        assert nnx.Param(jnp.ones(2)).sharding_names is None
    with pytest.warns(DeprecationWarning):
        p.set_metadata("sharding_names", ("z",))
    assert p.get_metadata("out_sharding") == ("z",)
