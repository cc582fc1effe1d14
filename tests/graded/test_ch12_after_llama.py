"""Graded tests for Chapter 12 (exercises/ch12_after_llama.py).

Oracles: transformers' sliding-window mask function (Exercise 12.1), the naive MLA form -- keys and
values expanded per head, then torch's F.scaled_dot_product_attention (Exercise 12.2) --, and
transformers' DeepseekV3TopkRouter (Exercise 12.3). Homework 12.A and 12.B: the worked examples of
their docstrings (the real tests are hidden).
"""

import pytest
import torch
import torch.nn.functional as F

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
        assert got.dtype == torch.bool and got.device.type == device.type
        assert torch.equal(got.cpu(), expected), f"q_len={q_len}, window={window}, kv_len={kv_len}"
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
    assert got.shape == (B, H, q_len, d_v)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


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
        assert got.shape == (64, top_k)
        assert torch.equal(got.sort(-1).values, expected.sort(-1).values), f"E={n_experts}, groups={n_group}"


@pytest.mark.graded(SINK, weight=1, kind="homework")
def test_attention_sink_mask_worked_example(impl):
    T, F_ = True, False
    expected = torch.tensor([[T, F_, F_, F_, F_], [T, T, F_, F_, F_], [T, T, T, F_, F_],
                             [T, F_, T, T, F_], [T, F_, F_, T, T]])
    got = impl.attention_sink_mask(5, 2, 1)
    assert got.dtype == torch.bool and got.shape == (5, 5)
    assert torch.equal(got, expected)


@pytest.mark.graded(BALANCE, weight=1, kind="homework")
def test_sequence_balance_loss_worked_example(impl):
    scores = torch.tensor([[1.0, 1.0, 2.0], [2.0, 1.0, 1.0]])
    loss = impl.sequence_balance_loss(scores, torch.tensor([[2], [0]]), 3, 1.0)
    assert loss.dim() == 0 and loss.dtype == torch.float32
    assert abs(loss.item() - 1.125) < 1e-6
