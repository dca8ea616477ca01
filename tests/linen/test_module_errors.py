"""Every Module-related error of the errors page, raised when the page says."""

import functools

import jax
import jax.numpy as jnp
import pytest

import flaxen.linen as nn
from flaxen import errors
from tests.linen._module_helpers import KEY, Dense, X


def test_reserved_module_attribute_error():
    with pytest.raises(errors.ReservedModuleAttributeError, match="parent"):
        class Bad(nn.Module):
            parent: int = 1

    with pytest.raises(errors.ReservedModuleAttributeError):
        class Bad2(nn.Module):
            name: str = "x"


def test_several_compact_methods_share_one_naming_count():
    # today's Flax allows several @compact methods (MultipleMethodsCompactError is unused)
    class Two(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.other(nn.Dense(1)(x))

        @nn.compact
        def other(self, x):
            return nn.Dense(1)(x)

    params = Two().init(jax.random.key(0), jnp.ones((1, 1)))["params"]
    assert sorted(params) == ["Dense_0", "Dense_1"]


def test_incorrect_post_init_override_error():
    class Bad(nn.Module):
        a: int = 1

        def __post_init__(self):
            pass

    bad = Bad()  # constructing is fine (as in Flax); running it is not
    with pytest.raises(errors.IncorrectPostInitOverrideError):
        bad.init(jax.random.key(0))

    class Good(nn.Module):
        a: int = 1

        def __post_init__(self):
            super().__post_init__()

    assert Good().a == 1


def test_call_compact_unbound_module_error():
    with pytest.raises(errors.CallCompactUnboundModuleError):
        Dense(3)(X)


def test_call_setup_unbound_module_error():
    class M(nn.Module):
        def setup(self):
            self.d = Dense(2)

    with pytest.raises(errors.CallSetupUnboundModuleError):
        M().setup()


def test_call_unbind_on_unbound_module_error():
    with pytest.raises(errors.CallUnbindOnUnboundModuleError):
        Dense(2).unbind()


def test_invalid_instance_module_error():
    for call in (lambda: Dense.init(KEY, X), lambda: Dense.apply({}, X),
                 lambda: Dense.init_with_output(KEY, X), lambda: Dense.bind({}, {})):
        with pytest.raises(errors.InvalidInstanceModuleError):
            call()


def test_apply_module_invalid_method_error():
    variables = Dense(2).init(KEY, X)
    with pytest.raises(errors.ApplyModuleInvalidMethodError):
        Dense(2).apply(variables, X, method=3)
    with pytest.raises(errors.ApplyModuleInvalidMethodError):
        Dense(2).apply(variables, X, method=lambda: 1)
    with pytest.raises(AttributeError, match='no attribute "nope"'):
        Dense(2).apply(variables, X, method="nope")


def test_apply_scope_invalid_variables_errors():
    variables = Dense(2).init(KEY, X)
    with pytest.raises(errors.ApplyScopeInvalidVariablesStructureError):
        Dense(2).apply({"params": variables}, X)
    with pytest.raises(errors.ApplyScopeInvalidVariablesTypeError):
        Dense(2).apply(3, X)


def test_set_attribute_frozen_module_error():
    class InCompact(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.foo = 3
            return x

    with pytest.raises(errors.SetAttributeFrozenModuleError, match="foo"):
        InCompact().init(KEY, X)

    class SubAttr(nn.Module):
        def setup(self):
            self.dense = Dense(3)
            self.dense.features = 20

        def __call__(self, x):
            return self.dense(x)

    with pytest.raises(errors.SetAttributeFrozenModuleError, match="features"):
        SubAttr().init(KEY, X)
    bound = Dense(2).bind(Dense(2).init(KEY, X))
    with pytest.raises(errors.SetAttributeFrozenModuleError):
        bound.features = 4


def test_set_attribute_in_module_setup_error():
    class M(nn.Module):
        features: int = 2

        def setup(self):
            self.features = 3

        def __call__(self, x):
            return x

    with pytest.raises(errors.SetAttributeInModuleSetupError):
        M().init(KEY, X)


def test_assign_sub_module_error():
    class NotCompact(nn.Module):
        def __call__(self, x):
            return Dense(3)(x)

    with pytest.raises(errors.AssignSubModuleError, match="Dense"):
        NotCompact().init(KEY, X)

    class Partial(nn.Module):
        def setup(self):
            self.make = functools.partial(Dense, 3)

        def __call__(self, x):
            return self.make()(x)

    with pytest.raises(errors.AssignSubModuleError):
        Partial().init(KEY, X)


def test_name_in_use_errors():
    class TwoNamed(nn.Module):
        @nn.compact
        def __call__(self, x):
            Dense(2, name="bar")(x)
            return Dense(2, name="bar")(x)

    with pytest.raises(errors.NameInUseError, match='submodule "bar" in Module TwoNamed'):
        TwoNamed().init(KEY, X)

    class ParamThenModule(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.param("bar", jax.nn.initializers.zeros, (1,))
            return Dense(2, name="bar")(x)

    with pytest.raises(errors.NameInUseError, match='"bar"'):
        ParamThenModule().init(KEY, X)

    class TwoParams(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.param("p", jax.nn.initializers.zeros, (1,))
            self.param("p", jax.nn.initializers.zeros, (1,))
            return x

    with pytest.raises(errors.NameInUseError, match='param "p"'):
        TwoParams().init(KEY, X)

    class SetupClash(nn.Module):
        def setup(self):
            self.a = Dense(2)
            self.b = Dense(2, name="a")

        def __call__(self, x):
            return self.a(x) + self.b(x)

    with pytest.raises(errors.NameInUseError):
        SetupClash().init(KEY, X)

    class AutoNameClash(nn.Module):
        @nn.compact
        def __call__(self, x):
            Dense(2, name="Dense_0")
            return Dense(2)(x)

    with pytest.raises(errors.NameInUseError, match="Dense_0"):
        AutoNameClash().init(KEY, X)


def test_same_variable_name_in_different_collections_is_allowed():
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.param("mean", jax.nn.initializers.zeros, (1,))
            self.variable("stats", "mean", jnp.zeros, (1,))
            return x

    variables = M().init(KEY, X)
    assert set(variables) == {"params", "stats"}


def test_descriptor_attribute_error():
    class M(nn.Module):
        @property
        def prop(self):
            return self.non_existent_field

        def __call__(self, x):
            return self.prop

    with pytest.raises(errors.DescriptorAttributeError):
        M().init(KEY, X)


def test_scope_errors_at_apply():
    class P(nn.Module):
        def setup(self):
            self.w = self.param("w", jax.nn.initializers.ones, (2,))

        def __call__(self, x):
            return x * self.w

    with pytest.raises(errors.ScopeCollectionNotFound, match="params"):
        P().apply({}, X)
    with pytest.raises(errors.ScopeParamNotFoundError, match="w"):
        P().apply({"params": {"other": jnp.ones(2)}}, X)
    with pytest.raises(errors.ScopeParamShapeError, match=r"\(3,\)"):
        P().apply({"params": {"w": jnp.ones(3)}}, X)

    class V(nn.Module):
        @nn.compact
        def __call__(self, x):
            v = self.variable("state", "count", lambda: jnp.zeros(()))
            v.value += 1
            return x

    variables = V().init(KEY, X)
    with pytest.raises(errors.ModifyScopeVariableError, match="state"):
        V().apply(variables, X)
    with pytest.raises(errors.ScopeVariableNotFoundError):
        V().apply({"state": {"other": 1}}, X)


def test_param_outside_setup_or_compact_is_a_value_error():
    class M(nn.Module):
        def __call__(self, x):
            return self.param("a", jax.nn.initializers.zeros, (1,))

    with pytest.raises(ValueError, match="setup"):
        M().init(KEY, X)
    with pytest.raises(ValueError, match="unbound"):
        M().param("a", jax.nn.initializers.zeros, (1,))


def test_invalid_rng_error():
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.make_rng("dropout")

    with pytest.raises(errors.InvalidRngError, match="dropout"):
        M().apply({}, X)
    # Flax 0.12: a missing stream falls back to 'params' when that one is given
    assert M().apply({}, X, rngs={"params": KEY}).shape == KEY.shape
