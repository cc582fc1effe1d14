"""Hidden tests for Chapter 4 (instructor edition and Gradescope only).

Oracles: torch's nn.MultiheadAttention (Exercise 4.6); the ALiBi tensor of transformers' BLOOM
(Homework 4.A: same slopes; BLOOM adds m_h * j, which differs from m_h * (j - i) by a constant per
row, so the attention weights agree); a mask built entry by entry from the definition and the
prefix-LM property "the prefix never sees the suffix" (Homework 4.B).
"""

import pytest
import torch
import torch.nn.functional as F
from graded._checks import assert_close, assert_equal
from torch import nn

PACKAGE_MODULES = ["llama_course.attention"]

MHA = "Exercise 4.6 multi_head_attention"
ALIBI = "Homework 4.A alibi_bias"
PREFIX = "Homework 4.B prefix_lm_mask"


def randn(*shape, seed=0, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(device)


def torch_mha(x, w_q, w_k, w_v, w_o, n_heads, allowed):
    d = x.shape[-1]
    mha = nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True).to(x.device)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        mha.out_proj.weight.copy_(w_o)
        out, _ = mha(x, x, x, attn_mask=~allowed, need_weights=False)  # torch: True = blocked
    return out


@pytest.mark.graded(MHA, weight=3, depends=("Exercise 4.2", "Exercise 4.3", "Exercise 4.4", "Exercise 4.5"))
def test_multi_head_attention_matches_torch(impl, device):
    d, heads, T = 32, 4, 7
    x = randn(2, T, d, seed=8, device=device)
    w_q, w_k, w_v, w_o = (randn(d, d, seed=s, device=device, scale=0.3) for s in (9, 10, 11, 12))
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    assert_close(impl.multi_head_attention(x, w_q, w_k, w_v, w_o, heads),
                 torch_mha(x, w_q, w_k, w_v, w_o, heads, causal),
                 "multi_head_attention (mask=None, i.e. causal) vs nn.MultiheadAttention", rtol=1e-4, atol=1e-5)
    everything = torch.ones(T, T, dtype=torch.bool, device=device)
    assert_close(impl.multi_head_attention(x, w_q, w_k, w_v, w_o, heads, everything),
                 torch_mha(x, w_q, w_k, w_v, w_o, heads, everything),
                 "multi_head_attention with an all-True mask vs nn.MultiheadAttention", rtol=1e-4, atol=1e-5)


def bloom_slopes(n_heads):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    alibi = bloom.build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float64)
    return alibi[:, 0, 1]                                                  # m_h * (key position 1)


@pytest.mark.graded(ALIBI, weight=1, kind="homework")
@pytest.mark.parametrize("n_heads", [1, 3, 6, 8, 12, 20])
def test_alibi_slopes_match_bloom(impl, n_heads):
    bias = impl.alibi_bias(n_heads, 4, 4, dtype=torch.float64)
    assert bias.shape == (n_heads, 4, 4), f"alibi_bias({n_heads}, 4) has shape {tuple(bias.shape)}"
    assert_close(bias[:, 3, 2] * -1, bloom_slopes(n_heads),
                 f"the {n_heads} slopes (bias one key back, negated) vs BLOOM's ALiBi", rtol=1e-6, atol=0)


@pytest.mark.graded(ALIBI, weight=2, kind="homework")
def test_alibi_gives_bloom_attention_and_decode_rows(impl, device):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    H, T = 6, 7
    q, k, v = (randn(1, H, T, 8, seed=s, device=device) for s in (1, 2, 3))
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    ours = impl.alibi_bias(H, T, device=device)
    assert ours.device.type == device.type, f"alibi_bias(device={device}) returned a tensor on {ours.device}"
    theirs = bloom.build_alibi_tensor(torch.ones(1, T, dtype=torch.long), H, torch.float32).to(device)[:, None]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=(theirs[None, :, 0] + torch.zeros(T, T, device=device))
                                              .masked_fill(~causal, float("-inf")))
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=ours.masked_fill(~causal, float("-inf"))[None])
    assert_close(got, expected, "causal attention with your ALiBi bias vs with BLOOM's", rtol=1e-5, atol=1e-6)
    last = impl.alibi_bias(H, 2, T, device=device)
    assert last.shape == (H, 2, T), f"alibi_bias({H}, 2, {T}) has shape {tuple(last.shape)}, expected ({H}, 2, {T})"
    assert_close(last, ours[:, -2:], "alibi_bias(H, 2, kv_len=7): the two queries are positions 5 and 6",
                 rtol=0, atol=1e-7)
    assert impl.alibi_bias(4, 3, dtype=torch.bfloat16).dtype == torch.bfloat16, "alibi_bias must return dtype"
    with pytest.raises(ValueError, match="n_heads"):
        impl.alibi_bias(0, 3)


def definition(prefix_lens, lengths, T):
    out = torch.zeros(len(prefix_lens), T, T, dtype=torch.bool)
    for b, (p, n) in enumerate(zip(prefix_lens.tolist(), lengths.tolist())):
        for i in range(n):
            for j in range(n):
                out[b, i, j] = j < p or j <= i
    return out


@pytest.mark.graded(PREFIX, weight=5, kind="homework")
def test_prefix_lm_mask_matches_the_definition(impl, device):
    g = torch.Generator().manual_seed(0)
    for T in (1, 5, 9):
        lengths = torch.randint(0, T + 1, (6,), generator=g)
        lengths[0] = T
        prefix = (torch.rand(6, generator=g) * (lengths + 1)).long().clamp(max=lengths)
        prefix[1] = 0
        prefix[0] = T                                                          # fully bidirectional
        got = impl.prefix_lm_mask(prefix.to(device), lengths.to(device), T)
        assert got.dtype == torch.bool and got.device.type == device.type, \
            f"expected a bool mask on {device}, got {got.dtype} on {got.device}"
        expected = definition(prefix, lengths, T)
        for b in range(6):
            assert_equal(got[b].cpu(), expected[b],
                         f"row {b} (prefix {prefix[b].item()}, length {lengths[b].item()}, seq_len {T})")


@pytest.mark.graded(PREFIX, weight=2, kind="homework")
def test_prefix_never_sees_the_suffix(impl):
    T, P = 8, 3
    mask = impl.prefix_lm_mask(torch.tensor([P]), torch.tensor([T]), T)
    q, k, v = (randn(1, 2, T, 4, seed=s) for s in (4, 5, 6))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    k2, v2 = k.clone(), v.clone()
    k2[..., P:, :] += 3.0
    v2[..., P:, :] -= 5.0
    out2 = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask[:, None])
    assert_equal(out2[..., :P, :], out[..., :P, :], "the prefix's outputs changed when only the suffix changed")
    assert not torch.allclose(out2[..., P:, :], out[..., P:, :]), "the suffix must see itself"
    for prefix, lengths in ((torch.tensor([3]), torch.tensor([2])), (torch.tensor([-1]), torch.tensor([2])),
                            (torch.tensor([1]), torch.tensor([9]))):
        with pytest.raises(ValueError):
            impl.prefix_lm_mask(prefix, lengths, 8)
