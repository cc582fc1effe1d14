"""Assertions whose failure messages a student can act on: what was compared, how many values
differ, the largest error against the tolerance, and the first wrong value -- never a tensor dump."""

from __future__ import annotations

import torch


def _first_bad(bad: torch.Tensor) -> tuple:
    return tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()


def _check_tensor(actual, expected, what: str, check_dtype: bool = True):
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a torch.Tensor, got {type(actual).__name__}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype}, expected {expected.dtype} (the inputs' dtype)")
    if actual.device.type != expected.device.type:
        raise AssertionError(f"{what}: on {actual.device.type}, expected {expected.device.type} (the inputs' device)")


def assert_close(actual, expected, what: str, rtol: float = 1e-5, atol: float = 1e-5, check_dtype: bool = True) -> None:
    """|actual - expected| <= atol + rtol * |expected| everywhere (NaN never passes), with the same
    dtype and device as ``expected`` (as torch.testing.assert_close)."""
    _check_tensor(actual, expected, what, check_dtype)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol)
    if bad.any():
        idx = _first_bad(bad)
        err = (a - e).abs().nan_to_num(nan=float("inf"))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.numel()} values are wrong; max abs error {err.max().item():.3g} "
            f"(allowed {atol:g} + {rtol:g}·|expected|); first at index {list(idx)}: got {a[idx].item():.6g}, "
            f"expected {e[idx].item():.6g}")


def assert_equal(actual, expected, what: str, check_dtype: bool = True) -> None:
    """Exactly equal: same shape, dtype and device, and every value identical."""
    _check_tensor(actual, expected, what, check_dtype)
    a, e = actual.detach().cpu(), expected.detach().cpu()
    bad = a != e
    if bad.any():
        idx = _first_bad(bad)
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.numel()} values differ; first at index {list(idx)}: "
                             f"got {a[idx].item()}, expected {e[idx].item()}")
