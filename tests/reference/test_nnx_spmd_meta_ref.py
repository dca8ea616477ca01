"""Differential test: the metadata ``nnx.with_partitioning`` gives a Variable (``mesh``
recorded even when None), flaxen.nnx next to flax.nnx 0.12.8, inside a one-device mesh."""

import jax
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _metadata(lib):
    mesh = jax.make_mesh((1,), ("model",))
    with jax.set_mesh(mesh):
        init = lib.with_partitioning(lib.initializers.lecun_normal(), (None, "model"))
        layer = lib.Linear(2, 4, kernel_init=init, rngs=lib.Rngs(0))
        explicit = lib.with_partitioning(lib.initializers.zeros_init(), ("model",), mesh=mesh)
        bias = lib.Param(explicit(jax.random.key(0), (4,)))
    meta = layer.kernel.get_metadata()
    return (sorted(meta), meta["mesh"], layer.kernel.mesh, bias.get_metadata()["mesh"] is mesh,
            layer.kernel[...].sharding.spec)


def test_same_metadata_as_flax():
    assert _metadata(nnx) == _metadata(fnnx)
