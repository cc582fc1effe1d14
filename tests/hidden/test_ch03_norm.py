"""Hidden tests for Chapter 3 (instructor edition and Gradescope only).

Oracles: torch.autograd.gradcheck (finite differences, float64) and autograd through F.rms_norm
(Homework 3.A); transformers' LlamaForCausalLM, whose logits must not change when its norm gains
are folded away (Homework 3.B).
"""

import pytest
import torch
import torch.nn.functional as F
from graded._checks import assert_close, assert_equal
from torch.autograd.gradcheck import GradcheckError

BACKWARD = "Homework 3.A rms_norm_backward"
FOLD = "Homework 3.B fold_norm_weights"


def _function(impl, eps):
    """An autograd.Function whose backward is the student's rms_norm_backward (called from here, so
    that it also works when the student's code runs in a sandboxed worker)."""
    backward = impl.rms_norm_backward

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return F.rms_norm(x, (x.shape[-1],), weight, eps=eps)

        @staticmethod
        def backward(ctx, grad_out):
            x, weight = ctx.saved_tensors
            return backward(x, weight, grad_out, eps)

    return Fn.apply


@pytest.mark.graded(BACKWARD, weight=2, kind="homework")
@pytest.mark.parametrize("shape", [(5, 6), (2, 3, 8)], ids=["2d", "3d"])
def test_rms_norm_backward_passes_gradcheck(impl, shape):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 2 + 0.3).requires_grad_()
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).requires_grad_()
    fn = _function(impl, 1e-6)
    try:
        torch.autograd.gradcheck(fn, (x, w), eps=1e-6, atol=1e-6, rtol=1e-5)
    except GradcheckError as error:
        first = str(error).splitlines()[0]
        raise AssertionError(f"rms_norm_backward disagrees with finite differences ({first})") from None


@pytest.mark.graded(BACKWARD, weight=2, kind="homework")
def test_rms_norm_backward_matches_autograd_float32(impl, device):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 7, 64, generator=g) * 3 + 0.5).to(device).requires_grad_()
    w = (1 + 0.5 * torch.randn(64, generator=g)).to(device).requires_grad_()
    dy = torch.randn(4, 7, 64, generator=g).to(device)
    F.rms_norm(x, (64,), w, eps=1e-5).backward(dy)
    grad_x, grad_w = impl.rms_norm_backward(x.detach(), w.detach(), dy, 1e-5)
    assert grad_x.dtype == torch.float32 and grad_w.dtype == torch.float32, \
        f"float32 inputs: gradients must be float32, got {grad_x.dtype} and {grad_w.dtype}"
    assert_close(grad_w, w.grad, "grad_weight vs autograd of F.rms_norm (sum over every leading position)",
                 rtol=1e-4, atol=1e-4)
    assert_close(grad_x, x.grad, "grad_x vs autograd of F.rms_norm", rtol=1e-4, atol=1e-5)


@pytest.mark.graded(BACKWARD, weight=2, kind="homework")
def test_rms_norm_backward_dtypes_and_no_autograd(impl, impl_source):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(3, 16, generator=g) * 2).to(torch.bfloat16)
    w = (1 + 0.3 * torch.randn(16, generator=g))
    dy = torch.randn(3, 16, generator=g).to(torch.bfloat16)
    grad_x, grad_w = impl.rms_norm_backward(x, w, dy, 1e-6)
    assert grad_x.dtype == torch.bfloat16, f"grad_x must have x's dtype (bfloat16), got {grad_x.dtype}"
    assert grad_w.dtype == torch.float32, f"grad_weight must have weight's dtype (float32), got {grad_w.dtype}"
    x32 = x.float().requires_grad_()
    w32 = w.clone().requires_grad_()
    F.rms_norm(x32, (16,), w32, eps=1e-6).backward(dy.float())
    assert_close(grad_w, w32.grad, "bf16 input: grad_weight (computed in float32) vs autograd", rtol=1e-4, atol=1e-4)
    assert_close(grad_x.float(), x32.grad, "bf16 input: grad_x vs autograd", rtol=1.6e-2, atol=1e-3)
    body = impl_source("rms_norm_backward").split('"""')[-1]
    for forbidden in ("autograd", ".backward("):
        assert forbidden not in body, f"rms_norm_backward must compute the gradient by hand, without {forbidden}"


def _hf(tie, seed):
    transformers = pytest.importorskip("transformers")
    from llama_course.grade.testing import realistic_weights_
    config = transformers.LlamaConfig(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=48, tie_word_embeddings=tie,
                                      attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    realistic_weights_(model, std=0.2, norm_std=0.5)                     # gains far from 1
    return transformers, model


@pytest.mark.graded(FOLD, weight=3, kind="homework")
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_folded_model_gives_the_same_logits(impl, tie):
    transformers, model = _hf(tie, seed=3)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if tie:
        state.pop("lm_head.weight", None)
    before = {k: v.clone() for k, v in state.items()}
    folded = impl.fold_norm_weights(state, 2)
    for name, tensor in state.items():
        assert_equal(tensor, before[name], f"fold_norm_weights modified its input ({name}); return a new dict")
    for name in [k for k in folded if k.endswith("norm.weight")]:
        assert_equal(folded[name], torch.ones_like(before[name]), f"{name} must be ones after folding")
    assert_equal(folded["model.embed_tokens.weight"], before["model.embed_tokens.weight"],
                 "the embedding must not change (a tied head gets its own lm_head.weight)")
    assert "lm_head.weight" in folded, "the folded dict needs an lm_head.weight (the final norm folds into it)"
    untied = transformers.LlamaForCausalLM(model.config.__class__(**{**model.config.to_dict(),
                                                                    "tie_word_embeddings": False})).eval()
    untied.load_state_dict(folded)
    ids = torch.randint(0, 53, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected, got = model(ids).logits, untied(ids).logits
    assert_close(got, expected, "logits of the folded model vs the original", rtol=1e-4, atol=1e-4)


@pytest.mark.graded(FOLD, weight=2, kind="homework")
def test_fold_keeps_dtypes_and_untouched_tensors(impl):
    _, model = _hf(False, seed=5)
    state = {k: v.detach().clone().to(torch.bfloat16) for k, v in model.state_dict().items()}
    folded = impl.fold_norm_weights(state, 2)
    assert set(folded) == set(state), f"folding must keep the same names: {sorted(set(folded) ^ set(state))}"
    for name, tensor in folded.items():
        assert tensor.dtype == torch.bfloat16, f"{name}: dtype {tensor.dtype}, expected bfloat16 (the input's)"
    for name in ("model.embed_tokens.weight", "model.layers.1.self_attn.o_proj.weight",
                 "model.layers.0.mlp.down_proj.weight"):
        assert_equal(folded[name], state[name], f"{name} has no norm before it and must be unchanged")
    g = state["model.layers.1.post_attention_layernorm.weight"].float()
    expected = (state["model.layers.1.mlp.up_proj.weight"].float() * g).to(torch.bfloat16)
    assert_equal(folded["model.layers.1.mlp.up_proj.weight"], expected,
                 "layer 1 up_proj: multiply in float32, then store in bfloat16")
