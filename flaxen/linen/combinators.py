"""``Sequential``: chains layers, feeding each one's output to the next.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
>>> y, v = model.init_with_output(jax.random.key(0), jnp.ones((1, 3)))
>>> y.shape, sorted(v['params'])
((1, 2), ['layers_0', 'layers_2'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flaxen.linen.module import Module, compact

__all__ = ["Sequential"]


class Sequential(Module):
    """Applies ``layers`` in order; the first gets the call's arguments.

    A layer returning a tuple passes it on as positional arguments, a dict as keyword
    arguments, anything else as the single argument. Layers may be Modules (named
    ``layers_0``, ``layers_1``... by position) or plain functions such as ``nn.relu``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> swap = nn.Sequential([lambda a, b: (b, a), lambda a, b: a - b])
    >>> float(swap.apply({}, 1.0, 3.0))
    2.0
    """

    layers: Sequence[Callable[..., Any]]

    # compact, so that a plain-function layer may build submodules inline
    # (``lambda x: nn.Dense(4)(x)``): they become children of the Sequential.
    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.layers:
            raise ValueError(
                f"Empty Sequential module {self.name}. Sequential needs at least one layer "
                "in `layers`."
            )
        outputs = self.layers[0](*args, **kwargs)
        for layer in self.layers[1:]:
            if isinstance(outputs, tuple):
                outputs = layer(*outputs)
            elif isinstance(outputs, dict):
                outputs = layer(**outputs)
            else:
                outputs = layer(outputs)
        return outputs
