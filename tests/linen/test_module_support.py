"""flaxen.linen.module's helpers: wrap_method_once and the method_handler_wrapped mark
(what interception libraries rely on), run_interceptors, descriptors, CompactNameScope."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import errors
from flaxen.linen import module as nn_module


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)

    def double(self, x):
        return 2 * self(x)


def _unwrap(method):
    # what a quantization library does before replacing a method
    while hasattr(method, "method_handler_wrapped"):
        method = method.__wrapped__
    return method


def test_module_methods_carry_the_mark_and_unwrap_to_the_user_function():
    assert Block.__call__.method_handler_wrapped is True
    raw = _unwrap(Block.__call__)
    assert raw.__qualname__ == "Block.__call__" and not hasattr(raw, "method_handler_wrapped")
    assert _unwrap(Block.double).__qualname__ == "Block.double"


def _quantized_subclass(cls, scale):
    raw = _unwrap(cls.__call__)
    seen = []

    @functools.wraps(raw)
    def intercepted(self, *args, **kwargs):
        # the wrapper runs inside the module: the module stack's top is the module itself
        seen.append(nn_module._context.module_stack[-1] is self)
        return raw(self, *args, **kwargs) * scale

    method = nn_module.wrap_method_once(intercepted)
    return type(cls.__name__, (cls,), {"__call__": method}), seen


def test_replaced_method_applies_inside_the_module_with_same_params():
    x = jnp.ones((2, 4))
    params = Block().init(jax.random.key(0), x)
    new_cls, seen = _quantized_subclass(Block, 10.0)
    assert new_cls.__call__.method_handler_wrapped is True
    model = Block()
    model.__class__ = new_cls
    y = model.apply(params, x)
    np.testing.assert_allclose(y, 10.0 * Block().apply(params, x), rtol=1e-6)
    assert seen == [True]
    # methods that call the replaced one go through it too
    np.testing.assert_allclose(model.apply(params, x, method="double"), 2 * y, rtol=1e-6)


def test_wrap_method_once_is_idempotent_and_passes_non_module_calls_through():
    def f(a, b):
        return a + b

    w = nn_module.wrap_method_once(f)
    assert nn_module.wrap_method_once(w) is w
    assert w.__wrapped__ is f
    assert w(1, 2) == 3  # not called on a Module: just the function
    assert nn_module.wrap_method_once(Block.__call__) is Block.__call__


def test_a_marked_function_is_not_rewrapped_by_subclassing():
    def helper(self):
        return self.scope is None

    helper.method_handler_wrapped = True  # opting out, as some libraries do
    cls = type("WithHelper", (nn.Module,), {"helper": helper})
    assert cls.helper is helper


def test_jit_method_unwraps_to_the_user_function():
    class Jitted(nn.Module):
        @nn.jit
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x)

    assert Jitted.__call__.method_handler_wrapped is True
    assert _unwrap(Jitted.__call__).__qualname__.endswith("Jitted.__call__")


def test_intercept_methods_sees_replaced_method():
    names = []

    def spy(next_fun, args, kwargs, context):
        names.append((type(context.module).__name__, context.method_name))
        return next_fun(*args, **kwargs)

    x = jnp.ones((1, 4))
    params = Block().init(jax.random.key(0), x)
    new_cls, _ = _quantized_subclass(Block, 2.0)
    with nn.intercept_methods(spy):
        new_cls().apply(params, x)
    assert ("Block", "__call__") in names and ("Dense", "__call__") in names


def test_run_interceptors_chains_innermost_last_added():
    order = []

    def outer(next_fun, args, kwargs, context):
        order.append("outer")
        return next_fun(*args, **kwargs) + 1

    def inner(next_fun, args, kwargs, context):
        order.append("inner")
        return next_fun(*args, **kwargs) * 10

    def method(self, x):
        return x

    with nn.intercept_methods(outer), nn.intercept_methods(inner):
        out = nn_module.run_interceptors(method, Block(), 1)
    assert out == 11 and order == ["outer", "inner"]
    assert nn_module.run_interceptors(method, Block(), 5) == 5


def test_descriptor_wrapper_turns_inner_attribute_errors_into_descriptor_errors():
    class Thing:
        @property
        def value(self):
            return self.nope

    wrapper = nn_module.create_descriptor_wrapper(Thing.__dict__["value"])
    assert isinstance(wrapper, nn_module.DescriptorWrapper)
    assert nn_module.wrap_descriptor_once(wrapper) is wrapper
    assert hasattr(type(wrapper), "__set__")

    class GetOnly:
        def __get__(self, obj, objtype=None):
            return 1

    only = nn_module.create_descriptor_wrapper(GetOnly())
    assert not hasattr(type(only), "__set__")  # only the hooks the descriptor has
    Thing.value = wrapper
    with pytest.raises(errors.DescriptorAttributeError):
        _ = Thing().value
    assert wrapper.fget is not None  # other attributes reach the wrapped descriptor


def test_thread_local_stack_and_sow_defaults():
    s = nn_module.ThreadLocalStack()
    s.push("a")
    s.push("b")
    assert list(s) == ["b", "a"] and len(s) == 2 and repr(s) == "ThreadLocalStack(['a', 'b'])"
    assert s.pop() == "b"
    assert nn_module.tuple_reduce(nn_module.tuple_init(), 1) == (1,)
    assert nn_module.capture_call_intermediates(None, "__call__")
    assert not nn_module.capture_call_intermediates(None, "encode")


def test_parent_descriptor_holds_modules_weakly():
    class Holder:
        parent = nn_module.ParentDescriptor()

    h = Holder()
    h.parent = None
    assert h.parent is None
    m = Block()
    h.parent = m
    assert h.parent is m
    del m
    assert h.parent is None  # the module was collected: the weak reference is dead
    assert Holder.parent is None


def test_compact_name_scope_module_scopes_what_fn_builds():
    scoped = nn_module.CompactNameScope(lambda m, x: m(x) + 1, lambda: nn.Dense(2))
    x = jnp.ones((1, 3))
    v = scoped.init(jax.random.key(0), x)
    y = scoped.apply(v, x)
    assert list(v["params"]) == ["Dense_0"] and y.shape == (1, 2)


def test_module_base_and_test_scope():
    assert issubclass(nn.Module, nn_module.ModuleBase)
    assert nn_module.TestScope({}).make_rng("params") is not None
