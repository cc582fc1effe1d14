"""Package tests for norm.py and ffn.py beyond the graded ones: modules, dtypes, bad input."""

import pytest
import torch
import torch.nn.functional as F

from llama_course.ffn import SwiGLU, silu, swiglu
from llama_course.norm import RMSNorm, layer_norm, rms_norm


def test_bf16_input_equals_float32_then_cast(device):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 128, generator=g) * 5).to(device)
    w = torch.ones(128, device=device)
    from_bf16 = rms_norm(x.bfloat16(), w.bfloat16())
    from_fp32 = rms_norm(x.bfloat16().float(), w).bfloat16()  # same input values, cast at the end
    assert from_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(from_bf16, from_fp32, rtol=0, atol=0)
    # and the value is torch's RMSNorm of those numbers, up to rounding the output to bf16 (2^-9)
    expected = F.rms_norm(x.bfloat16().float(), (128,), w, eps=1e-6)
    torch.testing.assert_close(from_bf16.float(), expected, rtol=2**-8, atol=1e-5)


def test_rmsnorm_module(device):
    norm = RMSNorm(16, eps=1e-5, device=device)
    x = torch.randn(3, 16, device=device)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (16,), norm.weight, eps=1e-5))
    assert "16, eps=1e-05" in repr(norm)


def test_swiglu_module(device):
    torch.manual_seed(0)
    ffn = SwiGLU(32, 88, device=device)
    x = torch.randn(2, 3, 32, device=device)
    expected = ffn.down_proj(F.silu(ffn.gate_proj(x)) * ffn.up_proj(x))
    torch.testing.assert_close(ffn(x), expected)
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 32 * 88


def test_bad_input():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"\(8,\).*\(7,\)"):
        rms_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, torch.ones(8), eps=0)
    with pytest.raises(ValueError, match="eps"):
        layer_norm(x, torch.ones(8), eps=-1.0)
    with pytest.raises(ValueError, match="bias"):
        layer_norm(x, torch.ones(8), torch.zeros(3))
    with pytest.raises(ValueError, match="w_gate"):
        swiglu(x, torch.ones(20, 7), torch.ones(20, 7), torch.ones(8, 20))
    with pytest.raises(ValueError, match="w_down"):
        swiglu(x, torch.ones(20, 8), torch.ones(20, 8), torch.ones(8, 21))
    with pytest.raises(ValueError, match="w_up"):
        swiglu(x, torch.ones(20, 8), torch.ones(21, 8), torch.ones(8, 20))
    with pytest.raises(ValueError, match="dim"):
        RMSNorm(0)


def test_silu_values():
    assert silu(torch.tensor(0.0)).item() == 0.0
    assert silu(torch.tensor(100.0)).item() == pytest.approx(100.0)


def test_rms_norm_is_scale_invariant_up_to_its_documented_limit():
    """The docstring's limit: float32 squares overflow above ~1.8e19, so up to 1e18 the result is
    scale invariant (1e18 * u gives what u gives); float64 computes in float64, with no such limit."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3, 16, generator=g)
    w = torch.randn(16, generator=g)
    for scale in (1e3, 1e10, 1e18):        # (far below 1, eps dominates: not invariant, by design)
        torch.testing.assert_close(rms_norm(u * scale, w), rms_norm(u, w), rtol=1e-5, atol=1e-6)
    for scale in (1e30, 1e150):                  # oracle: torch's own RMSNorm, in float64
        x = u.double() * scale
        torch.testing.assert_close(rms_norm(x, w.double()), torch.nn.functional.rms_norm(x, (16,), w.double(), 1e-6),
                                   rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rms_norm(torch.full((2, 8), 1e18), torch.ones(8)), torch.ones(2, 8))


def test_norms_reject_non_float_inputs_and_non_finite_eps():
    w = torch.ones(4)
    for bad in (torch.ones(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool),
                torch.ones(2, 4, dtype=torch.cfloat)):
        with pytest.raises(TypeError, match="x must be a floating-point tensor"):
            rms_norm(bad, w)
        with pytest.raises(TypeError, match="x must be a floating-point tensor"):
            layer_norm(bad, w)
    for eps in (float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            rms_norm(torch.ones(2, 4), w, eps)
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            RMSNorm(4, eps)


def test_swiglu_rejects_mixed_devices_and_zero_width():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="one device.*w_up on meta"):
        swiglu(x, torch.randn(20, 8), torch.empty(20, 8, device="meta"), torch.randn(8, 20))
    with pytest.raises(ValueError, match="d_ff >= 1"):
        swiglu(x, torch.randn(0, 8), torch.randn(0, 8), torch.randn(8, 0))
    with pytest.raises(ValueError, match="d_ff must be an int >= 1"):
        SwiGLU(8, 0)


def test_forward_hooks_fire_on_every_projection_of_swiglu():
    ffn = SwiGLU(8, 20)
    fired = []
    for name, module in ffn.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out, name=name: fired.append(name))
    x = torch.randn(3, 8)
    with torch.no_grad():
        out = ffn(x)
        expected = swiglu(x, ffn.gate_proj.weight, ffn.up_proj.weight, ffn.down_proj.weight)
    assert sorted(fired) == ["down_proj", "gate_proj", "up_proj"]
    torch.testing.assert_close(out, expected)
