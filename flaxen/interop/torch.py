"""Import PyTorch weights into flaxen in one call, and check that the outputs match.

Needs the ``interop`` extra (``pip install 'flaxen[interop]'``), which brings ``torch``;
importing this module without torch raises an ``ImportError`` that says so.

:func:`convert` maps a torch ``state_dict`` (or a ``torch.nn.Module``) onto a flaxen target
tree: Linen variables (``module.init(...)``), an NNX ``State`` or an NNX ``Module``. The
target decides: every torch layer is matched to a flaxen layer of the same kind (by name
where the names agree, else in order within each kind, with shapes that fit) and its
tensors are laid out the way that layer wants them (see ``flaxen.interop._rules`` for each
layout). Anything that does not fit raises one
:class:`~flaxen.errors.TorchConversionError` listing every problem.

>>> import jax, jax.numpy as jnp, numpy as np, torch
>>> import flaxen.linen as nn
>>> from flaxen.interop import torch as fxt
>>> layer = torch.nn.Linear(3, 2)
>>> variables = nn.Dense(2).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
>>> variables = fxt.convert(layer.state_dict(), variables)
>>> x = np.ones((1, 3), np.float32)
>>> expected = layer(torch.from_numpy(x)).detach().numpy()
>>> bool(np.allclose(nn.Dense(2).apply(variables, x), expected, atol=1e-6))
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:
    import torch as _torch  # noqa: F401
except ImportError as _err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "flaxen.interop.torch needs PyTorch, which is not installed. Install the interop "
        "extra: pip install 'flaxen[interop]' (it pins the CPU build torch==2.13.0)."
    ) from _err

import numpy as np

from flaxen.interop import _conversion
from flaxen.interop._verification import VerifyReport
from flaxen.interop._verification import verify as _verify

__all__ = ["VerifyReport", "channels_first_flatten", "convert", "lstm_carry", "verify"]

Rules = Mapping[str, "str | None | Callable[[np.ndarray], np.ndarray] | tuple[str, Callable]"]


def convert(state_dict: Any, target: Any, *, rules: Rules | None = None) -> Any:
    """Maps torch weights onto ``target`` and returns a tree of the target's type.

    Args:
      state_dict: a torch ``state_dict`` (a mapping of names to tensors; numpy arrays are
        accepted too) or a ``torch.nn.Module`` (then its layer classes settle what a bare
        state dict leaves open, such as ``Linear`` without bias vs ``Embedding``).
      target: Linen variables as ``module.init`` returns them, an ``nnx.State``, or an
        ``nnx.Module`` (updated in place and returned). Its structure drives the matching,
        its dtypes the casting (bfloat16 included).
      rules: extend or override the matching, keyed by torch key or module name:

        - ``'fc': 'params/Dense_3'`` pins a torch module to a target layer;
        - ``'fc.weight': 'params/head/kernel'`` copies one tensor to one leaf as it is;
        - ``'fc.weight': ('params/head/kernel', fn)`` puts ``fn(array)`` there;
        - ``'fc.weight': fn`` transforms a tensor (torch layout, numpy) before the usual
          conversion, e.g. :func:`channels_first_flatten`;
        - ``'aux_head': None`` (or a glob such as ``'*.num_batches_tracked'``) drops keys.

    Returns:
      Linen: a new ``{'params': ..., 'batch_stats': ...}`` dict; NNX ``State``: a new State;
      NNX ``Module``: the same module, with its Variables set.

    Raises:
      TorchConversionError: listing every torch key that maps nowhere, every target leaf
        left unfilled, every shape that does not fit (with both names and shapes).

    >>> import torch, jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> bn = torch.nn.BatchNorm1d(3)
    >>> v = nn.BatchNorm(use_running_average=True).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    >>> sorted(convert(bn.state_dict(), v))
    ['batch_stats', 'params']
    """
    return _conversion.convert(state_dict, target, rules)


def verify(torch_module: Any, flaxen_module: Any, variables: Any, inputs: Any,
           rtol: float = 1e-4, atol: float = 1e-5, *, flaxen_inputs: Any = None,
           torch_kwargs: dict | None = None, flaxen_kwargs: dict | None = None,
           rules: Rules | None = None) -> VerifyReport:
    """Runs both models on the same inputs and reports the first layer that diverges.

    The torch model runs in eval mode. ``inputs`` are in torch layout (a tensor / array
    or a tuple of them); flaxen gets them channels-last when the torch model starts with a
    convolution or pooling, unchanged otherwise, unless ``flaxen_inputs`` is given.
    Linen models are applied with ``variables`` (run them in inference mode through
    ``flaxen_kwargs``, e.g. ``{'train': False}``); NNX models are called directly
    (``variables``, if not None, is written into them first).

    Returns a :class:`VerifyReport`: ``report.ok``, the per-layer rows, the first
    diverging layer and the likely causes (epsilon, GELU approximation, padding, flatten
    order, mask polarity, ...). ``print(report)`` shows it as a rich table.

    >>> import torch, jax, jax.numpy as jnp, numpy as np
    >>> import flaxen.linen as nn
    >>> ln = torch.nn.LayerNorm(4)
    >>> v = convert(ln, nn.LayerNorm().init(jax.random.PRNGKey(0), jnp.ones((1, 4))))
    >>> x = np.random.RandomState(0).randn(2, 4).astype(np.float32) * 1e-3
    >>> report = verify(ln, nn.LayerNorm(), v, x)
    >>> report.ok, any('epsilon' in c for c in report.causes)
    (False, True)
    """
    return _verify(torch_module, flaxen_module, variables, inputs, rtol, atol,
                   flaxen_inputs=flaxen_inputs, torch_kwargs=torch_kwargs,
                   flaxen_kwargs=flaxen_kwargs, rules=rules)


def channels_first_flatten(channels: int) -> Callable[[np.ndarray], np.ndarray]:
    """A rule for the first Linear after a flatten: reorders its inputs (C, H, W) -> (H, W, C).

    torch flattens a ``(N, C, H, W)`` activation channel-major, flaxen a ``(N, H, W, C)``
    one channel-minor; the returned function permutes the columns of the torch weight so
    the converted Dense reads the flaxen order. Use it as
    ``rules={'fc.weight': channels_first_flatten(C)}``.

    >>> import numpy as np
    >>> w = np.arange(6).reshape(1, 6)  # C=2, H*W=3: columns c0p0 c0p1 c0p2 c1p0 ...
    >>> channels_first_flatten(2)(w).tolist()
    [[0, 3, 1, 4, 2, 5]]
    """
    def reorder(w: np.ndarray) -> np.ndarray:
        out_f, in_f = w.shape
        if in_f % channels:
            raise ValueError(
                f"channels_first_flatten({channels}): the weight has {in_f} inputs, not a "
                f"multiple of {channels} channels. Pass the channel count of the activation "
                "that is flattened.")
        return w.reshape(out_f, channels, in_f // channels).transpose(0, 2, 1).reshape(
            out_f, in_f)

    return reorder


def lstm_carry(torch_state: tuple[Any, Any], layer: int = 0) -> tuple[Any, Any]:
    """A torch LSTM state ``(h, c)`` (each ``(layers*dirs, batch, hidden)``) as flaxen's
    LSTMCell carry ``(c, h)`` for one layer.

    >>> import numpy as np
    >>> h, c = np.zeros((1, 2, 3)), np.ones((1, 2, 3))
    >>> carry = lstm_carry((h, c))
    >>> float(carry[0].sum()), carry[1].shape
    (6.0, (2, 3))
    """
    from flaxen.interop._torch_units import to_numpy

    h, c = torch_state
    return to_numpy(c)[layer], to_numpy(h)[layer]
