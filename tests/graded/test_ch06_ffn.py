"""Graded tests for Chapter 6 (exercises/ch06_ffn.py).

Oracles: torch's F.silu, transformers' LlamaMLP on the same weights, and SiLU's calculus.
"""

import pytest
import torch
import torch.nn.functional as F

SILU = "Exercise 6.1 silu"
SWIGLU = "Exercise 6.2 swiglu"


@pytest.mark.graded(SILU, points=2)
def test_silu_matches_torch(impl, device):
    x = torch.linspace(-20, 20, 4001, device=device)
    torch.testing.assert_close(impl.silu(x), F.silu(x), rtol=1e-6, atol=1e-6)
    xb = x.to(torch.bfloat16)
    assert impl.silu(xb).dtype == torch.bfloat16


@pytest.mark.graded(SILU, points=1)
def test_silu_minimum(impl):
    x = torch.linspace(-3, 0, 300001, dtype=torch.float64)
    y = impl.silu(x)
    i = int(y.argmin())
    # d/dx x*sigmoid(x) = 0  <=>  1 + x (1 - sigmoid(x)) = 0, solved numerically: x = -1.27846...
    assert abs(x[i].item() + 1.27846) < 1e-4 and abs(y[i].item() + 0.27846) < 1e-4


def mlp_weights(device, dtype, d_model=64, d_ff=176, seed=0):
    g = torch.Generator().manual_seed(seed)
    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).to(device, dtype)
    return w(d_ff, d_model), w(d_ff, d_model), w(d_model, d_ff)


@pytest.mark.graded(SWIGLU, points=3)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_matches_llama_mlp(impl, device, dtype):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig

    w_gate, w_up, w_down = mlp_weights(device, dtype)
    x = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    # the oracle runs in float32 on the very same (possibly bf16-rounded) numbers
    mlp = modeling_llama.LlamaMLP(HFConfig(hidden_size=64, intermediate_size=176, hidden_act="silu")).to(device)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(w_gate.float())
        mlp.up_proj.weight.copy_(w_up.float())
        mlp.down_proj.weight.copy_(w_down.float())
        expected = mlp(x.float())
    out = impl.swiglu(x, w_gate, w_up, w_down)
    assert out.shape == (2, 7, 64) and out.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    else:  # bf16 keeps 8 bits of mantissa: allow a few roundings, relative to the output's scale
        torch.testing.assert_close(out.float(), expected, rtol=0, atol=0.03 * expected.abs().max().item())


@pytest.mark.graded(SWIGLU, points=1)
def test_swiglu_is_position_wise(impl, device):
    w_gate, w_up, w_down = mlp_weights(device, torch.float32, seed=2)
    x = torch.randn(1, 9, 64, generator=torch.Generator().manual_seed(3)).to(device)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(4)).to(device)
    torch.testing.assert_close(impl.swiglu(x[:, perm], w_gate, w_up, w_down),
                               impl.swiglu(x, w_gate, w_up, w_down)[:, perm])
