"""Graded tests for Chapter 12 (exercises/ch12_after_llama.py).

Oracles: transformers' sliding-window mask function (Exercise 12.1), the naive MLA form -- keys and
values expanded per head, then torch's F.scaled_dot_product_attention (Exercise 12.2) --, and
transformers' DeepseekV3TopkRouter (Exercise 12.3). Homework 12.A and 12.B: the worked examples of
their docstrings (the real tests are hidden).
"""

import pytest
import torch
import torch.nn.functional as F

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.sliding_window", "llama_course.deepseek_moe"]

BAND = "Exercise 12.1 banded_mask"
ABSORB = "Exercise 12.2 mla_absorbed_attention"
GROUPS = "Exercise 12.3 group_limited_topk"
SINK = "Homework 12.A attention_sink_mask"
BALANCE = "Homework 12.B sequence_balance_loss"

transformers = pytest.importorskip("transformers")


def randn(*shape, seed=0, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(device)


@pytest.mark.graded(BAND, weight=2)
def test_banded_mask_matches_transformers(impl, device):
    from transformers.masking_utils import sliding_window_causal_mask_function
    for q_len, window, kv_len in [(7, 3, None), (1, 4, 9), (3, 2, 8), (5, 9, None)]:
        rule = sliding_window_causal_mask_function(window)
        total = kv_len or q_len
        queries, keys = torch.arange(total - q_len, total)[:, None], torch.arange(total)[None, :]
        expected = rule(0, 0, queries, keys)                          # transformers' rule, evaluated on a grid
        got = impl.banded_mask(q_len, window, kv_len, device=device)
        assert got.dtype == torch.bool, f"banded_mask must return a boolean mask, got {got.dtype}"
        assert got.device.type == device.type, f"banded_mask(..., device={device}) returned a mask on {got.device}"
        assert_equal(got.cpu(), expected, f"banded_mask(q_len={q_len}, window={window}, kv_len={kv_len}) vs "
                                          f"transformers' sliding-window rule (True = may attend)")
    with pytest.raises(ValueError, match="window"):
        impl.banded_mask(4, 0)


def naive_mla(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, scale, mask):
    """Per-head keys and values expanded from the latents, then torch's attention."""
    heads = w_uk.shape[0]
    k_nope = torch.einsum("hnr,bsr->bhsn", w_uk, c_kv)
    v = torch.einsum("hvr,bsr->bhsv", w_uv, c_kv)
    k = torch.cat([k_nope, k_pe[:, None].expand(-1, heads, -1, -1)], dim=-1)
    q = torch.cat([q_nope, q_pe], dim=-1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.graded(ABSORB, weight=3)
@pytest.mark.parametrize("q_len", [1, 5], ids=["decode", "prefill"])
def test_mla_absorbed_equals_naive(impl, device, q_len):
    B, H, S, d_n, d_r, d_v, r = 2, 4, 5, 12, 8, 10, 16
    q_nope, q_pe = randn(B, H, q_len, d_n, seed=1, device=device), randn(B, H, q_len, d_r, seed=2, device=device)
    c_kv, k_pe = randn(B, S, r, seed=3, device=device), randn(B, S, d_r, seed=4, device=device)
    w_uk, w_uv = randn(H, d_n, r, seed=5, device=device, scale=0.3), randn(H, d_v, r, seed=6, device=device, scale=0.3)
    mask = torch.ones(q_len, S, dtype=torch.bool, device=device).tril(diagonal=S - q_len)
    scale = (d_n + d_r) ** -0.5
    got = impl.mla_absorbed_attention(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, scale, mask)
    expected = naive_mla(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, scale, mask)
    assert_close(got, expected, f"mla_absorbed_attention ({'one new query' if q_len == 1 else 'prefill'}) vs "
                                f"the naive form (keys and values expanded per head)")


@pytest.mark.graded(GROUPS, weight=2)
def test_group_limited_topk_matches_transformers(impl):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    for n_experts, n_group, topk_group, top_k, seed in [(16, 4, 2, 4, 0), (8, 4, 3, 2, 1), (12, 3, 1, 3, 2)]:
        config = transformers.DeepseekV3Config(hidden_size=n_experts, n_routed_experts=n_experts, n_group=n_group,
                                               topk_group=topk_group, num_experts_per_tok=top_k)
        router = DeepseekV3TopkRouter(config)
        with torch.no_grad():
            router.weight.copy_(torch.eye(n_experts))                 # logits = x: the scores are sigmoid(x)
        x = randn(64, n_experts, seed=seed, scale=2.0)
        _, _, expected = router(x)
        got = impl.group_limited_topk(torch.sigmoid(x), top_k, n_group, topk_group)
        assert tuple(got.shape) == (64, top_k), \
            f"group_limited_topk returned shape {tuple(got.shape)}, expected (tokens, top_k) = (64, {top_k})"
        assert_equal(got.sort(-1).values, expected.sort(-1).values,
                     f"the experts chosen (sorted per token), E={n_experts}, groups={n_group}, "
                     f"topk_group={topk_group},"
                     " vs transformers' DeepseekV3TopkRouter", check_dtype=False)


@pytest.mark.graded(SINK, weight=1, kind="homework")
def test_attention_sink_mask_worked_example(impl):
    T, F_ = True, False
    expected = torch.tensor([[T, F_, F_, F_, F_], [T, T, F_, F_, F_], [T, T, T, F_, F_],
                             [T, F_, T, T, F_], [T, F_, F_, T, T]])
    got = impl.attention_sink_mask(5, 2, 1)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool, \
        f"attention_sink_mask must return a boolean tensor, got {getattr(got, 'dtype', type(got).__name__)}"
    assert_equal(got, expected, "the docstring's example attention_sink_mask(5, 2, 1) (True = may attend)")


@pytest.mark.graded(BALANCE, weight=1, kind="homework")
def test_sequence_balance_loss_worked_example(impl):
    scores = torch.tensor([[1.0, 1.0, 2.0], [2.0, 1.0, 1.0]])
    loss = impl.sequence_balance_loss(scores, torch.tensor([[2], [0]]), 3, 1.0)
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0, \
        f"the loss must be a 0-dim tensor, got {getattr(loss, 'shape', type(loss).__name__)}"
    assert loss.dtype == torch.float32, f"the loss must be float32, got {loss.dtype}"
    assert abs(loss.item() - 1.125) < 1e-6, f"the docstring's example: loss {loss.item():.6g}, expected 1.125"
    # what the statement states: an even routing with uniform scores gives exactly alpha (K = 2 here:
    # f_i carries the 1/K), bf16 scores give a float32 loss, inputs unchanged. (That the loss carries a
    # gradient to the scores is the hidden tests' check: under the homework rules the grader computes it.)
    experts = torch.tensor([[0, 1], [2, 3], [0, 1], [2, 3]])                 # T = 4, K = 2, every expert twice
    scores = torch.full((4, 4), 0.3, requires_grad=True)
    loss = impl.sequence_balance_loss(scores, experts, 4, 0.5)
    assert abs(float(loss) - 0.5) < 1e-6, (f"even routing (T=4, K=2, E=4) with uniform scores: loss {float(loss):.6g}, "
                                           f"expected alpha = 0.5 (f_i = N_r / (K T) * count_i: is the 1/K there?)")
    half = scores.detach().to(torch.bfloat16)
    copy = half.clone()
    out = impl.sequence_balance_loss(half, experts, 4, 0.5)
    assert out.dtype == torch.float32, f"bf16 scores: the loss must be float32, got {out.dtype}"
    assert_equal(half, copy, "the scores after sequence_balance_loss (they must not be changed in place)")
