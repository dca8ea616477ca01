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
    # the scales are plain arrays in a data dict (as Flax keeps them): replaced, not mutated
    layer.scales[("kernel",)] = jnp.array([1.0, 2.0, 3.0, 4.0])
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


# -- string filters are tags (WithTag), PathContains is an exact path part ------------------------


class _Tagged(nnx.Module):
    def __init__(self, rngs):
        self.rngs = rngs
        self.linear = nnx.Linear(2, 3, rngs=rngs)
        self.params = nnx.Param(jnp.ones(1))
        self.w = nnx.Param(jnp.zeros(1), tag="weights")


def _paths(state):
    return sorted(tuple(map(str, p)) for p, _ in nnx.to_flat_state(state))


def test_a_string_filter_is_with_tag():
    to = nnx.filterlib.to_predicate
    assert to("x") == nnx.WithTag("x") and to(["x"]) == nnx.Any(nnx.WithTag("x"))
    m = _Tagged(nnx.Rngs(params=0, dropout=1))
    # the stream's key AND count; not the Param whose attribute is named `params`
    assert _paths(nnx.state(m, "params")) == [("rngs", "params", "count"),
                                              ("rngs", "params", "key")]
    assert _paths(nnx.state(m, "linear")) == []  # an attribute name is not a tag
    assert _paths(nnx.state(m, "weights")) == [("w",)]  # a Variable created with tag=
    _, keys, rest = nnx.split(m.rngs, "dropout", ...)
    assert _paths(keys) == [("dropout", "count"), ("dropout", "key")]
    assert not nnx.WithTag(None)((), object())  # no tag attribute: no match


def test_path_contains_is_an_exact_part_without_tags():
    m = _Tagged(nnx.Rngs(params=0))
    assert _paths(nnx.state(m, nnx.PathContains("linear"))) == [("linear", "bias"),
                                                                ("linear", "kernel")]
    assert _paths(nnx.state(m, nnx.PathContains("params"))) == [
        ("params",), ("rngs", "params", "count"), ("rngs", "params", "key")]
    assert _paths(nnx.state(m, nnx.PathContains("lin"))) == []
    assert len(_paths(nnx.state(m, nnx.PathContains("lin", exact=False)))) == 2
    assert _paths(nnx.state(m, nnx.PathContains("weights"))) == []


def test_of_type_is_isinstance_and_split_takes_trailing_ellipses():
    class HasType:
        type = nnx.Param

    assert not nnx.OfType(nnx.Param)((), HasType())
    m = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    _, params, rest = nnx.split(m, ..., ...)  # a second `...` gets nothing, as in Flax
    assert len(_paths(params)) == 2 and _paths(rest) == []
    with pytest.raises(ValueError, match="can only be used as the last filters"):
        nnx.split(m, ..., nnx.Param)


def test_the_0_8_3_face_keeps_its_string_rule():
    from flaxen.experimental import nnx as old

    class Foo(old.Module):
        def __init__(self, rngs):
            self.rngs = rngs
            self.linear = old.Linear(2, 3, rngs=rngs)

    m = Foo(old.Rngs(params=0, dropout=1))
    _, params, dropout, param_keys, counts = old.split(
        m, old.Param, "dropout", "params", old.RngCount)
    assert len(dict(dropout.flat_state())) == 1 and len(dict(param_keys.flat_state())) == 1
    assert len(dict(counts.flat_state())) == 2  # counts are never picked by a stream name
    assert sorted(dict(old.state(m, "linear").flat_state())) == [("linear", "bias"),
                                                          ("linear", "kernel")]
    assert old.Not("linear")(("linear", "kernel"), m.linear.kernel) is False
    assert old.filterlib.to_predicate("x") == old.PathContains("x")


# -- Rngs: stream order, and what Rngs.split / split_rngs filters see -----------------------------


def test_rngs_streams_keep_keyword_order_then_default():
    rngs = nnx.Rngs(0, params=1, dropout=2)
    assert list(rngs) == ["params", "dropout", "default"]
    assert [name for name, _ in rngs.items()] == ["params", "dropout", "default"]
    assert repr(rngs).index("params=") < repr(rngs).index("default=")
    assert list(nnx.Rngs({"b": 0, "a": 1}, c=2)) == ["b", "a", "c"]


def test_rngs_split_filters_see_the_stream():
    rngs = nnx.Rngs(params=0, dropout=1)
    split = rngs.split({nnx.RngStream: 3})
    assert split.params.key.shape == (3,) and split.dropout.key.shape == (3,)
    split = rngs.split({nnx.RngKey: 3, ...: None})  # a key type is not a stream
    assert split.params.key.shape == ()
    assert rngs.split({"dropout": 2, ...: None}).dropout.key.shape == (2,)


def test_split_rngs_selects_a_stream_only_when_key_and_count_match():
    rngs = nnx.Rngs(params=0, dropout=1)
    with nnx.split_rngs(rngs, splits=4, only=nnx.RngKey):  # the count is not an RngKey
        assert rngs.params.key.shape == () and rngs.dropout.key.shape == ()
    with nnx.split_rngs(rngs, splits=4, only="dropout"):
        assert rngs.dropout.key.shape == (4,) and rngs.params.key.shape == ()


# -- SpectralNorm leaves the normalised weights in the wrapped layer ------------------------------


def test_spectral_norm_writes_the_normalised_kernel_into_the_layer():
    layer = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    before = np.asarray(layer.kernel[...])
    sn = nnx.SpectralNorm(layer, rngs=nnx.Rngs(1))
    x = jnp.ones((2, 3))
    y = sn(x, update_stats=True)
    sigma = float(sn.batch_stats[("kernel", "sigma")][...])
    np.testing.assert_allclose(np.asarray(layer.kernel[...]), before / sigma, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(layer(x)), np.asarray(y), rtol=1e-6)
    assert layer.bias.shape == (4,)  # 1-D weights are left alone


def test_a_bad_filter_is_a_type_value_and_flaxens_filter_error():
    from flaxen.errors import InvalidFilterError

    for exc in (TypeError, ValueError, InvalidFilterError):
        with pytest.raises(exc, match="Invalid filter"):
            nnx.filterlib.to_predicate(3.5)
