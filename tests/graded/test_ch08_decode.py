"""Graded tests for Chapter 8 (exercises/ch08_decode.py).

Oracles: a full forward pass over the whole sequence (a cache must not change any logit),
transformers' greedy generate on the same weights, transformers' TopPLogitsWarper, and byte
counts worked by hand (Llama-2 7B: 512 KiB per token in fp16).
"""

import pytest
import torch

from llama_course import PRESETS, LlamaConfig
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Llama

PACKAGE_MODULES = ["llama_course.kv_cache", "llama_course.generate", "llama_course.cost"]

UPDATE = "Exercise 8.1 KVCache.update"
STEP = "Exercise 8.2 decode_step"
GREEDY = "Exercise 8.3 greedy_generate"
TOP_P = "Exercise 8.4 top_p_filter"
BYTES = "Exercise 8.5 kv_cache_bytes"

CONFIG = LlamaConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


def model_ids_and_logits(seed, batch, length):
    """A model with realistic weights, random ids (batch, length), and the logits of one full
    forward pass over them without a cache: the oracle of every cached computation."""
    torch.manual_seed(seed)
    m = Llama(CONFIG).eval()
    realistic_weights_(m, std=0.2)
    ids = torch.randint(0, CONFIG.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        return m, ids, m(ids)


@pytest.mark.graded(UPDATE, points=2)
def test_update_writes_in_place_and_returns_everything(impl):
    cache = impl.KVCache(CONFIG, 2, 8)
    k1, v1 = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 3, 8)
    keys, values = cache.update(0, k1, v1)
    assert torch.equal(keys, k1) and torch.equal(values, v1)
    cache.advance()
    k2, v2 = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8)
    keys, values = cache.update(0, k2, v2)
    assert keys.shape == (2, 2, 4, 8) and torch.equal(keys, torch.cat([k1, k2], dim=2))
    assert torch.equal(values, torch.cat([v1, v2], dim=2))
    # in place: the preallocated (batch, kv_heads, max_seq_len, head_dim) buffers hold the positions
    assert cache.keys[0].shape == cache.values[0].shape == (2, 2, 8, 8)
    assert torch.equal(cache.keys[0][:, :, :4], keys) and torch.equal(cache.values[0][:, :, :4], values)
    cache.advance()
    assert cache.length == 4
    with pytest.raises(ValueError, match="8"):
        cache.update(1, torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))


@pytest.mark.graded(UPDATE, points=2)
def test_your_cache_reproduces_the_full_forward(impl):
    m, ids, full = model_ids_and_logits(1, 2, 10)
    cache = impl.KVCache(CONFIG, 2, 10)
    with torch.no_grad():
        parts = [m(ids[:, :6], cache=cache)] + [m(ids[:, t:t + 1], cache=cache) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(STEP, points=2)
def test_decode_step(impl):
    m, ids, full = model_ids_and_logits(3, 1, 9)
    cache = impl.KVCache(CONFIG, 1, 9)
    first = impl.decode_step(m, ids[:, :6], cache)         # prefill: the last position's logits
    assert first.shape == (1, 61)
    torch.testing.assert_close(first, full[:, 5], rtol=1e-5, atol=1e-5)
    for t in range(6, 9):                                   # decode: position = tokens cached
        torch.testing.assert_close(impl.decode_step(m, ids[:, t:t + 1], cache), full[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.graded(GREEDY, points=3)
def test_greedy_matches_transformers(impl, hf_llama_and_ours):
    # the same sizes as CONFIG; no EOS in the fixture: all 12 new tokens are compared
    hf, ours = hf_llama_and_ours(seed=5, std=0.3, vocab_size=61, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                                 max_position_embeddings=64)
    prompt = torch.tensor([[3, 14, 15, 9, 2]])
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert expected.shape == (1, 17)
    assert torch.equal(impl.greedy_generate(ours, prompt, 12), expected)


@pytest.mark.graded(TOP_P, points=2)
def test_top_p_matches_transformers(impl):
    transformers = pytest.importorskip("transformers")
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(6)) * 3
    for top_p in (0.1, 0.5, 0.9, 1.0):
        expected = transformers.TopPLogitsWarper(top_p)(None, logits.clone())
        assert torch.equal(impl.top_p_filter(logits, top_p).isinf(), expected.isinf()), top_p


@pytest.mark.graded(TOP_P, points=1)
def test_top_p_hand_example(impl):
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).log_softmax(-1)  # probabilities roughly .64 .24 .09 .03
    kept = ~impl.top_p_filter(logits, 0.8).isinf()
    assert kept.tolist() == [[True, True, False, False]]             # .64 < .8 <= .64 + .24
    assert (~impl.top_p_filter(logits, 0.01).isinf()).tolist() == [[True, False, False, False]]


@pytest.mark.graded(BYTES, points=2)
def test_kv_cache_bytes(impl):
    llama2 = PRESETS["llama2-7b"]
    assert impl.kv_cache_bytes(llama2) == 2 * 32 * 32 * 128 * 2 == 512 * 1024  # one token, fp16
    assert impl.kv_cache_bytes(llama2, 4096) == 2 * 2**30                      # 2 GiB at 4096 tokens
    assert impl.kv_cache_bytes(PRESETS["llama2-70b"], 1) == 2 * 80 * 8 * 128 * 2  # GQA: 8 KV heads
    assert impl.kv_cache_bytes(llama2, 10, batch_size=3, bytes_per_value=4) == 30 * 2 * 32 * 32 * 128 * 4
