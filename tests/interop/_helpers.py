"""Shared helpers of the interop tests: seeded torch, numpy round trips, closeness."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-5, 1e-5


def seed(n: int = 0) -> None:
    torch.manual_seed(n)


def rand(*shape, rs: int = 0) -> np.ndarray:
    return np.random.RandomState(rs).randn(*shape).astype(np.float32)


def run_torch(module, *inputs, **kwargs):
    module.eval()
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.asarray(x)) if isinstance(x, np.ndarray) else x
                       for x in inputs], **kwargs)
    return out


def to_np(x) -> np.ndarray:
    while isinstance(x, (tuple, list)):
        x = x[0]
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def assert_close(flaxen_out, torch_out, rtol=RTOL, atol=ATOL) -> None:
    np.testing.assert_allclose(np.asarray(flaxen_out), to_np(torch_out), rtol=rtol, atol=atol)


from flaxen.interop import torch as fxt  # noqa: E402, F401  (after the importorskip above)
