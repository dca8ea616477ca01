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
