"""Graded tests for Chapter 9 (exercises/ch09_gqa.py).

Oracles: transformers' repeat_kv and eager attention (repeat, then attend), the MHA
equivalence at n_kv_heads = n_heads, torch's F.scaled_dot_product_attention, and pooling
worked by hand.
"""

import pytest
import torch
import torch.nn.functional as F

PACKAGE_MODULES = ["llama_course.attention"]

REPEAT = "Exercise 9.1 repeat_kv"
GQA = "Exercise 9.2 gqa_attention"
POOL = "Exercise 9.3 mha_to_gqa"


def randn(*shape, seed=0, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.graded(REPEAT, points=2)
def test_repeat_kv_matches_transformers(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = randn(2, 3, 5, 4, device=device)
    for n_rep in (1, 2, 4):
        assert torch.equal(impl.repeat_kv(x, n_rep), modeling_llama.repeat_kv(x, n_rep))
    out = impl.repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3)
    assert out.flatten().tolist() == [0, 0, 0, 1, 1, 1]  # KV head j serves query heads 3j .. 3j+2


@pytest.mark.graded(GQA, points=3)
@pytest.mark.parametrize("n_kv_heads", [8, 2, 1], ids=["mha", "gqa", "mqa"])
def test_gqa_attention_equals_repeat_then_attend(impl, device, n_kv_heads):
    q = randn(2, 8, 6, 16, seed=1, device=device)
    k, v = randn(2, n_kv_heads, 6, 16, seed=2, device=device), randn(2, n_kv_heads, 6, 16, seed=3, device=device)
    rep = 8 // n_kv_heads
    causal = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              attn_mask=causal)
    torch.testing.assert_close(impl.gqa_attention(q, k, v, causal), expected, rtol=1e-5, atol=1e-5)
    padded = causal & torch.tensor([[True] * 6, [False, True, True, True, True, True]], device=device)[:, None, None]
    expected = F.scaled_dot_product_attention(q[1:], k[1:].repeat_interleave(rep, 1), v[1:].repeat_interleave(rep, 1),
                                              attn_mask=padded[1:])
    torch.testing.assert_close(impl.gqa_attention(q, k, v, padded)[1:, :, 1:], expected[:, :, 1:],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.graded(GQA, points=1)
def test_gqa_attention_does_not_copy_kv(impl, impl_source):
    q, k, v = randn(1, 4, 3, 8, seed=4), randn(1, 2, 3, 8, seed=5), randn(1, 2, 3, 8, seed=6)
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    torch.testing.assert_close(impl.gqa_attention(q, k, v), expected, rtol=1e-5, atol=1e-5)  # it works...
    body = impl_source("gqa_attention").split('"""')[-1]  # ...and the code after the docstring never copies
    for forbidden in ("repeat_kv", "repeat_interleave", ".repeat("):
        assert forbidden not in body, f"gqa_attention must not use {forbidden}"


@pytest.mark.graded(POOL, points=2)
def test_mha_to_gqa(impl):
    d, heads, hd = 8, 4, 2
    weights = {name: randn(heads * hd, d, seed=i) for i, name in enumerate(("q_proj.weight", "k_proj.weight",
                                                                             "v_proj.weight", "o_proj.weight"))}
    pooled = impl.mha_to_gqa(weights, heads, 2)
    assert pooled["k_proj.weight"].shape == (2 * hd, d) and pooled["v_proj.weight"].shape == (2 * hd, d)
    k = weights["k_proj.weight"].view(heads, hd, d)
    torch.testing.assert_close(pooled["k_proj.weight"][:hd], (k[0] + k[1]) / 2)   # group 0 = heads 0, 1
    torch.testing.assert_close(pooled["k_proj.weight"][hd:], (k[2] + k[3]) / 2)   # group 1 = heads 2, 3
    v = weights["v_proj.weight"].view(heads, hd, d)
    torch.testing.assert_close(impl.mha_to_gqa(weights, heads, 1)["v_proj.weight"], v.mean(0))  # MQA
    assert torch.equal(pooled["q_proj.weight"], weights["q_proj.weight"])
    assert torch.equal(pooled["o_proj.weight"], weights["o_proj.weight"])
