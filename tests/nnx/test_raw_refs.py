"""A raw ``jax.Ref`` held by a Module is a State leaf shared by identity (as a Variable is),
and the Ref inside a ``ref=True`` Variable is an object of the graph's RefMap."""

import jax
import numpy as np

from flaxen import nnx


class Holder(nnx.Module):
    def __init__(self):
        self.a = jax.new_ref(np.float32(1.0))
        self.b = self.a


def test_a_shared_raw_ref_is_one_leaf_and_stays_shared():
    m = Holder()
    ref_map = nnx.graphlib.RefMap()
    gd, flat = nnx.graphlib.flatten(m, ref_index=ref_map, graph=True)
    assert len(flat) == 1 and len(ref_map) == 2  # the Module and its Ref
    for _ in range(3):  # the interpreter, then any generated path
        copy = nnx.merge(*nnx.split(m))
        assert copy.a is copy.b and isinstance(copy.a, jax.Ref)


def test_a_raw_ref_is_written_through_jit():
    m = Holder()

    @nnx.jit
    def bump(m):
        m.a[...] = m.a[...] + 1

    bump(m)
    bump(m)
    assert float(m.b[...]) == 3.0 and m.a is m.b


def test_refs_inside_variables_are_counted_once_each():
    class Two(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(1.0, ref=True)
            self.b = self.a  # the same Variable: its Ref is counted once
            self.c = nnx.Param(1.0, ref=True)

    ref_map = nnx.graphlib.RefMap()
    _, flat = nnx.graphlib.flatten(Two(), ref_index=ref_map, graph=True)
    assert len(flat) == 2 and len(ref_map) == 5  # Module, 2 Params, 2 Refs
