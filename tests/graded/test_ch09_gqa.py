"""Graded tests for Chapter 9 (exercises/ch09_gqa.py).

Oracles: transformers' repeat_kv and eager attention (repeat, then attend), the MHA
equivalence at n_kv_heads = n_heads, torch's F.scaled_dot_product_attention, and pooling
worked by hand. Homework 9.A and 9.B: public checks only (the docstrings' examples).
"""

import pytest
import torch
import torch.nn.functional as F

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.gqa"]

REPEAT = "Exercise 9.1 repeat_kv"
GQA = "Exercise 9.2 gqa_attention"
POOL = "Exercise 9.3 mha_to_gqa"
INT8 = "Homework 9.A Int8KVCache.update"
RAGGED = "Homework 9.B ragged_attention"


def randn(*shape, seed=0, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.graded(REPEAT, weight=2)
def test_repeat_kv_matches_transformers(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = randn(2, 3, 5, 4, device=device)
    for n_rep in (1, 2, 4):
        assert_equal(impl.repeat_kv(x, n_rep), modeling_llama.repeat_kv(x, n_rep),
                     f"repeat_kv(x, {n_rep}) vs transformers' repeat_kv")
    out = impl.repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3).flatten().tolist()
    assert out == [0, 0, 0, 1, 1, 1], \
        f"repeat_kv of KV heads [0, 1] with n_rep=3 gave heads {out}; KV head j must serve query heads 3j .. 3j+2"


@pytest.mark.graded(GQA, weight=3)
@pytest.mark.parametrize("n_kv_heads", [8, 2, 1], ids=["mha", "gqa", "mqa"])
def test_gqa_attention_equals_repeat_then_attend(impl, device, n_kv_heads):
    q = randn(2, 8, 6, 16, seed=1, device=device)
    k, v = randn(2, n_kv_heads, 6, 16, seed=2, device=device), randn(2, n_kv_heads, 6, 16, seed=3, device=device)
    rep = 8 // n_kv_heads
    causal = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              attn_mask=causal)
    assert_close(impl.gqa_attention(q, k, v, causal), expected,
                 f"gqa_attention ({n_kv_heads} KV heads, causal) vs repeat-then-attend")
    padded = causal & torch.tensor([[True] * 6, [False, True, True, True, True, True]], device=device)[:, None, None]
    expected = F.scaled_dot_product_attention(q[1:], k[1:].repeat_interleave(rep, 1), v[1:].repeat_interleave(rep, 1),
                                              attn_mask=padded[1:])
    assert_close(impl.gqa_attention(q, k, v, padded)[1:, :, 1:], expected[:, :, 1:],
                 f"gqa_attention ({n_kv_heads} KV heads) with a (B, 1, T, S) padding mask vs repeat-then-attend")


@pytest.mark.graded(GQA, weight=1)
def test_gqa_attention_does_not_copy_kv(impl, impl_source):
    q, k, v = randn(1, 4, 3, 8, seed=4), randn(1, 2, 3, 8, seed=5), randn(1, 2, 3, 8, seed=6)
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    assert_close(impl.gqa_attention(q, k, v), expected, "gqa_attention without a mask")  # it works...
    body = impl_source("gqa_attention").split('"""')[-1]  # ...and the code after the docstring never copies
    for forbidden in ("repeat_kv", "repeat_interleave", ".repeat("):
        assert forbidden not in body, f"gqa_attention must not use {forbidden}"


@pytest.mark.graded(POOL, weight=2)
def test_mha_to_gqa(impl):
    d, heads, hd = 8, 4, 2
    weights = {name: randn(heads * hd, d, seed=i) for i, name in enumerate(("q_proj.weight", "k_proj.weight",
                                                                             "v_proj.weight", "o_proj.weight"))}
    pooled = impl.mha_to_gqa(weights, heads, 2)
    shapes = tuple(pooled["k_proj.weight"].shape), tuple(pooled["v_proj.weight"].shape)
    assert shapes == ((2 * hd, d), (2 * hd, d)), f"pooled k and v have shapes {shapes}, expected ({2 * hd}, {d})"
    k = weights["k_proj.weight"].view(heads, hd, d)
    assert_close(pooled["k_proj.weight"][:hd], (k[0] + k[1]) / 2, "KV head 0 must be the mean of old heads 0 and 1")
    assert_close(pooled["k_proj.weight"][hd:], (k[2] + k[3]) / 2, "KV head 1 must be the mean of old heads 2 and 3")
    v = weights["v_proj.weight"].view(heads, hd, d)
    assert_close(impl.mha_to_gqa(weights, heads, 1)["v_proj.weight"], v.mean(0),
                 "MQA (1 KV head): v must be the mean of all heads")
    assert_equal(pooled["q_proj.weight"], weights["q_proj.weight"], "q_proj must be unchanged")
    assert_equal(pooled["o_proj.weight"], weights["o_proj.weight"], "o_proj must be unchanged")


@pytest.mark.graded(INT8, weight=1, kind="homework")
def test_int8_cache_worked_example(impl):
    from llama_course import LlamaConfig
    config = LlamaConfig(vocab_size=10, d_model=12, n_layers=1, n_heads=4, n_kv_heads=1)   # head_dim 3
    cache = impl.Int8KVCache(config, 1, 4)
    x = torch.tensor([0.5, -1.27, 0.0]).view(1, 1, 1, 3)
    keys, values = cache.update(0, x, x)
    assert cache.keys[0].dtype == torch.int8, f"the key buffer must be int8, got {cache.keys[0].dtype}"
    assert cache.keys[0][0, 0, 0].tolist() == [50, -127, 0], \
        f"the docstring's example is stored as {cache.keys[0][0, 0, 0].tolist()}, expected [50, -127, 0]"
    assert_close(cache.key_scales[0][0, 0, 0], torch.tensor([0.01]), "the docstring's scale", rtol=1e-6, atol=0)
    assert_close(keys, x, "the dequantised keys of the example", rtol=0, atol=1e-6)


@pytest.mark.graded(RAGGED, weight=1, kind="homework")
def test_ragged_attention_worked_example(impl):
    q, k, v = randn(2, 2, 1, 4, seed=7), randn(2, 1, 4, 4, seed=8), randn(2, 1, 4, 4, seed=9)
    out = impl.ragged_attention(q, k, v, torch.tensor([4, 2]))
    assert out.shape == (2, 2, 1, 4), f"ragged_attention returned shape {tuple(out.shape)}, expected (2, 2, 1, 4)"
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 2:] = 100.0
    v2[1, :, 2:] = -100.0
    assert_close(impl.ragged_attention(q, k2, v2, torch.tensor([4, 2]))[1], out[1],
                 "row 1 (kv_len 2) changed when its stale keys 2 and 3 changed")
