"""Module definition, naming, setup/compact and binding (flaxen.linen.module)."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import errors
from tests.linen._module_helpers import KEY, MLP, Dense, X, shapes


def test_dataclass_fields_parent_and_name_come_last_and_positional_as_in_flax():
    params = list(inspect.signature(Dense).parameters.values())
    assert [p.name for p in params] == ["features", "use_bias", "parent", "name"]
    assert params[-1].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params[-2].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert [f.kw_only for f in dataclasses.fields(Dense)][-2:] == [False, False]
    # ... but, as Flax 0.12.8's __init__, a call refuses them by position
    with pytest.raises(TypeError, match="positional arguments but 4 were given"):
        Dense(3, True, None)
    assert Dense(3, True, parent=None, name="d").name == "d"


def test_kw_only_modules_keep_parent_and_name_keyword_only():
    class Opts(nn.Module, kw_only=True):
        rate: float = 0.5

    params = list(inspect.signature(Opts).parameters.values())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    assert nn.Module.scope is None and Opts(name="o").scope is None


def test_subclass_with_non_default_field_after_base_defaults():
    class Base(nn.Module):
        a: int = 1

    class Child(Base, kw_only=True):
        b: int

    assert Child(b=2).b == 2 and Child(b=2).a == 1
    with pytest.raises(TypeError):
        Child(2)


def test_kw_only_is_not_inherited():
    class Base(nn.Module, kw_only=True):
        a: int

    class Child(Base):
        b: int = 0

    with pytest.raises(TypeError):
        Base(1)
    assert Child(b=1, a=2).a == 2


def test_equality_and_hash_follow_fields():
    assert Dense(3) == Dense(3)
    assert hash(Dense(3)) == hash(Dense(3))
    assert Dense(3) != Dense(4)
    assert dataclasses.is_dataclass(Dense)


def test_compact_auto_names_are_counted_per_class():
    class Other(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            names = [Dense(2).name, Other().name, Dense(2).name, Other().name]
            assert names == ["Dense_0", "Other_0", "Dense_1", "Other_1"]
            return Dense(2, name="explicit")(x)

    variables = Top().init(KEY, X)
    assert list(variables["params"]) == ["explicit"]


def test_setup_attribute_names_lists_and_dicts():
    class Top(nn.Module):
        def setup(self):
            self.first = Dense(2)
            self.layers = [Dense(3), Dense(4)]
            self.table = {"a": Dense(1), "b": (Dense(5),)}
            self.plain = [1, 2]

        def __call__(self, x):
            assert isinstance(self.layers, tuple) and isinstance(self.plain, tuple)
            return [self.first(x), *[m(x) for m in self.layers], self.table["a"](x),
                    self.table["b"][0](x)]

    variables = Top().init(KEY, X)
    assert sorted(variables["params"]) == ["first", "layers_0", "layers_1", "table_a",
                                           "table_b_0"]
    assert variables["params"]["layers_1"]["kernel"].shape == (4, 4)


def test_setup_and_compact_give_identical_params():
    class SetupMLP(nn.Module):
        def setup(self):
            self.layers = [Dense(3), Dense(2)]

        def __call__(self, x):
            return self.layers[1](jax.nn.relu(self.layers[0](x)))

    class CompactMLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jax.nn.relu(Dense(3, name="layers_0")(x))
            return Dense(2, name="layers_1")(x)

    a = SetupMLP().init(KEY, X)
    b = CompactMLP().init(KEY, X)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(x, y)


def test_shared_submodule_instance_has_one_set_of_params():
    class Top(nn.Module):
        def setup(self):
            self.d = Dense(4)
            self.alias = self.d

        def __call__(self, x):
            return self.alias(self.d(x))

    variables = Top().init(KEY, X)
    assert list(variables["params"]) == ["d"]


def test_submodule_field_is_adopted_under_field_name_and_not_mutated():
    class Wrap(nn.Module):
        inner: nn.Module
        other: nn.Module = None

        @nn.compact
        def __call__(self, x):
            y = self.inner(x)
            return y if self.other is None else self.other(y)

    d = Dense(4)
    variables = Wrap(d).init(KEY, X)
    assert list(variables["params"]) == ["inner"]
    assert d.parent is None and d.name is None and d.scope is None
    shared = Wrap(d, d).init(KEY, X)  # one instance passed twice stays one submodule
    assert list(shared["params"]) == ["inner"]


def test_list_field_names_follow_index_so_slices_reuse_params():
    class Seq(nn.Module):
        layers: tuple

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    layers = [Dense(4), Dense(4), Dense(4)]
    variables = Seq(layers).init(KEY, X)
    assert sorted(variables["params"]) == ["layers_0", "layers_1", "layers_2"]
    part = {"params": {k: v for k, v in variables["params"].items() if k != "layers_2"}}
    assert Seq(layers[:2]).apply(part, X).shape == (1, 4)


def test_module_created_in_compact_and_passed_on_is_shared():
    class Wrap(nn.Module):
        inner: nn.Module

        def __call__(self, x):
            return self.inner(x)

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            d = Dense(4)
            return Wrap(d)(x) + Wrap(d)(x) + d(x)

    assert list(Top().init(KEY, X)["params"]) == ["Dense_0"]


def test_compact_method_called_twice_reuses_params_and_names():
    class Top(nn.Module):
        def setup(self):
            self.mlp = MLP()

        def __call__(self, x):
            return self.mlp(self.mlp(x[:, :2].repeat(2, axis=1)))[:, :2]

    with pytest.raises(errors.ScopeParamShapeError):
        # second call sees inputs of width 2 vs kernel (4, 3): the check still runs
        Top().init(KEY, X)

    class Twice(nn.Module):
        def setup(self):
            self.d = Dense(4)

        def __call__(self, x):
            return self.d(self.d(x))

    variables = Twice().init(KEY, X)
    assert shapes(variables) == {"params": {"d": {"bias": (4,), "kernel": (4, 4)}}}


def test_lazy_setup_and_unbound_attribute_message():
    calls = []

    class Top(nn.Module):
        def setup(self):
            calls.append(1)
            self.layers = [Dense(2)]

        def __call__(self, x):
            return self.layers[0](x)

    module = Top()
    assert not hasattr(module, "layers")
    with pytest.raises(AttributeError) as info:
        module(X)
    assert str(info.value) == (
        '"Top" object has no attribute "layers". If "layers" is defined in \'.setup()\', '
        "remember these fields are only accessible from inside 'init' or 'apply'.")
    assert calls == []
    variables = module.init(KEY, X)
    assert calls == [1]
    bound = module.bind(variables)
    assert calls == [1]  # bind does not run setup yet
    assert bound.layers[0].name == "layers_0"
    assert calls == [1, 1]


def test_bind_unbind_and_submodule_unbind():
    class AE(nn.Module):
        def setup(self):
            self.encoder = Dense(2)
            self.decoder = Dense(4)

        def __call__(self, x):
            return self.decoder(self.encoder(x))

    variables = AE().init(KEY, X)
    bound = AE().bind(variables)
    np.testing.assert_allclose(bound(X), AE().apply(variables, X))
    encoder, enc_vars = bound.encoder.unbind()
    assert encoder.parent is None and encoder.name is None and encoder.scope is None
    assert shapes(enc_vars) == {"params": {"bias": (2,), "kernel": (4, 2)}}
    np.testing.assert_allclose(encoder.apply(enc_vars, X), bound.encoder(X))
    top, top_vars = bound.unbind()
    assert isinstance(top, AE) and top.scope is None
    assert sorted(top_vars["params"]) == ["decoder", "encoder"]


def test_clone_and_copy():
    d = Dense(3, name="foo")
    c = d.clone(features=5)
    assert (c.features, c.name, c.parent) == (5, "foo", None)

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            a = Dense(2)
            b = a.copy(features=3)
            c = a.clone(features=4)
            assert (a.name, b.name) == ("Dense_0", "Dense_1")
            assert b.parent is self and c.parent is None
            return b(x)

    assert list(Top().init(KEY, X)["params"]) == ["Dense_1"]


def test_repr_shows_fields_and_children():
    class Top(nn.Module):
        width: int = 3

        def setup(self):
            self.d = Dense(2)

        def __call__(self, x):
            return self.d(x)

    text = repr(Top())
    assert text.startswith("Top(") and "width = 3" in text
    bound = Top().bind(Top().init(KEY, X))
    bound.d  # noqa: B018 - runs setup
    assert "# children" in repr(bound) and "features = 2" in repr(bound)


def test_nowrap_method_callable_on_unbound_module():
    class Top(nn.Module):
        @nn.nowrap
        def make(self):
            return Dense(2)

        @nn.compact
        def __call__(self, x):
            return self.make()(x)

    assert isinstance(Top().make(), Dense)
    assert list(Top().init(KEY, X)["params"]) == ["Dense_0"]


def test_path_and_module_introspection():
    seen = {}

    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            seen["path"] = self.path
            seen["init"] = self.is_initializing()
            seen["mutable"] = self.is_mutable_collection("params")
            seen["has_rng"] = (self.has_rng("params"), self.has_rng("dropout"))
            return x

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Inner(name="inner")(x)

    variables = Top().init(KEY, X)
    assert seen == {"path": ("inner",), "init": True, "mutable": True,
                    "has_rng": (True, False)}
    Top().apply(variables, X)
    assert seen["init"] is False and seen["mutable"] is False
    with pytest.raises(ValueError, match="unbound"):
        Dense(2).path  # noqa: B018


def test_share_scope_wrapper_keeps_param_paths():
    class LoRA(nn.Module):
        base: nn.Module

        def setup(self):
            nn.share_scope(self, self.base)

        @nn.compact
        def __call__(self, x):
            a = self.param("A", jax.nn.initializers.ones, (x.shape[-1], 1))
            return self.base(x) + x @ a

    variables = LoRA(Dense(2)).init(KEY, X)
    assert sorted(variables["params"]) == ["A", "bias", "kernel"]

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            return LoRA(Dense(2), name="lora")(x)

    assert sorted(Top().init(KEY, X)["params"]["Dense_0"]) == ["A", "bias", "kernel"]
    with pytest.raises(errors.CallShareScopeOnUnboundModuleError):
        nn.share_scope(Dense(2), Dense(2))


def test_module_on_custom_scope_parent_and_named_call_flags():
    from flaxen import config

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Dense(2)(x)

    def labelled() -> bool:
        variables = Top().init(KEY, X)
        jitted = jax.jit(lambda v: Top().apply(v, X))
        return "Top/Dense_0" in jitted.lower(variables).as_text(debug_info=True)

    with nn.override_named_call(True):
        assert labelled()
    with nn.override_named_call(False):
        assert not labelled()
    # as Flax's, the switches leave the config flag alone
    nn.disable_named_call()
    try:
        assert config.flax_profile is True and not labelled()
    finally:
        nn.enable_named_call()
    assert labelled()
    # without an override, the flag itself decides (flaxen reads it at each call)
    from flaxen.linen import _interception

    _interception._NAMED_CALL[0] = None
    with config.temp_flip_flag("profile", False):
        assert not labelled()
    assert labelled()


def test_variables_property_and_variable_api():
    class Counter(nn.Module):
        @nn.compact
        def __call__(self):
            initialized = self.has_variable("counter", "count")
            v = self.variable("counter", "count", jnp.zeros, ())
            if initialized:
                v.value += 1
            return self.variables

    variables = Counter().init(KEY)
    assert float(variables["counter"]["count"]) == 0.0
    seen, updated = Counter().apply(variables, mutable=["counter"])
    assert float(updated["counter"]["count"]) == 1.0
    assert "counter" in seen
    with pytest.raises(ValueError, match="unbound"):
        Counter().variables  # noqa: B018


def test_parent_and_name_are_the_last_dataclass_fields_as_in_flax():
    import dataclasses
    import inspect

    class M(nn.Module):
        a: int
        b: int = 2

    class K(nn.Module, kw_only=True):
        a: int
        b: int = 2

    assert [f.name for f in dataclasses.fields(M)] == ["a", "b", "parent", "name"]
    assert list(inspect.signature(K).parameters) == ["a", "b", "parent", "name"]
    assert all(p.kind is p.KEYWORD_ONLY for p in inspect.signature(K).parameters.values())
    m = M(1, name="m")
    assert (m.a, m.b, m.name) == (1, 2, "m") and M(1) == M(1) and hash(M(1)) == hash(M(1))


def test_a_kw_only_marker_makes_parent_and_name_keyword_only():
    import dataclasses
    import inspect

    class KW(nn.Module):
        a: int
        _: dataclasses.KW_ONLY
        b: int = 2

    kinds = {p.name: p.kind for p in inspect.signature(KW).parameters.values()}
    assert kinds["a"] is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert {kinds[n] for n in ("b", "parent", "name")} == {inspect.Parameter.KEYWORD_ONLY}
    assert list(kinds) == ["a", "b", "parent", "name"]
    assert KW(1, b=3, name="k").name == "k"
