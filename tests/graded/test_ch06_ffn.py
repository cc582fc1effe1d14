"""Graded tests for Chapter 6 (exercises/ch06_ffn.py).

Oracles: torch's F.silu, transformers' LlamaMLP on the same weights, and SiLU's calculus.
Homework 6.A and 6.B: public checks only (the worked examples of the docstrings).
"""

import pytest
import torch
import torch.nn.functional as F

from ._checks import assert_close, assert_equal

SILU = "Exercise 6.1 silu"
SWIGLU = "Exercise 6.2 swiglu"
BACKWARD = "Homework 6.A swiglu_backward"
PRUNE = "Homework 6.B prune_ffn"


@pytest.mark.graded(SILU, weight=2)
def test_silu_matches_torch(impl, device):
    x = torch.linspace(-20, 20, 4001, device=device)
    assert_close(impl.silu(x), F.silu(x), "silu(x) vs F.silu on [-20, 20]", rtol=1e-6, atol=1e-6)
    xb = x.to(torch.bfloat16)
    assert impl.silu(xb).dtype == torch.bfloat16, f"silu of bf16 must stay bf16, got {impl.silu(xb).dtype}"


@pytest.mark.graded(SILU, weight=1)
def test_silu_minimum(impl):
    x = torch.linspace(-3, 0, 300001, dtype=torch.float64)
    y = impl.silu(x)
    i = int(y.argmin())
    # d/dx x*sigmoid(x) = 0  <=>  1 + x (1 - sigmoid(x)) = 0, solved numerically: x = -1.27846...
    assert abs(x[i].item() + 1.27846) < 1e-4 and abs(y[i].item() + 0.27846) < 1e-4, \
        f"silu's minimum is at x = {x[i].item():.5f} with value {y[i].item():.5f}; expected (-1.27846, -0.27846)"


def mlp_weights(device, dtype, d_model=64, d_ff=176, seed=0):
    g = torch.Generator().manual_seed(seed)
    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).to(device, dtype)
    return w(d_ff, d_model), w(d_ff, d_model), w(d_model, d_ff)


@pytest.mark.graded(SWIGLU, weight=3, depends=("Exercise 6.1",))
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
    assert out.shape == (2, 7, 64), f"swiglu returned shape {tuple(out.shape)}, expected (2, 7, 64)"
    assert out.dtype == dtype, f"swiglu must return x's dtype {dtype}, got {out.dtype}"
    if dtype == torch.float32:
        assert_close(out, expected, "swiglu vs transformers' LlamaMLP")
    else:  # bf16 keeps 8 bits of mantissa: allow a few roundings, relative to the output's scale
        assert_close(out.float(), expected, "bf16 swiglu vs LlamaMLP in float32", rtol=0,
                     atol=0.03 * expected.abs().max().item())


@pytest.mark.graded(SWIGLU, weight=1, depends=("Exercise 6.1",))
def test_swiglu_is_position_wise(impl, device):
    w_gate, w_up, w_down = mlp_weights(device, torch.float32, seed=2)
    x = torch.randn(1, 9, 64, generator=torch.Generator().manual_seed(3)).to(device)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(4)).to(device)
    assert_close(impl.swiglu(x[:, perm], w_gate, w_up, w_down), impl.swiglu(x, w_gate, w_up, w_down)[:, perm],
                 "swiglu must act on each position separately: permuting the positions must permute the output")


@pytest.mark.graded(BACKWARD, weight=1, kind="homework")
def test_swiglu_backward_worked_example(impl):
    one = torch.ones(1, 1)
    grads = impl.swiglu_backward(one, one, one, one, one)
    assert len(grads) == 4, f"swiglu_backward must return 4 gradients, got {len(grads)}"
    for got, expected, name in zip(grads, (1.6587, 0.9277, 0.7311, 0.7311), ("x", "w_gate", "w_up", "w_down")):
        assert_close(got, torch.tensor([[expected]]), f"the docstring's grad_{name}", rtol=0, atol=1e-4)
    # what the statement states: each gradient has the shape of its input (d_model 3 != d_ff 5, so a
    # transposed product shows), the weight gradients sum over every leading position of x (2, 4),
    # the inputs' dtype (float64) is kept, and the inputs are left as they were
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(2, 4, 3, generator=g, dtype=torch.float64),
              "w_gate": torch.randn(5, 3, generator=g, dtype=torch.float64),
              "w_up": torch.randn(5, 3, generator=g, dtype=torch.float64),
              "w_down": torch.randn(3, 5, generator=g, dtype=torch.float64),
              "grad_out": torch.randn(2, 4, 3, generator=g, dtype=torch.float64)}
    copies = {name: t.clone() for name, t in inputs.items()}
    grads = impl.swiglu_backward(*inputs.values())
    assert len(grads) == 4, f"swiglu_backward must return 4 gradients, got {len(grads)}"
    for got, name in zip(grads, ("x", "w_gate", "w_up", "w_down")):
        shape = tuple(getattr(got, "shape", ()))
        assert shape == tuple(inputs[name].shape), \
            f"grad_{name} has shape {shape}, expected {name}'s {tuple(inputs[name].shape)} (x (2, 4, 3), d_ff 5)"
        assert got.dtype == torch.float64, f"float64 inputs: grad_{name} must be float64, got {got.dtype}"
    for name, tensor in copies.items():
        assert_equal(inputs[name], tensor, f"{name} after swiglu_backward (the inputs must not change)")


@pytest.mark.graded(PRUNE, weight=1, kind="homework")
def test_prune_ffn_worked_example(impl):
    out = impl.prune_ffn(torch.tensor([[10.0], [10.0], [10.0]]), torch.tensor([[1.0], [3.0], [2.0]]),
                         torch.tensor([[1.0, 1.0, 1.0]]), torch.tensor([[1.0]]), 2)
    for got, expected, name in zip(out, ([[10.0], [10.0]], [[3.0], [2.0]], [[1.0, 1.0]]), ("w_gate", "w_up", "w_down")):
        assert_close(got, torch.tensor(expected), f"the docstring's pruned {name} (units 1 and 2, in order)")
