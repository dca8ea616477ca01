"""The placeholders a lifted Linen transform puts in place of Modules and Variables among a
method's arguments carry Flax 0.12.8's dataclass fields."""

import dataclasses

import jax
import jax.numpy as jnp

import flaxen.linen as nn
import flaxen.linen._transform_wrap as tw
from flaxen.linen import transforms


def test_placeholder_fields_are_flaxs():
    assert [f.name for f in dataclasses.fields(transforms.InstancePlaceholder)
            if f.init and f.default is dataclasses.MISSING] == ["cls", "attrs", "id"]
    assert [f.name for f in dataclasses.fields(transforms.VariablePlaceholder)] == [
        "collection", "name", "unbox", "id"]
    a = transforms.InstancePlaceholder(nn.Dense, {"features": 2}, 0)
    b = transforms.InstancePlaceholder(nn.Dense, {"features": 3}, 0)
    assert a == b and hash(a) == hash(b)  # compared by class and scope, not by attrs
    assert a != transforms.InstancePlaceholder(nn.Dense, {"features": 2}, 1)
    assert a.replace(id=1).id == 1


def test_module_argument_crosses_a_lifted_transform():
    class Outer(nn.Module):
        def setup(self):
            self.dense = nn.Dense(3)

        def __call__(self, x):
            return nn.jit(lambda mdl, d, x: d(x) * 2)(self, self.dense, x)

    x = jnp.ones((1, 2))
    variables = Outer().init(jax.random.key(0), x)
    out = Outer().apply(variables, x)
    params = variables["params"]["dense"]
    assert jnp.allclose(out, (x @ params["kernel"] + params["bias"]) * 2)

    bound = Outer().bind(variables)
    dense = bound.dense
    scopes, args, _ = tw.collect_scopes(bound, (dense, 1), {}, "jit")
    placeholder = args[0]
    assert isinstance(placeholder, transforms.InstancePlaceholder)
    assert placeholder.cls is nn.Dense and placeholder.attrs["features"] == 3
    assert scopes[placeholder.id] is dense.scope and args[1] == 1
