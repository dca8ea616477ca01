"""NNX reprs and treescope renderings side by side with Flax 0.12.8 (issue 22).

Each case builds the same object with ``flax.nnx`` and ``flaxen.nnx`` (same seeds, so the
parameters are bit-identical) and compares ``repr()``, ``str()`` and
``treescope.render_to_text`` after replacing ``flax`` by ``flaxen`` in Flax's text.
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import optax
import pytest

from flaxen import config as flaxen_config
from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")
treescope = pytest.importorskip("treescope")
from flax import config as flax_config  # noqa: E402


class _Cases:
    """Builders taking the nnx module (flax's or flaxen's)."""

    @staticmethod
    def linear(m):
        return m.Linear(2, 3, rngs=m.Rngs(0))

    @staticmethod
    def nested(m):
        class Block(m.Module):
            def __init__(self, rngs):
                self.lin = m.Linear(2, 2, rngs=rngs)
                self.bn = m.BatchNorm(2, rngs=rngs)
                self.layers = m.List([m.Linear(2, 2, rngs=rngs), m.Linear(2, 2, rngs=rngs)])
                self.cfg = {"a": 1, "b": (2, 3)}
        return Block(m.Rngs(0))

    @staticmethod
    def mlp_512(m):
        class MLP(m.Module):
            def __init__(self, rngs):
                self.l1 = m.Linear(512, 512, rngs=rngs)
                self.l2 = m.Linear(512, 512, rngs=rngs)
        return MLP(m.Rngs(0))

    @staticmethod
    def shared_variable(m):
        class Shared(m.Module):
            def __init__(self):
                self.a = m.Param(jnp.ones(4))
                self.b = self.a
        return Shared()


def _pytree(m):
    class P(m.Pytree):
        def __init__(self):
            self.x = jnp.ones(3)
            self.y = 2
            self._hidden = 1
    return P()


def _optimizer(m):
    return m.Optimizer(m.Linear(2, 3, rngs=m.Rngs(0)), optax.adam(1e-3), wrt=m.Param)


def _split(m, *filters, **kw):
    return m.split(m.Linear(2, 3, rngs=m.Rngs(0)), *filters, **kw)


CASES = {
    # modules
    "linear": _Cases.linear,
    "nested_module": _Cases.nested,
    "mlp_512x512": _Cases.mlp_512,
    "shared_variable": _Cases.shared_variable,
    "batchnorm": lambda m: m.BatchNorm(3, rngs=m.Rngs(0)),
    "layernorm": lambda m: m.LayerNorm(3, rngs=m.Rngs(0)),
    "abstract_linear": lambda m: m.eval_shape(lambda: m.Linear(2, 3, rngs=m.Rngs(0))),
    "abstract_nested": lambda m: m.eval_shape(lambda: _Cases.nested(m)),
    "pytree": _pytree,
    # containers
    "list": lambda m: m.List([1, m.Param(jnp.ones(2))]),
    "dict": lambda m: m.Dict(a=1, b=m.Param(jnp.ones(2))),
    "sequential": lambda m: m.Sequential(m.Linear(2, 3, rngs=m.Rngs(0)), jax.nn.relu),
    "empty_list": lambda m: m.List([]),
    # variables
    "param_array": lambda m: m.Param(jnp.ones(3)),
    "param_scalar": lambda m: m.Param(1.0),
    "param_metadata": lambda m: m.Param(jnp.ones((2, 2)), foo=1, names=("a", "b")),
    "variable_str": lambda m: m.Variable("hello"),
    "variable_list": lambda m: m.Variable([1, 2, jnp.ones(3)]),
    "variable_dict": lambda m: m.Variable({"a": jnp.ones(2), "b": "x"}),
    "variable_none": lambda m: m.Variable(None),
    "batch_stat": lambda m: m.BatchStat(jnp.zeros((4,))),
    "cache": lambda m: m.Cache(jnp.zeros((1, 2, 3))),
    "ref_variable": lambda m: m.Param(jnp.ones(3), ref=True),
    "ref_in_module": lambda m: m.Dict(w=m.Param(jnp.ones((2, 2)), ref=True)),
    # states
    "state_of_split": lambda m: _split(m)[1],
    "states_of_filtered_split": lambda m: m.split(m.BatchNorm(3, rngs=m.Rngs(0)),
                                                  m.Param, ...)[1:],
    "nested_state": lambda m: m.state(_Cases.nested(m)),
    "state_literal": lambda m: m.State({"a": {"c": m.Param(1.0)}, "b": m.Param(jnp.zeros(2))}),
    "flat_state": lambda m: m.to_flat_state(_split(m)[1]),
    # filters
    "of_type": lambda m: m.OfType(m.Param),
    "any": lambda m: m.Any(m.Param, m.WithTag("a")),
    "all": lambda m: m.All(m.Param, m.PathContains("a")),
    "not": lambda m: m.Not(m.Param),
    "path_contains": lambda m: m.PathContains("a"),
    "with_tag": lambda m: m.WithTag("t"),
    "everything": lambda m: m.Everything(),
    "nothing": lambda m: m.Nothing(),
    "tuple_filter": lambda m: m.filterlib.to_predicate((m.Param, m.BatchStat)),
    # training
    "optimizer": _optimizer,
    "metric_average": lambda m: m.metrics.Average(),
    "metric_accuracy": lambda m: m.metrics.Accuracy(),
    "metric_welford": lambda m: m.metrics.Welford(),
    "multi_metric": lambda m: m.MultiMetric(loss=m.metrics.Average("loss"),
                                            acc=m.metrics.Accuracy()),
    "trace_state": lambda m: m.tracers.TraceState(),
}


def _build(make, m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(m)


def _norm(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x?", text)


def _flax_text(text: str) -> str:
    return _norm(text.replace("flax", "flaxen"))


def _texts(obj) -> dict[str, str]:
    return {"repr": repr(obj), "str": str(obj), "treescope": treescope.render_to_text(obj)}


@pytest.mark.parametrize("name", list(CASES))
def test_same_text_as_flax(name):
    make = CASES[name]
    ref, ours = _texts(_build(make, fnnx)), _texts(_build(make, nnx))
    for kind in ref:
        assert _norm(ours[kind]) == _flax_text(ref[kind]), kind


def test_abstract_model_shows_would_be_sizes():
    ours = repr(_build(CASES["abstract_linear"], nnx))
    assert ours.startswith("Linear( # Param: 9 (36 B)")
    assert "ShapeDtypeStruct(shape=(3,), dtype=float32)" in ours


RNG_CASES = {
    "rngs": lambda m: m.Rngs(params=0, dropout=1),
    "rng_stream": lambda m: m.RngStream(1, tag="x"),
    "dropout": lambda m: m.Dropout(0.5, rngs=m.Rngs(params=0, dropout=1)),
}


@pytest.mark.parametrize("name", list(RNG_CASES))
def test_rng_objects_same_text(name):
    make = RNG_CASES[name]
    ref, ours = _texts(_build(make, fnnx)), _texts(_build(make, nnx))
    for kind in ref:
        assert _norm(ours[kind]) == _flax_text(ref[kind]), kind


@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_max_repr_depth(max_depth):
    saved = flax_config.flax_max_repr_depth, flaxen_config.flax_max_repr_depth
    try:
        flax_config.update("flax_max_repr_depth", max_depth)
        flaxen_config.update("flax_max_repr_depth", max_depth)
        for name in ("nested_module", "nested_state", "list"):
            ref, ours = _build(CASES[name], fnnx), _build(CASES[name], nnx)
            assert _norm(repr(ours)) == _flax_text(repr(ref)), name
    finally:
        flax_config.update("flax_max_repr_depth", saved[0])
        flaxen_config.update("flax_max_repr_depth", saved[1])


def _graphdef_skeleton(text: str) -> str:
    """A GraphDef's text without what the two graph engines record differently: Flax's
    ``_pytree__state``/``_pytree__nodes`` bookkeeping node and attributes, which flaxen
    keeps out of its definitions, and the node attribute counts that include them."""
    text = re.sub(r"NodeDef\(\s*type='?GenericPytree.*?\n\)?(, )?", "", text, flags=re.S)
    text = re.sub(r"num_attributes=\d+", "num_attributes=?", text)
    return text


def test_graphdef_graph_mode_same_layout():
    ref, ours = _split(fnnx)[0], _split(nnx)[0]
    r, o = _flax_text(repr(ref)), _norm(repr(ours))
    head = "GraphDef(nodes=[NodeDef(\n  type='Linear',\n  index=0,\n  outer_index=None,\n"
    assert r.startswith(head) and o.startswith(head)
    # the VariableDefs print alike, metadata in Flax's order
    var_defs = re.findall(r"VariableDef\(.*?\}\)\n\)", o, flags=re.S)
    assert var_defs == re.findall(r"VariableDef\(.*?\}\)\n\)", r, flags=re.S)
    assert len(var_defs) == 2
    assert o.endswith("num_leaves=2)") and r.endswith("num_leaves=2)")
    # attributes: every one of Flax's but its bookkeeping, each shown alike
    r_attrs = [a for a in re.findall(r"\('(\w+)', (\w+)\(", r) if not a[0].startswith("_")]
    assert sorted(re.findall(r"\('(\w+)', (\w+)\(", o)) == sorted(r_attrs)
    # treescope: the same fields and VariableDef lines
    rt, ot = _flax_text(treescope.render_to_text(ref)), _norm(treescope.render_to_text(ours))
    for line in ("GraphDef(", "  nodes=[", "      type=Linear,", "  num_leaves=2,"):
        assert line in rt.splitlines() and line in ot.splitlines(), line
    # (how far treescope unfolds depends on the whole size, Flax's has the extra entries)
    meta = "metadata={'hijax': False, 'ref': False, 'eager_sharding': True}"
    for text in (rt, ot):
        assert text.count("type=Param") == 2 and text.count(meta) == 2


def test_graphdef_tree_mode_same_layout():
    ref, ours = _split(fnnx, graph=False)[0], _split(nnx, graph=False)[0]
    r, o = _flax_text(repr(ref)), _norm(repr(ours))
    # the treedefs differ by Flax's bookkeeping attributes; what follows them is the same
    assert o.startswith("GraphDef(nodes=[TreeNodeDef(type=<class "
                        "'flaxen.nnx.nn.linear.Linear'>, treedef=PyTreeDef(")
    tail = r[r.index("path_index="):]
    assert o.endswith(tail)
    assert tail.endswith("attributes=[], num_leaves=2)")
    rt, ot = _flax_text(treescope.render_to_text(ref)), _norm(treescope.render_to_text(ours))
    keep = [x for x in rt.splitlines() if "treedef=" not in x]
    # Flax's metadata is a HashableMapping: treescope adds its object address as a comment
    keep = [re.sub(r",  # <flaxen.typing.HashableMapping object at 0x\?>", ",", x) for x in keep]
    assert [x for x in ot.splitlines() if "treedef=" not in x] == keep


def test_graph_state_same_fields():
    from flax.nnx import graphlib as flax_graphlib

    from flaxen.nnx._graph_state import GraphState

    gd, st = _split(fnnx)
    ref = flax_graphlib.GraphState(gd, st)
    ours = GraphState(*_split(nnx))
    r, o = _flax_text(repr(ref)), _norm(repr(ours))
    assert o.startswith("GraphState(\n  _graphdef=GraphDef(nodes=[NodeDef(")
    assert o[o.index("  _state=State({"):] == r[r.index("  _state=State({"):]


def test_treescope_html_renders():
    # the notebook hook: the HTML rendering builds for each kind of object without error
    for name in ("linear", "nested_state", "param_metadata", "flat_state", "optimizer"):
        html = treescope.render_to_html(_build(CASES[name], nnx))
        assert "<" in html and len(html) > 1000, name
    assert len(treescope.render_to_html(_split(nnx)[0])) > 1000


def test_display_prints_outside_a_notebook(capsys):
    nnx.display(_build(CASES["linear"], nnx))
    ours = capsys.readouterr().out
    fnnx.display(_build(CASES["linear"], fnnx))
    ref = capsys.readouterr().out
    assert _norm(ours) == _flax_text(ref)
    assert ours.startswith("Linear( # Param: 9 (36 B)")


def test_rngs_with_default_stream_same_text():
    # the 'default' stream comes after the named ones in both
    make = lambda m: m.Rngs(0, params=1)  # noqa: E731
    ref, ours = _texts(_build(make, fnnx)), _texts(_build(make, nnx))
    for kind in ref:
        assert _norm(ours[kind]) == _flax_text(ref[kind]), kind


