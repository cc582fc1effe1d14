"""Sliding-window attention (Chapter 12): the banded mask, the rolling-buffer cache, Mistral and
Qwen3 (local/global layers) equal to transformers."""

import pytest
import torch

from llama_course import KVCache, LlamaConfig, generate
from llama_course.attention import causal_mask
from llama_course.checkpoint import load_hf
from llama_course.cost import kv_cache_bytes
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Llama
from llama_course.sliding_window import banded_mask, sliding_window_mask

transformers = pytest.importorskip("transformers")


def test_banded_mask_from_the_definition():
    # oracle: query i sees key j exactly when i - W < j <= i, written out with loops
    for q_len, kv_len, window in [(6, 6, 3), (2, 9, 4), (1, 5, 2), (5, 5, 8)]:
        expected = torch.tensor([[kv_len - q_len + i - window < j <= kv_len - q_len + i for j in range(kv_len)]
                                 for i in range(q_len)])
        assert torch.equal(banded_mask(q_len, window, kv_len), expected)
    assert torch.equal(banded_mask(7, 7, 7), causal_mask(7))          # a window as long as the text: causal
    assert banded_mask(10, 3).sum(-1).tolist() == [1, 2] + [3] * 8     # never more than W keys
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(torch.arange(3), torch.arange(3), 0)


def _mistral(tmp_path, window, seed=0, **extra):
    config = transformers.MistralConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, sliding_window=window,
                                        max_position_embeddings=128, attn_implementation="eager", pad_token_id=0,
                                        **extra)
    torch.manual_seed(seed)
    hf = transformers.MistralForCausalLM(config).eval()
    realistic_weights_(hf, std=0.2)
    hf.generation_config.eos_token_id = None
    hf.save_pretrained(tmp_path)
    return hf, load_hf(tmp_path)


def test_mistral_window_shorter_than_the_text_matches_transformers(tmp_path):
    hf, ours = _mistral(tmp_path, window=5)
    assert ours.config.sliding_window == 5
    ids = torch.randint(1, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :4] = 0                                                    # left padding
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        got = ours(ids, attention_mask=mask)
        # the window matters: a plain causal model on the same weights differs
        causal = Llama(ours.config.replace(sliding_window=None, attention="full"))
        causal.load_state_dict(ours.state_dict())
        far = causal(ids, attention_mask=mask)
    real = mask.bool()
    assert (got - expected)[real].abs().max() <= 1e-5
    assert (far - expected)[real].abs().max() > 1e-2


def test_mistral_cached_decode_past_the_window_matches_transformers(tmp_path):
    hf, ours = _mistral(tmp_path, window=4, seed=3)
    ids = torch.randint(1, 97, (2, 15), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 15, dtype=torch.long)
    mask[0, :2] = 0
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        cache = KVCache(ours.config, 2, 15)
        assert cache.rolling == [True] * 3                                          # every layer slides
        steps = [ours(ids[:, :6], cache=cache, attention_mask=mask[:, :6])]      # prefill longer than W
        for t in range(6, 15):                                                   # decode 9 tokens past it
            steps.append(ours(ids[:, t:t + 1], cache=cache, attention_mask=mask[:, :t + 1]))
    got = torch.cat(steps, dim=1)
    assert (got - expected)[mask.bool()].abs().max() <= 1e-5
    assert cache.keys[0].shape[-2] == 4                                          # W slots, not 15


def test_mistral_greedy_generation_token_for_token(tmp_path):
    hf, ours = _mistral(tmp_path, window=3, seed=5)
    prompt = torch.randint(1, 97, (1, 5), generator=torch.Generator().manual_seed(4))
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False)
    assert torch.equal(generate(ours, prompt, 12), expected)


def test_qwen3_local_and_global_layers_match_transformers(tmp_path):
    # Gemma-style mixing: sliding layers and full layers in one model, oracle transformers' Qwen3
    layer_types = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
    config = transformers.Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      use_sliding_window=True, sliding_window=4, layer_types=layer_types,
                                      max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(6)
    hf = transformers.Qwen3ForCausalLM(config).eval()
    realistic_weights_(hf, std=0.2)
    hf.save_pretrained(tmp_path)
    ours = load_hf(tmp_path)
    assert ours.config.layer_types == tuple(layer_types)
    ids = torch.randint(0, 97, (1, 14), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = hf(ids).logits
        cache = KVCache(ours.config, 1, 14)
        steps = [ours(ids[:, :5], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(5, 14)]
    torch.testing.assert_close(ours(ids).detach(), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-5)
    assert [k.shape[-2] for k in cache.keys] == [4, 4, 14, 4]                     # only the global layer grows


def _tiny(window=4, **extra):
    return LlamaConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64,
                       sliding_window=window, **extra)


def test_cache_bytes_after_4w_tokens_equal_those_after_w():
    torch.manual_seed(0)
    model = Llama(_tiny(window=4)).eval()
    cache = KVCache(model.config, 1, 64)
    token = torch.tensor([[3]])
    sizes = {}
    with torch.no_grad():
        for t in range(1, 16 + 1):
            model(token, cache=cache)
            if t in (4, 16):
                sizes[t] = cache.nbytes()
    full = KVCache(_tiny(window=None), 1, 64)
    assert sizes[4] == sizes[16] == 2 * 2 * 1 * 2 * 4 * 8 * 4                 # K,V x layers x B x H_kv x W x hd x 4 B
    assert full.nbytes() == sizes[4] * 64 // 4                                 # the full cache holds all 64 positions
    assert kv_cache_bytes(_tiny(window=4), seq_len=16, bytes_per_value=4) == sizes[16]


def test_rolling_cache_equals_a_full_cache_with_the_banded_mask():
    # one chunk at a time, of uneven sizes, against a full forward of the whole sequence
    torch.manual_seed(1)
    model = Llama(_tiny(window=3)).eval()
    ids = torch.randint(0, 50, (2, 13), generator=torch.Generator().manual_seed(2))
    cache = KVCache(model.config, 2, 13)
    with torch.no_grad():
        expected = model(ids)
        pieces, start = [], 0
        for size in (5, 1, 4, 1, 2):
            pieces.append(model(ids[:, start:start + size], cache=cache))
            start += size
    torch.testing.assert_close(torch.cat(pieces, 1), expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="cropped"):
        cache.crop(3)


def test_kv_cache_bytes_of_mistral_stop_at_the_window():
    from llama_course import PRESETS
    mistral = PRESETS["mistral-7b"]
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(mistral, 1000) == 1000 * per_token
    assert kv_cache_bytes(mistral, 4096) == kv_cache_bytes(mistral, 32768) == 4096 * per_token
    gemma_like = _tiny(window=4, layer_types=("sliding_attention", "full_attention"))
    assert kv_cache_bytes(gemma_like, 10, bytes_per_value=1) == 2 * 2 * 8 * (4 + 10)


def test_config_checks_layer_types():
    with pytest.raises(ValueError, match="layer_types"):
        _tiny(layer_types=("sliding_attention",))
    with pytest.raises(ValueError, match="sliding_window"):
        _tiny(window=None, layer_types=("sliding_attention", "full_attention"))
