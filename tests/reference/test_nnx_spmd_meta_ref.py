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


def _init():
    return lambda key, shape, dtype=None: jax.numpy.zeros(shape, dtype)


ORDER_CASES = {
    "out_sharding": lambda lib, x, m: lib.Param(x, out_sharding=("a",), eager_sharding=False),
    "sharding_names": lambda lib, x, m: lib.Param(x, sharding_names=("a",), eager_sharding=False),
    "sharding": lambda lib, x, m: lib.Param(x, sharding=("a",), eager_sharding=False),
    "mesh, names": lambda lib, x, m: lib.Param(x, mesh=m, sharding_names=("a",)),
    "out, mesh": lambda lib, x, m: lib.Param(x, out_sharding=("a",), mesh=m),
    "tag, names": lambda lib, x, m: lib.Param(x, tag="t", sharding_names=("a",), mesh=m),
    "with_partitioning + tag": lambda lib, x, m: lib.Param(
        lib.with_partitioning(_init(), ("a",), mesh=m)(jax.random.key(0), (1,)), tag="t"),
    "with_metadata clash": lambda lib, x, m: lib.Param(
        lib.with_metadata(_init(), eager_sharding=False, foo=1, bar=3)(
            jax.random.key(0), (1,)), bar=2, baz=0),
}


@pytest.mark.parametrize("name", list(ORDER_CASES))
def test_metadata_key_order_as_flax(name):
    import warnings

    mesh = jax.make_mesh((1,), ("a",))
    x = jax.numpy.ones((1,))

    def meta(lib):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            md = ORDER_CASES[name](lib, x, mesh).get_metadata()
        return list(md), {k: md[k] for k in ("foo", "bar", "baz") if k in md}

    assert meta(nnx) == meta(fnnx)


def _named_shardings(lib):
    mesh = jax.make_mesh((1,), ("model",))
    with jax.set_mesh(mesh):
        init = lib.with_partitioning(lib.initializers.lecun_normal(), (None, "model"))
        layer = lib.Linear(2, 4, kernel_init=init, rngs=lib.Rngs(0))
    named = lib.get_named_sharding(lib.state(layer), mesh)
    kernel = named["kernel"]
    return (type(kernel).__name__, list(kernel.get_metadata()), kernel.get_value().spec,
            named["bias"].get_value().spec)


def test_get_named_sharding_as_flax():
    # the metadata order too: Flax rebuilds each Variable by a tree map
    assert _named_shardings(nnx) == _named_shardings(fnnx)


def _made_inside(lib):
    import jax.numpy as jnp

    v = lib.jit(lambda: lib.Param(jnp.ones(2), zeta=1, alpha=2))()
    mesh = jax.make_mesh((1,), ("model",))
    with jax.set_mesh(mesh):
        init = lib.with_partitioning(lib.initializers.lecun_normal(), (None, "model"))
        layer = lib.jit(lambda: lib.Linear(2, 4, kernel_init=init, rngs=lib.Rngs(0)))()
    return list(v.get_metadata()), list(layer.kernel.get_metadata())


def test_variables_made_inside_jit_keep_their_metadata_order_as_flax():
    assert _made_inside(nnx) == _made_inside(fnnx)
