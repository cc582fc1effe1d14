"""Graded tests for Chapter 8 (exercises/ch08_decode.py).

Oracles: a full forward pass over the whole sequence (a cache must not change any logit),
transformers' greedy generate on the same weights, transformers' TopPLogitsWarper, the top-p rule
evaluated token by token, and byte counts worked by hand (Llama-2 7B: 512 KiB per token in fp16).
Homework 8.A, 8.B and 8.C: public checks only (the docstrings' examples).
"""

import pytest
import torch

from llama_course import PRESETS, LlamaConfig
from llama_course.grade.testing import ConstantLogits, realistic_weights_
from llama_course.model import Llama

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.kv_cache", "llama_course.generate", "llama_course.cost"]

UPDATE = "Exercise 8.1 KVCache.update"
STEP = "Exercise 8.2 decode_step"
GREEDY = "Exercise 8.3 greedy_generate"
TOP_P = "Exercise 8.4 top_p_filter"
BYTES = "Exercise 8.5 kv_cache_bytes"
BEAM = "Homework 8.A beam_search"
SPEC = "Homework 8.B speculative_accept"
MIN_P = "Homework 8.C min_p_filter"

CONFIG = LlamaConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


def model_ids_and_logits(seed, batch, length, config=CONFIG):
    """A model with realistic weights, random ids (batch, length), and the logits of one full
    forward pass over them without a cache: the oracle of every cached computation."""
    torch.manual_seed(seed)
    m = Llama(config).eval()
    realistic_weights_(m, std=0.2)
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        return m, ids, m(ids)


@pytest.mark.graded(UPDATE, weight=2)
def test_update_writes_in_place_and_returns_everything(impl):
    cache = impl.KVCache(CONFIG, 2, 8)
    k1, v1 = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 3, 8)
    keys, values = cache.update(0, k1, v1)
    assert_equal(keys, k1, "the keys returned by the first update (3 new positions, nothing cached before)")
    assert_equal(values, v1, "the values returned by the first update")
    cache.advance()
    k2, v2 = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8)
    keys, values = cache.update(0, k2, v2)
    assert_equal(keys, torch.cat([k1, k2], dim=2), "after advance(), update must return the cached keys "
                 "followed by the new ones (positions 0..3)")
    assert_equal(values, torch.cat([v1, v2], dim=2), "after advance(), the values of positions 0..3")
    # in place: the preallocated (batch, kv_heads, max_seq_len, head_dim) buffers hold the positions
    shape = tuple(cache.keys[0].shape)
    assert shape == (2, 2, 8, 8) and tuple(cache.values[0].shape) == (2, 2, 8, 8), \
        f"the cache was not written in place: the preallocated (2, 2, 8, 8) buffer became {shape} " \
        f"(write into self.keys[layer][:, :, start:end], do not torch.cat a new tensor)"
    assert_equal(cache.keys[0][:, :, :4], keys, "the cache was not written in place: buffer positions 0..3 "
                 "do not hold the keys")
    assert_equal(cache.values[0][:, :, :4], values, "the cache was not written in place: buffer positions 0..3 "
                 "do not hold the values")
    # Whether update returns a view of the buffer (not a torch.cat copy) cannot be seen from here:
    # the grader runs the student's code in a sandbox and every tensor comes back as a copy, so a
    # storage comparison failed for every answer, the key's included. The buffer checks above see
    # the in-place writes; the speed of a view is Chapter 8's benchmark, not a graded property.
    cache.advance()
    assert cache.length == 4, f"after two advances over 3 + 1 positions cache.length is {cache.length}, expected 4"
    with pytest.raises(ValueError, match="8"):
        cache.update(1, torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))


@pytest.mark.graded(UPDATE, weight=2)
def test_your_cache_reproduces_the_full_forward(impl):
    m, ids, full = model_ids_and_logits(1, 2, 10)
    cache = impl.KVCache(CONFIG, 2, 10)
    with torch.no_grad():
        parts = [m(ids[:, :6], cache=cache)] + [m(ids[:, t:t + 1], cache=cache) for t in range(6, 10)]
    assert_close(torch.cat(parts, dim=1), full, "logits of a prefill of 6 + 4 cached decode steps vs one full "
                 "forward pass without a cache")


@pytest.mark.graded(STEP, weight=2, depends=("Exercise 8.1",))
def test_decode_step(impl):
    m, ids, full = model_ids_and_logits(3, 1, 9)
    cache = impl.KVCache(CONFIG, 1, 9)
    first = impl.decode_step(m, ids[:, :6], cache)         # prefill: the last position's logits
    assert first.shape == (1, 61), f"decode_step returned shape {tuple(first.shape)}, expected (batch, vocab) = (1, 61)"
    assert_close(first, full[:, 5], "decode_step after a prefill of 6 tokens: the logits of position 5")
    for t in range(6, 9):                                   # decode: position = tokens cached
        assert_close(impl.decode_step(m, ids[:, t:t + 1], cache), full[:, t], f"decode_step at position {t}")


@pytest.mark.graded(GREEDY, weight=3, depends=("Exercise 8.1", "Exercise 8.2"))
def test_greedy_matches_transformers(impl, hf_llama_and_ours):
    # the same sizes as CONFIG; no EOS in the fixture: all 12 new tokens are compared
    hf, ours = hf_llama_and_ours(seed=5, std=0.3, vocab_size=61, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                                 max_position_embeddings=64)
    prompt = torch.tensor([[3, 14, 15, 9, 2]])
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert expected.shape == (1, 17), "the oracle (transformers) did not generate 12 tokens"
    assert_equal(impl.greedy_generate(ours, prompt, 12), expected,
                 "greedy_generate (prompt + 12 tokens) vs transformers' generate(do_sample=False)")


@pytest.mark.graded(GREEDY, weight=1, depends=("Exercise 8.1", "Exercise 8.2"))
def test_greedy_uses_the_models_config_and_dtype(impl):
    other = LlamaConfig(vocab_size=50, d_model=48, n_layers=3, n_heads=6, n_kv_heads=1, d_ff=64, max_seq_len=32)
    m, ids, _ = model_ids_and_logits(7, 2, 4, config=other)
    m = m.to(torch.bfloat16)
    seq = ids
    with torch.no_grad():
        for _ in range(5):                                  # greedy without a cache: the oracle
            seq = torch.cat([seq, m(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert_equal(impl.greedy_generate(m, ids, 5), seq,
                 "greedy_generate on a bfloat16 model with 3 layers and 1 KV head (build the cache from "
                 "model.config, in the model's dtype) vs greedy decoding without a cache")


def _top_p_by_definition(logits, top_p):
    """Which tokens the docstring's rule keeps, and the mass before each, token by token (float64)."""
    probs = logits.double().softmax(-1).tolist()
    order = sorted(range(len(probs)), key=lambda t: (-probs[t], t))
    kept, before, mass = set(), {}, 0.0
    for t in order:
        before[t] = mass
        if mass < top_p:
            kept.add(t)
        mass += probs[t]
    return kept, before


def _check_top_p(impl, logits, top_p):
    copy = logits.clone()
    out = impl.top_p_filter(logits, top_p)
    assert_equal(logits, copy, "the logits after top_p_filter (return a new tensor; the input must not change)")
    assert out.shape == logits.shape, f"top_p_filter returned shape {tuple(out.shape)}, expected {tuple(logits.shape)}"
    for row in range(logits.shape[0]):
        kept, before = _top_p_by_definition(logits[row], top_p)
        for t in range(logits.shape[1]):
            is_kept = not torch.isinf(out[row, t]).item()
            if is_kept and t not in kept:
                raise AssertionError(f"row {row}: kept token {t} although the mass before it was "
                                     f"{before[t]:.4f} >= p = {top_p}")
            if not is_kept and t in kept:
                raise AssertionError(f"row {row}: removed token {t} although the mass before it was only "
                                     f"{before[t]:.4f} < p = {top_p}")
            if is_kept and out[row, t] != logits[row, t]:
                raise AssertionError(f"row {row}: kept token {t} but changed its logit")


@pytest.mark.graded(TOP_P, weight=2)
def test_top_p_matches_transformers(impl):
    transformers = pytest.importorskip("transformers")
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(6)) * 3
    for top_p in (0.1, 0.5, 0.9, 1.0):
        expected = transformers.TopPLogitsWarper(top_p)(None, logits.clone())
        assert_equal(impl.top_p_filter(logits, top_p).isinf(), expected.isinf(),
                     f"top_p={top_p}: which tokens are removed (True = -inf), vs transformers' TopPLogitsWarper")


@pytest.mark.graded(TOP_P, weight=1)
def test_top_p_hand_example_and_ties(impl):
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).log_softmax(-1)  # probabilities roughly .64 .24 .09 .03
    _check_top_p(impl, logits, 0.8)                                  # .64 < .8 <= .64 + .24: keep two
    _check_top_p(impl, logits, 0.01)                                 # the most likely token always stays
    _check_top_p(impl, torch.zeros(2, 4), 0.5)                       # ties: lower ids first; exactly 0.5 before
    _check_top_p(impl, torch.tensor([[0.0, 3.0, 3.0, 0.0, 3.0]]), 0.4)


@pytest.mark.graded(BYTES, weight=2)
def test_kv_cache_bytes(impl):
    llama2 = PRESETS["llama2-7b"]
    for args, kwargs, expected, what in (
            ((llama2,), {}, 2 * 32 * 32 * 128 * 2, "Llama-2 7B, one token, fp16 (512 KiB)"),
            ((llama2, 4096), {}, 2 * 2**30, "Llama-2 7B, 4096 tokens (2 GiB)"),
            ((PRESETS["llama2-70b"], 1), {}, 2 * 80 * 8 * 128 * 2, "Llama-2 70B, one token (GQA: 8 KV heads)"),
            ((llama2, 10), dict(batch_size=3, bytes_per_value=4), 30 * 2 * 32 * 32 * 128 * 4,
             "Llama-2 7B, 10 tokens x 3 sequences, float32")):
        got = impl.kv_cache_bytes(*args, **kwargs)
        assert got == expected, f"{what}: got {got:,} bytes, expected {expected:,} (keys AND values, every layer)"


@pytest.mark.graded(BEAM, weight=1, kind="homework")
def test_beam_search_worked_example(impl):
    model = ConstantLogits(torch.tensor([0.0, 2.0, 1.0, -1.0]))
    out = impl.beam_search(model, torch.tensor([[3, 0]]), num_beams=2, max_new_tokens=3)
    assert out.tolist() == [[3, 0, 1, 1, 1]], f"the docstring's example: got {out.tolist()}, expected [[3, 0, 1, 1, 1]]"


@pytest.mark.graded(SPEC, weight=1, kind="homework")
def test_speculative_accept_worked_example(impl):
    target = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    out = impl.speculative_accept(target[:2], target, torch.tensor([1, 2]), torch.Generator().manual_seed(0))
    assert out == [1, 2, 2], f"draft == target: both drafts accepted, then the bonus token 2; got {out}"


@pytest.mark.graded(MIN_P, weight=1, kind="homework")
def test_min_p_worked_example(impl):
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = (~impl.min_p_filter(logits, 0.2).isinf()).tolist()
    assert kept == [[True, True, True, False]], f"the docstring's example (threshold 0.1): kept {kept}"
