"""Flax 0.12.8's public surface of variablelib, statelib, rnglib, pytreelib and the modes.

Each test calls the API the way code written for Flax 0.12.8 does (keyword names, class
relations, hashing, dataclass-ness) and checks the behaviour behind it.
"""

import dataclasses
import inspect
import warnings

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.nnx import variablelib
from flaxen.typing import BaseConfigContext

# -- variablelib: names, contexts -------------------------------------------------------------


def test_variablelib_type_names():
    assert variablelib.AxisName is str and variablelib.AxisIndex is int
    for name in ("B", "C", "F", "P", "V"):
        assert isinstance(getattr(variablelib, name), tp_typevar())
    assert variablelib.V.__bound__ is not None
    for name in ("GetValueHook", "SetValueHook", "CreateValueHook", "AddAxisHook",
                 "RemoveAxisHook"):
        # typing forms usable in annotations and subscriptable like Flax's
        getattr(variablelib, name)[int] if name.endswith("ValueHook") else None
    assert variablelib.VariableTypeCache["params"] is nnx.Param


def tp_typevar():
    import typing

    return typing.TypeVar


def test_variable_type_cache_is_the_registry():
    @nnx.register_variable_name("h5_surface_counts")
    class H5Count(nnx.Variable):
        pass

    assert variablelib.VariableTypeCache["h5_surface_counts"] is H5Count


def test_variable_context_holds_the_stacks():
    ctx = variablelib.VARIABLE_CONTEXT
    assert isinstance(ctx, variablelib.VariableContext)
    assert [f.name for f in dataclasses.fields(ctx)] == [
        "variable_hijax_stack", "variable_ref_stack", "eager_shard_stack"]
    with nnx.var_defaults(ref=True):
        assert ctx.variable_ref_stack[-1] is True
    with nnx.use_eager_sharding(False):
        assert ctx.eager_shard_stack[-1] is False


def test_creation_defaults_context_keywords():
    ctx = variablelib.VarDefaultsContext(hijax_prev=None, hijax_new=None, ref_prev=None,
                                         ref_new=None)
    with ctx:
        pass
    made = nnx.var_defaults(hijax=True)
    assert (made.hijax_new, made.hijax_prev, made.ref_new) == (True, None, None)
    made.__exit__(None, None, None)
    assert nnx.var_defaults().hijax is False
    with pytest.raises(TypeError):
        variablelib.VarDefaultsContext({}, {})  # keyword-only, as in Flax


def test_use_eager_sharding_is_a_config_context():
    assert issubclass(nnx.use_eager_sharding, BaseConfigContext)
    assert nnx.use_eager_sharding.get_default() is True
    stack = nnx.use_eager_sharding.get_stack()

    @nnx.use_eager_sharding(False)
    def inside():
        return nnx.using_eager_sharding(), list(stack)

    assert inside() == (False, [False]) and nnx.using_eager_sharding() is True


def test_graph_mode_contexts_are_config_contexts():
    for ctx in (nnx.set_graph_mode, nnx.set_graph_updates):
        assert issubclass(ctx, BaseConfigContext)
        assert ctx.get_default() is True and ctx.get_stack() == []
        with ctx(False):
            assert ctx.current_value() is False and ctx.get_stack() == [False]
        assert ctx.current_value() is True


def test_variable_meta_parameter_names():
    params = list(inspect.signature(variablelib.VariableMeta.__new__).parameters)
    assert params[1:4] == ["cls_name", "bases", "attrs"]
    made = variablelib.VariableMeta("Made", (nnx.Variable,), {})
    assert issubclass(made, nnx.Variable) and made.__slots__ == ()


# -- VariableMetadata and with_metadata ---------------------------------------------------------


def test_variable_metadata_is_a_dataclass_with_on_hooks():
    fields = [f.name for f in dataclasses.fields(nnx.VariableMetadata)]
    assert fields == ["raw_value", "on_set_value", "on_get_value", "on_create_value",
                      "on_add_axis", "on_remove_axis", "metadata"]
    vm = nnx.VariableMetadata(1.0, metadata={"a": 1})
    assert vm == nnx.VariableMetadata(1.0, metadata={"a": 1}) and vm.on_get_value == ()
    assert vm != nnx.VariableMetadata(2.0, metadata={"a": 1})
    with pytest.raises(TypeError):
        hash(vm)
    vm.extra = "settable"  # no __slots__, as in Flax
    assert dataclasses.replace(vm, raw_value=3.0).raw_value == 3.0
    with pytest.raises(TypeError, match="unexpected keyword"):
        nnx.VariableMetadata(1.0, bogus_hooks=())


def test_on_hooks_run_with_flax_arguments():
    log = []
    vm = nnx.VariableMetadata(
        jnp.ones(2),
        on_set_value=(lambda v, x: x * 2,),
        on_get_value=(lambda v, x: x + 1,),
        on_create_value=(lambda v, x: x * 10,),
        on_add_axis=(lambda v, i, n: log.append(("add", i, n)),),
        on_remove_axis=(lambda v, i, n: log.append(("rm", i, n)),),
    )
    with pytest.warns(UserWarning, match="hooks are deprecated"):
        p = nnx.Param(vm)
    assert p.get_raw_value().tolist() == [10.0, 10.0]
    assert p[...].tolist() == [11.0, 11.0]
    p[...] = jnp.zeros(2) + 3
    assert p.get_raw_value().tolist() == [6.0, 6.0]
    p.add_axis(0, "batch")
    p.remove_axis(1, None)
    assert log == [("add", 0, "batch"), ("rm", 1, None)]
    assert p.get_metadata("on_get_value") == vm.on_get_value


def test_class_defined_on_hooks_become_metadata():
    class Doubled(nnx.Variable):
        def on_get_value(self, value):
            return value * 2

    with pytest.warns(UserWarning, match="hooks are deprecated"):
        v = Doubled(jnp.array(2.0))
    assert float(v[...]) == 4.0 and v.get_metadata("on_get_value") is Doubled.on_get_value


def test_with_metadata_takes_flax_hook_names():
    params = list(inspect.signature(nnx.with_metadata).parameters)
    assert params[:6] == ["initializer", "on_set_value", "on_get_value", "on_create_value",
                          "on_add_axis", "on_remove_axis"]
    init = nnx.with_metadata(jax.nn.initializers.ones, on_get_value=lambda v, x: -x, tag="t")
    vm = init(jax.random.key(0), (2,))
    assert callable(vm.on_get_value) and vm.metadata == {"tag": "t"}
    with pytest.warns(UserWarning):
        p = nnx.Param(vm)
    assert p[...].tolist() == [-1.0, -1.0] and p.get_metadata("tag") == "t"


def test_flax_0_8_3_hook_names_still_work():
    init = nnx.with_metadata(jax.nn.initializers.zeros, set_value_hooks=lambda v, x: x + 5)
    vm = init(jax.random.key(0), (1,))
    assert vm.metadata == {} and len(vm.set_value_hooks) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the 0.8.3 spelling does not warn
        p = nnx.Param(vm)
    p[...] = jnp.zeros(1)
    assert p[...].tolist() == [5.0]


# -- Variable members -----------------------------------------------------------------------------


def test_variable_member_parameter_names():
    log = []
    with pytest.warns(UserWarning, match="hooks are deprecated"):
        p = nnx.Param(jnp.ones((2, 3)), on_add_axis=lambda v, i, n: log.append((i, n)))
    p.add_axis(axis_index=1, axis_name="x")
    p.remove_axis(axis_index=0, axis_name=None)
    assert log == [(1, "x")]
    assert p.shape == (2, 3) and "shape" in dir(type(p))
    q = nnx.Param.from_metadata(jnp.zeros(1), attributes={"hijax": False, "ref": False})
    assert type(q) is nnx.Param
    q.update_from_state(variable_state=nnx.Param(jnp.ones(1), tag="u"))
    assert q.get_metadata("tag") == "u" and q[...].tolist() == [1.0]


def test_variable_shape_reads_through_a_ref():
    v = nnx.Param(jnp.ones((4,)), ref=True)
    assert v.shape == (4,)


def test_to_state_takes_value_and_updates():
    v = nnx.Param(jnp.ones(2), ref=True, tag="a")
    vs = v.to_state(tag="b")
    assert vs.tag == "b" and not variablelib.is_array_ref(vs.value)
    assert v.get_metadata("tag") == "a"
    assert variablelib.is_array_ref(v.to_state(_copy_ref=False).get_raw_value())
    assert v.to_state(value=jnp.zeros(1)).value.tolist() == [0.0]


# -- State and FlatState --------------------------------------------------------------------------


def test_state_copy_flag_and_settable():
    raw = {"a": {"b": 1}}
    copied = nnx.State(raw)
    assert isinstance(copied["a"], nnx.State) and copied["a"] is not raw["a"]
    shared = nnx.State(raw, _copy=False)
    shared["c"] = 2
    assert raw["c"] == 2 and shared.raw_mapping is raw
    assert hasattr(shared, "__dict__")  # not __slots__-only, as in Flax
    with pytest.raises(TypeError):
        nnx.State(raw, False)  # _copy is keyword-only


def test_state_merge_is_a_classmethod():
    class MyState(nnx.State):
        pass

    merged = MyState.merge(nnx.State({"a": 1}), nnx.State({"b": {"c": 2}}))
    assert type(merged) is MyState and merged["b"]["c"] == 2
    assert isinstance(inspect.getattr_static(nnx.State, "merge"), classmethod)


def test_flat_state_hashes_by_identity_and_is_generic():
    state = nnx.State({"a": nnx.Param(1.0)})
    f1, f2 = nnx.to_flat_state(state), nnx.to_flat_state(state)
    assert f1 != f2 and f1 == f1 and {f1: 1}[f1] == 1
    assert f1.paths == f2.paths
    assert nnx.FlatState[int] is not None


# -- rnglib ---------------------------------------------------------------------------------------


def test_rngs_default_by_keyword():
    a, b = nnx.Rngs(default=3), nnx.Rngs(3)
    assert jnp.array_equal(jax.random.key_data(a()), jax.random.key_data(b()))


def test_not_key_is_a_path_value_filter():
    from flaxen.nnx import rnglib

    rngs = nnx.Rngs(0)
    assert rnglib.NotKey(path=("default", "count"), x=rngs.default.count)
    assert not rnglib.NotKey(("default", "key"), rngs.default.key)
    assert not rnglib.NotKey((), nnx.Param(1.0))


def test_split_backups_is_a_struct_dataclass():
    from flaxen import struct
    from flaxen.nnx.rnglib import SplitBackups

    rngs = nnx.Rngs(0)
    backups = nnx.split_rngs(rngs, splits=3)
    assert isinstance(backups, struct.PyTreeNode) and dataclasses.is_dataclass(backups)
    assert [f.name for f in dataclasses.fields(backups)] == ["backups"]
    assert SplitBackups[tuple] is not None and not hasattr(backups, "__len__")
    assert backups == backups.replace(backups=backups.backups)
    assert rngs.default.key.value.shape == (3,)
    nnx.restore_rngs(backups)
    assert rngs.default.key.value.shape == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        backups.backups = []


# -- pytreelib / module ---------------------------------------------------------------------------


def test_pytree_state_flags():
    from flaxen.nnx import reprlib
    from flaxen.nnx.pytreelib import PytreeState

    state = PytreeState(initializing=True, is_setup=True)
    assert state.initializing and state.is_setup and isinstance(state, reprlib.Representable)
    assert not PytreeState().initializing
    assert nnx.Linear(1, 1, rngs=nnx.Rngs(0))._pytree__state.is_setup is False


def test_dict_hashable_mapping_repr():
    from flaxen.nnx import reprlib

    d = nnx.Dict(a=1)
    assert isinstance(d, reprlib.MappingReprMixin) and hash(d) == id(d)
    assert d == nnx.Dict(a=1) and d != nnx.Dict(a=2)
    assert {d} == {d}


def test_list_unhashable_sequence_repr():
    from flaxen.nnx import reprlib

    lst = nnx.List([1, 2])
    assert isinstance(lst, reprlib.SequenceReprMixin)
    with pytest.raises(TypeError):
        hash(lst)
    # Flax's field-less dataclass __eq__: never equal to a list, equal to any List
    assert lst != [1, 2] and lst == nnx.List([1, 2]) and lst == nnx.List([3])
    assert dataclasses.fields(lst) == ()


def test_check_pytree_parameter_name():
    m = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    nnx.check_pytree(pytree=m)
    with pytest.raises(TypeError, match="nnx.Pytree"):
        nnx.check_pytree(pytree=1)


# -- hijax Variables ------------------------------------------------------------------------------


def test_hijax_variable_type_state_and_names():
    from flaxen.nnx.variablelib import HijaxVariable, HijaxVariableMeta, VariableQDD

    v = nnx.Param(jnp.ones((2,)), hijax=True)
    assert type(v) is HijaxVariable and isinstance(type(v), HijaxVariableMeta)
    assert HijaxVariable[int] is not None
    qdd = v.cur_qdd()
    assert isinstance(qdd, VariableQDD) and qdd == v.type_state() and hash(qdd) == hash(qdd)
    assert qdd.var_type is nnx.Param and qdd.leaf_avals[0].shape == (2,)
    assert v.has_qdd and not nnx.Param(jnp.ones(1), hijax=True, ref=True).has_qdd
    v[...] = jnp.ones((3,))  # outside a trace a new shape changes the type state
    assert v.type_state().leaf_avals[0].shape == (3,) and v.type_state() != qdd
    tangent = VariableQDD((jax.core.ShapedArray((), jnp.int32),), None, nnx.Param)
    assert tangent.to_tangent_qdd().leaf_avals[0].dtype == jax.dtypes.float0
    weak = VariableQDD((jax.core.ShapedArray((), jnp.float32, weak_type=True),), None,
                       nnx.Param)
    assert not weak.normalize().leaf_avals[0].weak_type


def test_hijax_variable_divmod_and_from_metadata():
    from flaxen.nnx.variablelib import HijaxVariable

    v = nnx.Param(jnp.array(7), hijax=True)
    q, r = divmod(v, 2)
    assert (int(q), int(r)) == (3, 1)
    q, r = divmod(15, v)
    assert (int(q), int(r)) == (2, 1)
    meta = {"hijax": True, "ref": False, "_var_type": nnx.BatchStat}
    made = HijaxVariable.from_metadata(jnp.zeros(1), metadata=meta)
    assert type(made) is HijaxVariable and made.var_type is nnx.BatchStat
