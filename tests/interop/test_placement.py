"""The copy step of a conversion: one aligned, owned copy per leaf, serial or threaded."""

import jax
import numpy as np
import pytest

from flaxen.interop import _placement

torch = pytest.importorskip("torch")


def test_aligned_empty_starts_on_a_64_byte_boundary():
    for n in (1, 3, 17, 1000):
        a = _placement.aligned_empty((n, 3), np.float32)
        assert a.ctypes.data % 64 == 0
        assert a.shape == (n, 3) and a.flags.c_contiguous


def test_owned_copy_transposes_and_casts_without_aliasing_torch():
    w = torch.randn(96, 80)  # large enough for torch's blocked copy
    view = w.numpy().T
    out = _placement.owned_copy(view, np.float32)
    np.testing.assert_array_equal(out, w.numpy().T)
    assert out.ctypes.data % 64 == 0 and out.flags.c_contiguous
    w.add_(1.0)
    assert not np.array_equal(out, w.numpy().T)  # a copy, not a view of torch memory
    half = _placement.owned_copy(view, np.float16)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, w.numpy().T.astype(np.float16))  # view reads torch now


def test_owned_copy_keeps_an_array_a_rule_just_computed():
    fresh = np.arange(6, dtype=np.float32).reshape(2, 3).copy()
    assert _placement.owned_copy(fresh, np.float32) is fresh


def test_threaded_placement_matches_serial(monkeypatch):
    g = torch.Generator().manual_seed(0)
    tensors = {i: torch.randn(300, 200 + i, generator=g) for i in range(12)}
    filled = {(f"k{i}",): (t.numpy().T, np.dtype(np.float32)) for i, t in tensors.items()}
    monkeypatch.setattr(_placement, "_PARALLEL_BYTES", 1 << 60)
    serial = _placement.place(filled, on_device=False)
    monkeypatch.setattr(_placement, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(_placement.os, "cpu_count", lambda: 2)
    threaded = _placement.place(filled, on_device=False)
    assert list(threaded) == list(filled)  # the caller's order, whatever finished first
    for key in filled:
        assert isinstance(threaded[key], jax.Array)
        np.testing.assert_array_equal(np.asarray(threaded[key]), np.asarray(serial[key]))
        np.testing.assert_array_equal(np.asarray(threaded[key]), filled[key][0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_large_permuted_views_are_transposed_by_xla_and_own_their_memory(monkeypatch, dtype):
    monkeypatch.setattr(_placement, "_XLA_TRANSPOSE_BYTES", 1 << 12)
    w = torch.randn(64, 48)
    conv = torch.randn(16, 8, 3, 3)
    filled = {("w",): (w.numpy().T, np.dtype(dtype)),
              ("c",): (conv.numpy().transpose(2, 3, 1, 0), np.dtype(dtype))}
    calls = []
    real = _placement.device_layout
    monkeypatch.setattr(_placement, "device_layout",
                        lambda arr, dt: calls.append(arr.shape) or real(arr, dt))
    out = _placement.place(filled, on_device=False)
    assert sorted(calls) == [(3, 3, 8, 16), (48, 64)]
    expect_w, expect_c = w.numpy().T.astype(dtype), conv.numpy().transpose(2, 3, 1, 0).copy()
    w.add_(1.0)  # the results are copies: training the torch model further changes nothing
    conv.zero_()
    assert out[("w",)].dtype == dtype and out[("w",)].shape == (48, 64)
    np.testing.assert_array_equal(np.asarray(out[("w",)]), expect_w)
    np.testing.assert_array_equal(np.asarray(out[("c",)]), expect_c.astype(dtype))
