"""Module-system behaviours fixed for Flax conformance: interceptors, lazy adoption of field
submodules, compact_name_scope, perturb, hashing, lazy_init, method resolution, transforms
carrying field Modules across their boundary."""

import functools

import jax
import jax.numpy as jnp
import pytest

import flaxen.linen as nn
from flaxen import errors
from flaxen.core import Scope
from flaxen.linen import module as nn_module

KEY = jax.random.key(0)


class Identity(nn.Module):
    def __call__(self, x):
        return x


# --- interceptors ---------------------------------------------------------------------------


def test_interceptors_run_on_unbound_modules_innermost_last_installed():
    def op(fn):
        def icpt(next_fun, args, kwargs, ctx):
            return fn(next_fun(*args, **kwargs))
        return icpt

    with nn.intercept_methods(op(lambda a: a + 1)), nn.intercept_methods(op(lambda a: a * 10)):
        assert Identity()(2) == 21


def test_interceptors_see_setup_and_every_subclass_call():
    class Sub(Identity):
        def __call__(self, x):
            return super().__call__(x)

    seen = []

    def log(next_fun, args, kwargs, ctx):
        seen.append((type(ctx.module).__name__, ctx.method_name))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(log):
        Sub()(1)
    assert seen == [("Sub", "__call__"), ("Sub", "__call__")]

    class WithSetup(nn.Module):
        def setup(self):
            self.d = nn.Dense(2)

        def __call__(self, x):
            return self.d(x)

    variables = WithSetup().init(KEY, jnp.ones((1, 3)))
    seen.clear()
    with nn.intercept_methods(log):
        WithSetup().apply(variables, jnp.ones((1, 3)))
    assert seen == [("WithSetup", "setup"), ("WithSetup", "__call__"), ("Dense", "__call__")]


# --- field submodules and setup ------------------------------------------------------------


def test_field_submodule_is_bound_before_any_method_of_its_holder_runs():
    class B(nn.Module):
        def setup(self):
            self.w = self.param("w", nn.initializers.ones, (2,))

        def f(self, x):
            return self.w + x

    class A(nn.Module):
        b: nn.Module

        def __call__(self, x):
            return self.b.f(x)

    variables = A(b=B()).init(KEY, jnp.zeros(2))
    y = nn.apply(lambda a, x: a.b.f(x), A(b=B()))(variables, jnp.zeros(2))
    assert y.tolist() == [1.0, 1.0]


def test_shared_field_submodule_lives_where_it_was_first_adopted():
    class Shared(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(x)

    class Holder(nn.Module):
        shared: nn.Module

        def __call__(self, x):
            return self.shared(x)

    class Top(nn.Module):
        a: nn.Module
        b: nn.Module

        def run_b(self, x):
            return self.b(x)

        def __call__(self, x):
            return self.a(x) + self.b(x)

    sh = Shared()
    top = Top(a=Holder(shared=sh), b=Holder(shared=sh))
    params = top.init(KEY, jnp.ones(1))["params"]
    assert list(params) == ["a"]
    top.apply({"params": params}, jnp.ones(1), method="run_b")  # finds /a/shared


def test_repr_and_dir():
    class M(nn.Module):
        def setup(self):
            self.d = nn.Dense(2)

        def __call__(self, x):
            return self.d(x)

    scope = Scope({})
    m = M(parent=scope)
    repr(m)
    assert m._state.setup_called == nn_module.SetupState.NEW
    assert "d" in dir(m)
    assert m._state.setup_called == nn_module.SetupState.DONE


def test_bound_module_is_not_hashable_but_unbound_is():
    assert hash(nn.Dense(3)) == hash(nn.Dense(3))
    with pytest.raises(TypeError, match="hold variables"):
        hash(nn.Dense(3, parent=Scope({})))


def test_compact_name_scope_methods_get_their_own_subtree():
    class Foo(nn.Module):
        @nn.compact_name_scope
        def up(self, x):
            return nn.Dense(3)(x)

        @nn.compact
        def __call__(self, x):
            return self.up(x) + self.up(x) + nn.Dense(3)(x)

    assert Foo._compact_name_scope_methods == ("up",)
    variables = Foo().init(KEY, jnp.ones((1, 2)))
    assert sorted(variables["params"]) == ["Dense_0", "up"]
    assert list(variables["params"]["up"]) == ["Dense_0"]
    assert Foo().apply(variables, jnp.ones((1, 2)), method="up").shape == (1, 3)


def test_perturb_is_identity_without_the_collection_and_checks_it_when_given():
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.perturb("p", x * 2)

    variables = Foo().init(KEY, jnp.ones(2))
    assert Foo().apply({"params": {}}, jnp.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="Perturbation collection"):
        Foo().apply({"perturbations": {}}, jnp.ones(2))
    Foo().apply(variables, jnp.ones(2))


def test_lazy_init_does_not_run_the_forward_pass():
    class Big(nn.Module):
        @nn.compact
        def __call__(self, x):
            k = self.param("k", nn.initializers.lecun_normal(), (x.shape[-1], 4))
            return x @ k

    huge = jax.ShapeDtypeStruct((1 << 40, 8), jnp.float32)  # 32 TiB if materialized
    variables = Big().lazy_init(KEY, huge)
    ref = Big().init(KEY, jnp.ones((1, 8)))
    assert jnp.array_equal(variables["params"]["k"], ref["params"]["k"])


def test_method_resolution_errors_and_submodule_names():
    class Foo(nn.Module):
        bar: nn.Module
        n: int = 1

        @nn.compact
        def __call__(self, x):
            return self.bar(x)

    foo = Foo(nn.Dense(3))
    variables = foo.init(KEY, jnp.zeros(3))
    assert foo.apply(variables, jnp.zeros(3), method="bar").shape == (3,)
    with pytest.raises(TypeError, match="'Foo.n' must be a callable"):
        foo.apply(variables, method="n")

    class NoCall(nn.Module):
        pass

    with pytest.raises(AttributeError, match='"NoCall" object has no attribute "__call__"'):
        NoCall().init(KEY)


def test_rng_errors_name_the_module_and_the_stream():
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x)

    with pytest.raises(errors.InvalidRngError, match='Dense_0 needs PRNG for "params"'):
        M().init({"other": KEY}, jnp.ones((1, 3)))
    with pytest.raises(errors.InvalidRngError, match="in Module M, but rngs are: bad"):
        M().init("bad", jnp.ones((1, 3)))


def test_private_helpers_under_flax_names():
    assert nn_module._freeze_attr([1, [2]]) == (1, (2,))
    assert nn_module._get_suffix_value_pairs({"a": [1, 2]}) == [("_a_0", 1), ("_a_1", 2)]
    assert nn_module._get_suffix_value_pairs([]) == [("", [])]


def test_preserve_adopted_names_is_decided_by_the_adopting_class():
    class Leaf(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + self.param("p", nn.initializers.zeros, x.shape)

    class Keep(nn.Module):
        sub: nn.Module
        preserve_adopted_names = True

        def __call__(self, x):
            return self.sub(x)

    params = Keep(sub=Leaf(name="leaf")).init(KEY, jnp.zeros(1))["params"]
    assert list(params) == ["leaf"]


# --- transforms -----------------------------------------------------------------------------


def test_field_module_bound_elsewhere_crosses_a_transform_on_its_own_scope():
    class A(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x)

    class B(nn.Module):
        a: nn.Module

        @functools.partial(nn.vmap, variable_axes={"params": 0},
                           split_rngs={"params": True})
        @nn.compact
        def __call__(self, x):
            return self.a(x)

    class D(nn.Module):
        @nn.compact
        def __call__(self, x):
            return B(A())(x)

    shapes = jax.tree_util.tree_map(jnp.shape, D().init(KEY, jnp.ones((4, 2))))
    assert shapes["params"]["A_0"]["Dense_0"]["kernel"] == (4, 2, 3)


def test_one_module_as_field_and_argument_of_a_jit_is_one_clone():
    class Foo(nn.Module):
        m1: nn.Module

        @nn.compact
        def __call__(self, x, m2):
            return m2(self.m1(x))

    class Bar(nn.Module):
        @nn.compact
        def __call__(self, x):
            dense = nn.Dense(2)
            return nn.jit(Foo)(dense)(x, dense)

    params = Bar().init(KEY, jnp.zeros((2, 2)))["params"]
    assert list(params) == ["Dense_0"]


def test_partial_module_class_can_be_transformed():
    dense = functools.partial(nn.Dense, use_bias=False)
    model = nn.vmap(dense, variable_axes={"params": 0}, split_rngs={"params": True})(4)
    shapes = jax.tree_util.tree_map(jnp.shape, model.init(KEY, jnp.ones((3, 4, 4))))
    assert shapes == {"params": {"kernel": (3, 4, 4)}}


def test_setup_is_dry_run_on_a_test_scope_before_a_transform():
    scopes = []

    class A(nn.Module):
        def setup(self):
            scopes.append(type(self.scope).__name__)
            self.d = nn.Dense(2)

        @nn.remat
        def __call__(self, x):
            return self.d(x)

    A().init(KEY, jnp.ones((1, 2)))
    assert scopes == ["TestScope", "Scope"]  # validated outside, then run inside
