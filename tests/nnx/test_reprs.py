"""Exact-text checks of NNX reprs against the layout Flax 0.12.8 prints (issue 22)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from flaxen import nnx


def _linear(din: int, dout: int) -> nnx.Linear:
    layer = nnx.Linear(din, dout, rngs=nnx.Rngs(0))
    # attributes holding functions print their address: replace them by plain values
    layer.dot_general = "dot"  # type: ignore[assignment]
    layer.promote_dtype = "promote"  # type: ignore[assignment]
    return layer


LINEAR_2_3 = """Linear( # Param: 9 (36 B)
  kernel=Param( # 6 (24 B)
    value=Array(shape=(2, 3), dtype=dtype('float32'))
  ),
  bias=Param( # 3 (12 B)
    value=Array(shape=(3,), dtype=dtype('float32'))
  ),
  in_features=2,
  out_features=3,
  use_bias=True,
  dtype=None,
  param_dtype=float32,
  precision=None,
  dot_general='dot',
  promote_dtype='promote',
  preferred_element_type=None
)"""


def test_linear_shows_shapes_and_size_comments():
    assert repr(_linear(2, 3)) == LINEAR_2_3


class MLP(nnx.Module):
    def __init__(self) -> None:
        self.l1 = nnx.Param(jnp.ones((2, 3)))
        self.bn = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
        self.bn.promote_dtype = "promote"  # type: ignore[assignment]
        self.do = nnx.Dropout(0.5, rngs=nnx.Rngs(1))
        self.l2 = nnx.Param(jnp.ones((1,)))


def test_mlp_with_batchnorm_and_dropout():
    lines = repr(MLP()).splitlines()
    assert lines[0] == ("MLP( # Param: 13 (52 B), BatchStat: 6 (24 B), RngState: 2 (12 B), "
                        "Total: 21 (88 B)")
    assert lines[1:4] == ["  l1=Param( # 6 (24 B)",
                          "    value=Array(shape=(2, 3), dtype=dtype('float32'))", "  ),"]
    assert lines[4] == "  bn=BatchNorm( # Param: 6 (24 B), BatchStat: 6 (24 B), Total: 12 (48 B)"
    assert lines[5:8] == ["    mean=BatchStat( # 3 (12 B)",
                          "      value=Array(shape=(3,), dtype=dtype('float32'))", "    ),"]
    assert "  do=Dropout( # RngState: 2 (12 B)" in lines
    assert "    rngs=RngStream( # RngState: 2 (12 B)" in lines
    assert "      key=RngKey( # 1 (8 B)" in lines
    assert "      count=RngCount( # 1 (4 B)" in lines
    # one element: the value itself, as Flax prints it
    assert lines[-4:] == ["  l2=Param( # 1 (4 B)", "    value=Array([1.], dtype=float32)",
                          "  )", ")"]


def test_abstract_model_counts_would_be_bytes():
    abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    lines = repr(abstract).splitlines()
    assert lines[0] == "Linear( # Param: 9 (36 B)"
    assert lines[1:4] == ["  bias=Param( # 3 (12 B)",
                          "    value=ShapeDtypeStruct(shape=(3,), dtype=float32)", "  ),"]


def test_state_and_flat_state():
    state = nnx.State({"a": {"c": nnx.Param(1.0)}, "b": nnx.Param(jnp.zeros(2))})
    assert repr(state) == """State({
  'a': {
    'c': Param(
      value=1.0
    )
  },
  'b': Param( # 2 (8 B)
    value=Array([0., 0.], dtype=float32)
  )
})"""
    assert repr(nnx.to_flat_state(state)) == """FlatState([
  (('a', 'c'), Param(
    value=1.0
  )),
  (('b',), Param( # 2 (8 B)
    value=Array([0., 0.], dtype=float32)
  ))
])"""


def test_rngs():
    count = repr(nnx.Rngs(params=3).params.count.get_value())
    text = repr(nnx.Rngs(params=3))
    assert text == f"""Rngs( # RngState: 2 (12 B)
  params=RngStream( # RngState: 2 (12 B)
    tag='params',
    key=RngKey( # 1 (8 B)
      value=Array((), dtype=key<fry>) overlaying:
      [0 3],
      tag='params'
    ),
    count=RngCount( # 1 (4 B)
      value={count},
      tag='params'
    )
  )
)"""


def test_list_and_dict_print_as_containers():
    assert repr(nnx.List([1, nnx.Param(jnp.ones(2))])) == """List([
  1,
  Param( # 2 (8 B)
    value=Array([1., 1.], dtype=float32)
  )
])"""
    assert repr(nnx.Dict(a=1, b="x")) == "Dict({\n  'a': 1,\n  'b': 'x'\n})"
    assert repr(nnx.List([])) == "List([])"


def test_pytree_hides_private_static_attributes_and_cycles():
    class P(nnx.Pytree):
        def __init__(self) -> None:
            self.x = np.ones(3, np.float32)
            self._hidden = 3
            self.me = nnx.data(None)

    p = P()
    p.me = p
    assert repr(p) == ("P(\n  x=Array(shape=(3,), dtype=dtype('float32')),\n"
                       "  me=P(...)\n)")


def test_graphdef_flat_layout():
    layer = _linear(1, 2)
    text = repr(nnx.graphdef(layer))
    assert text.startswith("GraphDef(nodes=[NodeDef(\n  type='Linear',\n  index=0,\n"
                           "  outer_index=None,\n  num_attributes=11,\n  metadata=Linear\n), "
                           "VariableDef(\n  type='Param',\n  index=1,\n")
    assert "('in_features', Static(value=1))" in text
    assert "('param_dtype', Static(value=<class 'jax.numpy.float32'>))" in text
    assert "('kernel', NodeAttr())" in text
    assert text.endswith("num_leaves=2)")


def test_filters_name_full_class_paths():
    assert repr(nnx.OfType(nnx.Param)) == "OfType(<class 'flaxen.nnx.variablelib.Param'>)"
    assert repr(nnx.Not(nnx.OfType(nnx.BatchStat))) == (
        "Not(OfType(<class 'flaxen.nnx.variablelib.BatchStat'>))")
    assert repr(nnx.PathContains("a")) == "PathContains('a', exact=True)"


def test_representable_bases():
    from flaxen.nnx import reprlib

    for obj in (nnx.Param(1.0), nnx.State({}), nnx.to_flat_state(nnx.State({})),
                nnx.List([]), nnx.Rngs(0), nnx.graphdef(nnx.List([]))):
        assert isinstance(obj, reprlib.Representable) or type(obj).__name__ == "GraphDef"
    assert isinstance(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), reprlib.Representable)


# -- treescope (the notebook view) and the layouts fixed against Flax 0.12.8 -----------------
def _ts(obj) -> str:
    import treescope

    return treescope.render_to_text(obj)


def test_treescope_module_has_size_comments_and_no_default_metadata():
    lines = _ts(_linear(2, 3)).splitlines()
    assert lines[0] == "Linear( # Param: 9 (36 B)"
    assert lines[1] == "  kernel=Param( # 6 (24 B)"
    assert "  bias=Param(value=<jax.Array([0., 0., 0.], dtype=float32)>)," in lines
    assert not any("hijax" in x or "eager_sharding" in x for x in lines)


def test_treescope_nested_module_counts_each_level_and_shared_once():
    class Shared(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Param(jnp.ones(4))
            self.b = self.a
            self.inner = nnx.List([nnx.Param(jnp.ones(2))])

    lines = _ts(Shared()).splitlines()
    assert lines[0] == "Shared( # Param: 6 (24 B)"  # a 4 + 2: b is the same Variable as a
    assert _ts(Shared().inner).startswith("List(0=Param(")  # folded: no comment line


def test_treescope_variable_shows_metadata_off_its_defaults():
    from flaxen import config

    assert _ts(nnx.Param(1.0, foo=1, eager_sharding=False)) == (
        "Param(value=1.0, foo=1, eager_sharding=False)")
    saved = config.flax_always_shard_variable
    try:  # the defaults are the configured ones, as in Flax
        config.update("flax_always_shard_variable", False)
        var = nnx.Param(1.0, eager_sharding=False)
        assert _ts(var) == "Param(value=1.0)"
        assert repr(var) == "Param(\n  value=1.0\n)"
    finally:
        config.update("flax_always_shard_variable", saved)


def test_treescope_nested_state_entries_are_dicts():
    state = nnx.State({"a": {"c": nnx.Param(1.0)}, "b": nnx.Param(jnp.zeros(2))})
    assert _ts(state) == """State({
  'a': {'c': Param(value=1.0)},
  'b': Param(value=<jax.Array([0., 0.], dtype=float32)>),
})"""


def test_graph_state_prints_both_fields():
    from flaxen.nnx._graph_state import GraphState

    graphdef, state = nnx.split(nnx.Param(1.0))
    text = repr(GraphState(graphdef, state))
    assert text.startswith("GraphState(\n  _graphdef=GraphDef(nodes=[VariableDef(")
    assert text.endswith("  )], attributes=[], num_leaves=1),\n"
                         "  _state=Param(\n    value=1.0\n  )\n)")


def test_variable_def_metadata_in_flax_order():
    graphdef, _ = nnx.split(nnx.List([nnx.Param(1.0, b=2, a=1)]))
    # the Variable's own order (b before a), then the three every Variable carries
    assert "metadata=PrettyMapping({\n    'b': 2,\n    'a': 1,\n    'hijax': False,\n" \
        "    'ref': False,\n    'eager_sharding': True\n  })" in repr(graphdef)
    assert _ts(graphdef) == """GraphDef(
  nodes=[
    NodeDef(
      type=List,
      index=0,
      outer_index=None,
      num_attributes=1,
      metadata=List,
    ),
    VariableDef(
      type=Param,
      index=1,
      outer_index=None,
      metadata={'b': 2, 'a': 1, 'hijax': False, 'ref': False, 'eager_sharding': True},
    ),
  ],
  attributes=[(0, NodeAttr())],
  num_leaves=1,
)"""


def test_tree_mode_graphdef_flat_layout():
    graphdef, _ = nnx.split(nnx.Param(jnp.ones(2), foo=1), graph=False)
    text = repr(graphdef)
    assert text.startswith("GraphDef(nodes=[TreeNodeDef(type=<class "
                           "'flaxen.nnx.variablelib.Param'>, treedef=PyTreeDef(*), "
                           "path_index=(((), 0),)), VariableDef(\n  type='Param',\n")
    assert text.endswith("    'eager_sharding': True\n  })\n)], attributes=[], num_leaves=1)")
    lines = _ts(graphdef).splitlines()
    assert lines[:4] == ["GraphDef(", "  nodes=[", "    TreeNodeDef(", "      type=Param,"]
    assert "      metadata={'foo': 1, 'hijax': False, 'ref': False, 'eager_sharding': True}," \
        in lines
    assert lines[-3:] == ["  attributes=[],", "  num_leaves=1,", ")"]


def test_render_object_constructor_takes_a_first_line_annotation():
    import treescope
    from treescope import rendering_parts

    from flaxen.nnx import visualization

    class Box:
        def __init__(self) -> None:
            self.items = list(range(40))  # too wide for one line: the node unfolds

        def __treescope_repr__(self, path, subtree_renderer):
            note = rendering_parts.comment_color(rendering_parts.text(" # forty"))
            return visualization.render_object_constructor(
                Box, {"items": self.items}, path, subtree_renderer,
                first_line_annotation=note)

    lines = treescope.render_to_text(Box()).splitlines()
    assert lines[0] == "Box( # forty"
    assert lines[1].startswith("  items=[")


def test_ref_variable_prints_the_array_it_holds():
    var = nnx.Param(jnp.ones(3), ref=True)
    assert repr(var) == ("Param( # 3 (12 B)\n  value=Array([1., 1., 1.], dtype=float32),\n"
                         "  ref=True\n)")


def test_display_in_a_notebook_uses_treescope(monkeypatch, capsys):
    import sys
    import types

    import treescope

    shown = []
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)
    monkeypatch.setattr(treescope, "display", lambda x, **kw: shown.append((x, kw)))
    layer = nnx.Param(1.0)
    nnx.display(layer)
    assert shown == [(layer, {"ignore_exceptions": True, "autovisualize": True})]
    assert capsys.readouterr().out == ""
    monkeypatch.delitem(sys.modules, "IPython")
    nnx.display(layer)  # outside a notebook: printed
    assert capsys.readouterr().out == "Param(\n  value=1.0\n)\n"


def test_classes_carry_flax_public_module_paths_and_pickle_through_them():
    import importlib
    import pickle

    pairs = {nnx.StateAxes: "flaxen.nnx.transforms.iteration", nnx.Carry:
             "flaxen.nnx.transforms.iteration", nnx.Conv: "flaxen.nnx.nn.linear",
             nnx.RNN: "flaxen.nnx.nn.recurrent", nnx.WeightNorm: "flaxen.nnx.nn.normalization",
             nnx.List: "flaxen.nnx.helpers", nnx.TrainState: "flaxen.nnx.helpers",
             nnx.GraphState: "flaxen.nnx.graphlib", nnx.NodeStates: "flaxen.nnx.extract",
             nnx.use_eager_sharding: "flaxen.nnx.variablelib"}
    for cls, home in pairs.items():
        assert cls.__module__ == home, cls
        assert getattr(importlib.import_module(home), cls.__qualname__) is cls
    axes = nnx.StateAxes({nnx.Param: 0, ...: None})
    assert "StateAxes" in repr(axes)
    assert pickle.loads(pickle.dumps(nnx.List)) is nnx.List
