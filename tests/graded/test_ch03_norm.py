"""Graded tests for Chapter 3 (exercises/ch03_norm.py).

Oracles: torch's F.rms_norm and F.layer_norm, transformers' LlamaRMSNorm on the same weights,
and invariants: RMS(output) = |gamma| for a constant gamma, scale invariance, the identity path.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

RMS = "Exercise 3.1 rms_norm"
LN = "Exercise 3.2 layer_norm"
PRE = "Exercise 3.3 pre_norm_residual"

# bf16 keeps 8 mantissa bits: a relative tolerance of a few roundings (torch's default for bf16);
# the oracle runs in float32 on the same rounded inputs, so no absolute slack beyond float32's.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}


def inputs(device, dtype, shape=(2, 5, 64), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g) * 3 + 0.5).to(device, dtype)   # not zero-mean: LN != RMSNorm
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(device, dtype)
    return x, w


@pytest.mark.graded(RMS, points=2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_torch(impl, device, dtype):
    x, w = inputs(device, dtype)
    out = impl.rms_norm(x, w, eps=1e-6)
    assert out.dtype == dtype and out.shape == x.shape and out.device.type == device.type
    expected = F.rms_norm(x.float(), (64,), w.float(), eps=1e-6)
    torch.testing.assert_close(out.float(), expected, **TOL[dtype])


@pytest.mark.graded(RMS, points=2)
def test_rms_norm_matches_llama_rmsnorm(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    for dtype in (torch.float32, torch.bfloat16):
        x, w = inputs(device, dtype, seed=1)
        reference = modeling_llama.LlamaRMSNorm(64, eps=1e-5).to(device, dtype)
        with torch.no_grad():
            reference.weight.copy_(w)
            expected = reference(x)
        torch.testing.assert_close(impl.rms_norm(x, w, eps=1e-5), expected, rtol=0, atol=0)  # bit for bit


@pytest.mark.graded(RMS, points=1)
def test_rms_norm_invariants(impl, device):
    x, _ = inputs(device, torch.float32, seed=2)
    gamma = torch.full((64,), 2.5, device=device)
    out = impl.rms_norm(x, gamma, eps=1e-8)
    torch.testing.assert_close(out.pow(2).mean(-1).sqrt(), torch.full((2, 5), 2.5, device=device))
    torch.testing.assert_close(impl.rms_norm(7.0 * x, gamma, eps=1e-8), out)  # scale invariant
    cos = F.cosine_similarity(out, x, dim=-1)
    torch.testing.assert_close(cos, torch.ones_like(cos))                     # direction kept


@pytest.mark.graded(LN, points=2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_matches_torch(impl, device, dtype):
    x, w = inputs(device, dtype, seed=3)
    b = (0.1 * torch.randn(64, generator=torch.Generator().manual_seed(4))).to(device, dtype)
    out = impl.layer_norm(x, w, b, eps=1e-5)
    assert out.dtype == dtype
    expected = F.layer_norm(x.float(), (64,), w.float(), b.float(), eps=1e-5)
    torch.testing.assert_close(out.float(), expected, **TOL[dtype])
    no_bias = impl.layer_norm(x, w, eps=1e-5)
    torch.testing.assert_close(no_bias.float(), F.layer_norm(x.float(), (64,), w.float(), eps=1e-5), **TOL[dtype])


@pytest.mark.graded(PRE, points=2)
def test_pre_norm_residual(impl, device):
    torch.manual_seed(5)
    sublayer = nn.Linear(64, 64, bias=False).to(device)
    with torch.no_grad():
        sublayer.weight.mul_(4)  # large enough that a missing norm or residual shows
    x, w = inputs(device, torch.float32, seed=6)
    with torch.no_grad():
        expected = x + sublayer(F.rms_norm(x, (64,), w, eps=1e-6))
        torch.testing.assert_close(impl.pre_norm_residual(x, sublayer, w), expected, rtol=1e-5, atol=1e-5)
        zero = nn.Linear(64, 64, bias=False).to(device)
        zero.weight.zero_()
        assert torch.equal(impl.pre_norm_residual(x, zero, w), x)  # a silent sublayer leaves x unchanged
