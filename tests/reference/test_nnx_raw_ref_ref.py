"""Differential tests: a raw ``jax.Ref`` held by a Module (and the Ref inside a ``ref=True``
Variable) in graph-mode flatten, merge and ``nnx.jit``, flaxen.nnx next to flax.nnx 0.12.8."""

import jax
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _shared_raw_ref(lib):
    class Foo(lib.Module):
        def __init__(self):
            self.a = jax.new_ref(1)
            self.b = self.a

    m = Foo()
    ref_map = lib.graphlib.RefMap()
    gd, state = lib.graphlib.flatten(m, ref_index=ref_map, graph=True)
    m1 = lib.merge(gd, state)
    _, st = lib.split(m)
    m2 = lib.merge(*lib.split(m))

    @lib.jit
    def bump(m):
        m.a[...] = m.a[...] + 1

    bump(m)
    return (len(state), len(ref_map), m1.a is m1.b, isinstance(m1.a, jax.Ref),
            sorted(str(p) for p, _ in lib.to_flat_state(st)),
            m2.a is m2.b, int(m.b[...]))


def _refs_inside_variables(lib):
    class Shared(lib.Module):
        def __init__(self):
            self.a = lib.Param(1, ref=True)
            self.b = self.a

    class Two(lib.Module):
        def __init__(self):
            self.a = lib.Param(1, ref=True)
            self.b = lib.Param(1, ref=True)

    out = []
    for cls in (Shared, Two):
        ref_map = lib.graphlib.RefMap()
        gd, state = lib.graphlib.flatten(cls(), ref_index=ref_map, graph=True)
        m1 = lib.merge(gd, state)
        out.append((len(state), len(ref_map), m1.a is m1.b, type(m1.a).__name__))
    return out


@pytest.mark.parametrize("case", [_shared_raw_ref, _refs_inside_variables])
def test_same_outcome_as_flax(case):
    assert case(nnx) == case(fnnx)
