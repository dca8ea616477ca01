"""Names Flax 0.12.8 has in flax.nnx's modules: present here, same objects, same behaviour."""

from __future__ import annotations

import copy
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from flaxen import nnx
from flaxen.nnx import (
    filterlib,
    graphlib,
    helpers,
    ids,
    module,
    pytreelib,
    rnglib,
    statelib,
    summary,
    traversals,
    variablelib,
    visualization,
)


def test_aliases_and_type_variables_have_flax_kinds():
    for mod, names in [
        (module, "A B F P R S V StateMapping"), (statelib, "A K S V ExtractValueFn SetValueFn"),
        (rnglib, "A F Fargs AxesValue Counts OutShardingType StreamBackup"),
        (pytreelib, "P"), (helpers, "A M TS"), (filterlib, "FilterLiteral"),
        (traversals, "IsLeafCallable"), (summary, "NodeStats"), (nnx, "M"),
    ]:
        for name in names.split():
            value = getattr(mod, name)
            assert type(value).__module__ in ("typing", "types", "collections.abc") or isinstance(
                value, type), (mod.__name__, name, value)
    assert pytreelib.DataAnnotation == "__data__" and pytreelib.StaticAnnotation == "__static__"
    assert pytreelib.ObjectMeta is pytreelib.PytreeMeta
    assert isinstance(pytreelib.BUILDING_DOCS, bool)
    assert summary.in_ipython is False and visualization.in_ipython is False


def test_reexports_are_the_same_objects():
    assert module.iter_children is nnx.iter_children is graphlib.iter_children
    assert module.iter_module_children is nnx.iter_module_children
    assert module.iter_modules is nnx.iter_modules
    assert module.view is nnx.view and module.view_info is nnx.view_info
    assert module.with_attributes is nnx.with_attributes
    assert nnx.identity is jax.nn.identity is nnx.nn.activations.identity
    assert variablelib.variable_type_from_name is nnx.variable_type_from_name
    assert variablelib.register_variable_name is nnx.register_variable_name
    assert variablelib.variable_name_from_type is nnx.variable_name_from_type


def test_variables_is_state_and_name_registry_works():
    model = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
    params = nnx.variables(model, nnx.Param)
    assert set(params) == {"scale", "bias"}
    assert nnx.variable_type_from_name("batch_stats") is nnx.BatchStat
    assert nnx.variable_name_from_type(nnx.Param) == "params"
    with pytest.raises(ValueError, match="register"):
        nnx.variable_type_from_name("never_registered_collection")


def test_module_meta_and_helpers_of_nnx_module():
    assert type(nnx.Module) is module.ModuleMeta
    assert isinstance(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), nnx.Module)
    assert module.first_from(None, False, 3, error_msg="x") is False
    with pytest.raises(ValueError, match="nothing given"):
        module.first_from(None, None, error_msg="nothing given")
    assert module.tuple_reduce(module.tuple_init(), 1) == (1,)
    tree = nnx.Sequential(nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
    names = [type(m).__name__ for _, m in module.iter_modules(tree)]
    assert names == ["Linear", "List", "Sequential"]


def test_helpers_and_ids():
    assert helpers.has_keyword_arg(lambda x, *, rngs: x, "rngs")
    assert helpers.has_keyword_arg(lambda x, rngs=None: x, "rngs")
    assert not helpers.has_keyword_arg(lambda *args, **kw: 0, "rngs")
    assert helpers.ModuleDefApply[nnx.Linear] is not None
    a = ids.UUID(5)
    assert a == ids.UUID(5) and hash(a) == hash(5) and repr(a) == "UUID(5)"
    assert copy.deepcopy(a) != a and copy.copy(a) != a


def test_filter_and_rng_names():
    assert filterlib.HasTag.__annotations__ == {"tag": "str"}
    rngs = nnx.Rngs(0, dropout=1)
    flat = dict(nnx.to_flat_state(nnx.state(rngs, rnglib.NotKey)))
    assert flat and all(type(v) is nnx.RngCount for v in flat.values())

    def keyless(shape, dtype=None, out_sharding=None):
        return jnp.zeros(shape, dtype)

    assert isinstance(keyless, rnglib.KeylessInitializer)
    assert not isinstance(3, rnglib.KeylessInitializer)


def test_statelib_create_path_filters_and_nested_repr():
    state = nnx.State({"a": nnx.Param("x"), "b": {"c": "x", "d": "y"}})
    filters = statelib.create_path_filters(state)
    by_value = {v: f for f, v in filters.items()}
    assert set(by_value) == {"x", "y"}
    assert by_value["x"](("b", "c"), None) and by_value["x"](("a",), None)
    assert not by_value["y"](("a",), None)
    text = repr(statelib.NestedStateRepr(nnx.State({"k": {"j": 1}})))
    assert text == "{\n  'k': {\n    'j': 1\n  }\n}"


def test_pytreelib_reprs_and_context():
    x = np.zeros((2, 3), np.float32)
    assert repr(pytreelib.ArrayRepr.from_array(x)).startswith("Array(shape=(2, 3)")
    assert repr(pytreelib.MutableArrayRepr.from_array(x)).startswith("ArrayRef(shape=(2, 3)")
    text = repr(pytreelib.VariableRepr(nnx.Param, pytreelib.ArrayRepr((2,), "f"), {}))
    # the size comment follows the class name, as in Flax's Variable repr
    assert text.startswith("Param( # 2 (8 B)\n  value=Array(shape=(2,)")
    assert pytreelib.AttributeStatus(True, False) == (True, False)
    ctx = pytreelib.ObjectContext()
    assert ctx.seen_modules_repr is None and ctx.node_stats is None
    assert isinstance(pytreelib.OBJECT_CONTEXT, pytreelib.ObjectContext)


def test_summary_names():
    assert repr(summary.SizeBytes(1234, 4936)) == "1,234 [dim](4.9 KB)[/dim]"
    assert isinstance(summary.SizeBytes(1, 4), nnx.summary.SizeBytes)
    assert str(summary.ArrayRepr.from_array(jnp.zeros((4,), jnp.int8))) == "[dim]int8[/dim][4]"
    assert repr(summary.SimpleObjectRepr(nnx.Rngs(0))) == "Rngs(...)"
    info = summary.ObjectInfo(("a",), {}, {})
    assert info.path == ("a",) and info._fields == ("path", "stats", "variable_groups")
    assert yaml.dump({"k": None}, Dumper=summary.NoneDumper) == "k: None\n"
    assert issubclass(summary.NoneDumper, yaml.SafeDumper)


def test_render_object_constructor_renders_with_treescope():
    treescope = pytest.importorskip("treescope")

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __treescope_repr__(self, path, subtree_renderer):
            return visualization.render_object_constructor(
                Pair, {"a": self.a, "b": self.b}, path, subtree_renderer)

    text = treescope.render_to_text(Pair(1, "z"))
    assert "Pair(" in text and "a=1" in text and "b='z'" in text


def test_traversals_is_leaf_callable_annotates_is_leaf():
    def stop_at_b(path: tuple, _: tp.Mapping) -> bool:
        return path == ("b",)

    f: traversals.IsLeafCallable = stop_at_b
    flat = traversals.flatten_mapping({"a": {"x": 1}, "b": {"y": 2}}, is_leaf=f)
    assert flat == {("a", "x"): 1, ("b",): {"y": 2}}


def test_transforms_type_variables_and_resolve_kwargs():
    from flaxen.nnx.transforms import autodiff, compilation, general, iteration, transforms

    for mod, names in [
        (transforms, "A B C F G M MA N StrInt AxisName Leaves"), (general, "A F"),
        (iteration, "A B C F G M MA N T StrInt AxisName AxisFn Leaves"),
        (autodiff, "A F AxisName"), (compilation, "P R Specs AxisName"),
    ]:
        for name in names.split():
            assert type(getattr(mod, name)).__module__ in ("typing", "types"), (mod, name)
    assert transforms.Index is int and iteration.Index is int

    def f(x, y=2, z=3):
        return (x, y, z)

    assert transforms.resolve_kwargs(f, (1,), {"z": 9}) == (1, 2, 9)
    assert transforms.resolve_kwargs()(f)(0, z=1) == (0, 2, 1)
    with pytest.raises(ValueError, match="must be provided"):
        transforms.resolve_kwargs(f)
