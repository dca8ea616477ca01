"""Tiny layers for the Module tests, built only from ``self.param`` (no nn.Dense needed)."""

import jax
import jax.numpy as jnp

import flaxen.linen as nn


class Dense(nn.Module):
    features: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", jax.nn.initializers.lecun_normal(),
                            (x.shape[-1], self.features))
        y = x @ kernel
        if self.use_bias:
            y = y + self.param("bias", jax.nn.initializers.zeros, (self.features,))
        return y


class MLP(nn.Module):
    features: tuple = (3, 2)

    @nn.compact
    def __call__(self, x):
        for i, f in enumerate(self.features):
            x = Dense(f)(x)
            if i < len(self.features) - 1:
                x = jax.nn.relu(x)
        return x


KEY = jax.random.PRNGKey(0)
X = jnp.ones((1, 4))


def shapes(tree):
    return jax.tree_util.tree_map(jnp.shape, tree)
