"""Graded tests for Chapter 3 (exercises/ch03_norm.py).

Oracles: torch's F.rms_norm and F.layer_norm, transformers' LlamaRMSNorm on the same weights,
and invariants: RMS(output) = |gamma| for a constant gamma, scale invariance, the identity path.
Homework 3.A and 3.B: public checks only (the worked examples of the docstrings).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ._checks import assert_close, assert_equal

RMS = "Exercise 3.1 rms_norm"
LN = "Exercise 3.2 layer_norm"
PRE = "Exercise 3.3 pre_norm_residual"
BACKWARD = "Homework 3.A rms_norm_backward"
FOLD = "Homework 3.B fold_norm_weights"

# bf16 keeps 8 mantissa bits: a relative tolerance of a few roundings (torch's default for bf16);
# the oracle runs in float32 on the same rounded inputs, so no absolute slack beyond float32's.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}


def inputs(device, dtype, shape=(2, 5, 64), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g) * 3 + 0.5).to(device, dtype)   # not zero-mean: LN != RMSNorm
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(device, dtype)
    return x, w


def _meta(out, x, what):
    assert out.shape == x.shape, f"{what}: output shape {tuple(out.shape)}, expected x's {tuple(x.shape)}"
    assert out.dtype == x.dtype, f"{what}: output dtype {out.dtype}, expected x's dtype {x.dtype}"
    assert out.device.type == x.device.type, f"{what}: output on {out.device}, expected {x.device}"


@pytest.mark.graded(RMS, weight=2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_torch(impl, device, dtype):
    x, w = inputs(device, dtype)
    out = impl.rms_norm(x, w, eps=1e-6)
    _meta(out, x, f"rms_norm ({dtype})")
    expected = F.rms_norm(x.float(), (64,), w.float(), eps=1e-6)
    assert_close(out.float(), expected, f"rms_norm ({dtype}) vs F.rms_norm", **TOL[dtype])


@pytest.mark.graded(RMS, weight=2)
def test_rms_norm_matches_llama_rmsnorm(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    for dtype in (torch.float32, torch.bfloat16):
        x, w = inputs(device, dtype, seed=1)
        reference = modeling_llama.LlamaRMSNorm(64, eps=1e-5).to(device, dtype)
        with torch.no_grad():
            reference.weight.copy_(w)
            expected = reference(x)
        assert_equal(impl.rms_norm(x, w, eps=1e-5), expected,
                     f"rms_norm ({dtype}) vs transformers' LlamaRMSNorm, bit for bit (cast to x's dtype BEFORE "
                     f"multiplying by the weight)")


@pytest.mark.graded(RMS, weight=1)
def test_rms_norm_invariants(impl, device):
    x, _ = inputs(device, torch.float32, seed=2)
    gamma = torch.full((64,), 2.5, device=device)
    out = impl.rms_norm(x, gamma, eps=1e-8)
    assert_close(out.pow(2).mean(-1).sqrt(), torch.full((2, 5), 2.5, device=device),
                 "RMS of rms_norm(x, gamma = 2.5) must be 2.5")
    assert_close(impl.rms_norm(7.0 * x, gamma, eps=1e-8), out, "rms_norm(7 x) must equal rms_norm(x)")
    cos = F.cosine_similarity(out, x, dim=-1)
    assert_close(cos, torch.ones_like(cos), "rms_norm with a constant gain must keep each vector's direction")


@pytest.mark.graded(LN, weight=2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_matches_torch(impl, device, dtype):
    x, w = inputs(device, dtype, seed=3)
    b = (0.1 * torch.randn(64, generator=torch.Generator().manual_seed(4))).to(device, dtype)
    out = impl.layer_norm(x, w, b, eps=1e-5)
    _meta(out, x, f"layer_norm ({dtype})")
    expected = F.layer_norm(x.float(), (64,), w.float(), b.float(), eps=1e-5)
    assert_close(out.float(), expected, f"layer_norm ({dtype}) vs F.layer_norm", **TOL[dtype])
    no_bias = impl.layer_norm(x, w, eps=1e-5)
    assert_close(no_bias.float(), F.layer_norm(x.float(), (64,), w.float(), eps=1e-5),
                 f"layer_norm without bias ({dtype}) vs F.layer_norm", **TOL[dtype])


@pytest.mark.graded(PRE, weight=2, depends=("Exercise 3.1",))
def test_pre_norm_residual(impl, device):
    torch.manual_seed(5)
    sublayer = nn.Linear(64, 64, bias=False).to(device)
    with torch.no_grad():
        sublayer.weight.mul_(4)  # large enough that a missing norm or residual shows
    x, w = inputs(device, torch.float32, seed=6)
    with torch.no_grad():
        expected = x + sublayer(F.rms_norm(x, (64,), w, eps=1e-6))
        assert_close(impl.pre_norm_residual(x, sublayer, w), expected, "pre_norm_residual vs x + f(RMSNorm(x))")
        zero = nn.Linear(64, 64, bias=False).to(device)
        zero.weight.zero_()
        assert_equal(impl.pre_norm_residual(x, zero, w), x,
                     "with a sublayer that outputs zeros, pre_norm_residual must return x unchanged")


@pytest.mark.graded(BACKWARD, weight=1, kind="homework")
def test_rms_norm_backward_worked_example(impl):
    grad_x, grad_w = impl.rms_norm_backward(torch.tensor([[3.0, 4.0]]), torch.ones(2), torch.tensor([[1.0, 0.0]]), 0.0)
    assert_close(grad_w, torch.tensor([0.8485, 0.0]), "the docstring's grad_weight", atol=1e-4)
    assert_close(grad_x, torch.tensor([[0.1810, -0.1358]]), "the docstring's grad_x", atol=1e-4)


@pytest.mark.graded(FOLD, weight=1, kind="homework")
def test_fold_norm_weights_worked_example(impl):
    q = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    state = {"model.embed_tokens.weight": torch.ones(3, 2), "model.norm.weight": torch.tensor([2.0, 3.0]),
             "lm_head.weight": torch.ones(3, 2),
             "model.layers.0.input_layernorm.weight": torch.tensor([10.0, 0.5]),
             "model.layers.0.post_attention_layernorm.weight": torch.ones(2)}
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
        state[f"model.layers.0.{name}.weight"] = q.clone()
    folded = impl.fold_norm_weights(state, 1)
    assert_close(folded["model.layers.0.self_attn.q_proj.weight"], torch.tensor([[10.0, 1.0], [30.0, 2.0]]),
                 "the docstring's folded q_proj (column j times g_j)")
    assert_equal(folded["model.layers.0.input_layernorm.weight"], torch.ones(2), "the folded norm weight (ones)")
    # what the statement states: a NEW dict, the input untouched; each weight keeps its dtype; a
    # tied checkpoint (no lm_head.weight) gets a head of its own, its embedding unchanged
    state = {name: t.to(torch.bfloat16) for name, t in state.items() if name != "lm_head.weight"}
    before = {name: t.clone() for name, t in state.items()}
    folded = impl.fold_norm_weights(state, 1)
    assert folded is not state and set(state) == set(before), \
        "fold_norm_weights must return a NEW dict and leave the input's keys as they were"
    for name, tensor in before.items():
        assert_equal(state[name], tensor, f"the input's {name} after fold_norm_weights (the input must not change)")
    q_proj = folded["model.layers.0.self_attn.q_proj.weight"]
    assert q_proj.dtype == torch.bfloat16, f"a bf16 q_proj must stay bf16 after folding, got {q_proj.dtype}"
    assert "lm_head.weight" in folded, "a tied checkpoint (no lm_head.weight) must get an lm_head.weight of its own"
    assert_close(folded["lm_head.weight"], torch.ones(3, 2, dtype=torch.bfloat16) * torch.tensor([2.0, 3.0]).bfloat16(),
                 "the tied head: the embedding (ones) times the final norm's weight [2, 3]")
    assert_equal(folded["model.embed_tokens.weight"], before["model.embed_tokens.weight"],
                 "the embedding of a tied checkpoint (it must NOT change)")
