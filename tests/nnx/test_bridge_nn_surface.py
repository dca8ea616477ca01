"""Names of Flax 0.12.8's ``flax.nnx.bridge.{module, variables, wrappers}`` and
``flax.nnx.nn.{initializers, linear, lora, recurrent}`` that flaxen gained for the surface check:
each does what Flax's does."""

import dataclasses
import threading
import typing as tp

import jax
import jax.numpy as jnp
import pytest

from flaxen import linen as nn
from flaxen import nnx
from flaxen.nnx import bridge
from flaxen.nnx.bridge import module as bm
from flaxen.nnx.bridge import variables as bv
from flaxen.nnx.nn import initializers, linear, lora, recurrent

# -- bridge.variables --------------------------------------------------------------------------

def test_sort_variable_types_puts_subclasses_first():
    class Special(nnx.Param):
        pass

    class Other(nnx.Variable):
        pass

    order = bv.sort_variable_types([nnx.Variable, Other, nnx.Param, Special])
    assert order.index(Special) < order.index(nnx.Param) < order.index(nnx.Variable)
    assert order.index(Other) < order.index(nnx.Variable)
    assert bv.sort_variable_types(iter([nnx.Param])) == [nnx.Param]


def test_get_col_name_reads_the_collection_of_a_key_path():
    tree = {"batch_stats": {"bn": {"mean": jnp.zeros(2)}}, "params": {"w": jnp.ones(1)}}
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    assert [bv.get_col_name(path) for path, _ in leaves] == ["batch_stats", "params"]
    with pytest.raises(ValueError, match="DictKey"):
        bv.get_col_name((jax.tree_util.SequenceKey(0),))


def test_vanilla_and_to_linen_take_vs_by_keyword():
    plain = nnx.Param(jnp.ones(2))
    assert bv.is_vanilla_variable(vs=plain)
    assert bv.to_linen_var(vs=plain).shape == (2,)
    assert isinstance(bv.B, tp.TypeVar)


# -- bridge.module -----------------------------------------------------------------------------

def test_module_context_is_a_per_thread_dataclass():
    ctx = bm.ModuleContext()
    assert [f.name for f in dataclasses.fields(ctx)] == ["module_stack"]
    assert ctx.module_stack == [None]
    assert ctx == bm.ModuleContext()
    with pytest.raises(TypeError):
        hash(ctx)
    ctx.module_stack.append("here")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(list(ctx.module_stack)))
    thread.start()
    thread.join()
    assert seen == [[None]]  # another thread starts from a fresh stack
    assert isinstance(bm.MODULE_CONTEXT, bm.ModuleContext)


def test_has_setup_module_meta_base_and_state():
    class WithSetup(bridge.Module):
        def setup(self):
            self.dense = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    class Without(bridge.Module):
        pass

    assert bm.has_setup(WithSetup()) and not bm.has_setup(Without())
    assert type(bridge.Module) is bm.ModuleMeta
    assert issubclass(bm.ModuleMeta, type(nnx.Module))
    assert issubclass(bridge.Module, bm.ModuleBase)
    assert issubclass(bm.ModuleState, nnx.State)
    merged = bm.ModuleState.merge(nnx.State({"a": nnx.Param(jnp.ones(1))}),
                                  nnx.State({"b": nnx.Param(jnp.zeros(1))}))
    assert set(merged) == {"a", "b"}
    assert isinstance(bm.M, tp.TypeVar) and bm.M.__bound__ is not None


def test_scope_is_a_pytree_not_a_module():
    scope = bm.Scope(nnx.Rngs(0), False)
    assert isinstance(scope, nnx.Pytree) and not isinstance(scope, nnx.Module)
    assert scope.copy().rngs is scope.rngs


def test_bridge_module_still_applies_after_the_metaclass_rename():
    class Dense(bridge.Module):
        features: int

        @bridge.compact
        def __call__(self, x):
            w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
            return x @ w

    variables = Dense(3).init(0, jnp.ones((1, 2)))
    assert Dense(3).apply(variables, jnp.ones((1, 2))).tolist() == [[2.0, 2.0, 2.0]]


# -- bridge.wrappers ---------------------------------------------------------------------------

def test_to_nnx_module_and_rngs_properties():
    dense = nn.Dense(2)
    rngs = nnx.Rngs(0)
    model = bridge.ToNNX(dense, rngs=rngs)
    assert model.module is dense
    assert model.rngs is model.to_nnx__rngs and isinstance(model.rngs, nnx.Rngs)
    assert bridge.ToNNX(dense).rngs is None


# -- nnx.nn ------------------------------------------------------------------------------------

def test_nn_typing_names():
    assert initializers.DtypeLikeInexact is tp.Any
    assert linear.Axis is int and linear.Size is int
    assert lora.Axis is int and lora.Size is int and lora.Array is jax.Array
    assert isinstance(recurrent.A, tp.TypeVar) and recurrent.Output is tp.Any


def test_canonicalize_padding_is_the_conv_padding_rule():
    assert linear.canonicalize_padding(1, 2) == [(1, 1), (1, 1)]
    assert linear.canonicalize_padding("SAME", 2) == "SAME"
    assert linear.canonicalize_padding([(0, 1)], 1) == [(0, 1)]
    with pytest.raises(ValueError):
        linear.canonicalize_padding([1, 2, 3], 2)


def test_rnn_base_is_the_protocol_bidirectional_takes():
    assert tp.Protocol in recurrent.RNNBase.__mro__ or issubclass(recurrent.RNNBase, tp.Generic)
    assert recurrent.Bidirectional.__annotations__["forward_rnn"] in ("RNNBase", recurrent.RNNBase)
    with pytest.raises(TypeError):
        recurrent.RNNBase()


def test_bidirectional_class_defaults_and_instance_values():
    cell = nnx.GRUCell(3, 4, rngs=nnx.Rngs(0))
    layer = nnx.Bidirectional(nnx.RNN(cell), nnx.RNN(nnx.GRUCell(3, 4, rngs=nnx.Rngs(1))))
    assert nnx.Bidirectional.time_major is False and nnx.Bidirectional.return_carry is False
    out = layer(jnp.ones((2, 5, 3)))
    assert out.shape == (2, 5, 8)  # the default merge_fn concatenates features
    layer2 = nnx.Bidirectional(nnx.RNN(cell), nnx.RNN(cell), merge_fn=lambda a, b: a + b,
                               return_carry=True)
    (carry_f, carry_b), out2 = layer2(jnp.ones((2, 5, 3)))
    assert out2.shape == (2, 5, 4) and layer2.return_carry is True
