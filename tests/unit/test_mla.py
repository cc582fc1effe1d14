"""Multi-head Latent Attention (Chapter 12): the absorbed form equals the naive one, the cache
holds only the latent and the rope key, and one MLA layer equals transformers' DeepseekV3Attention."""

import pytest
import torch

from llama_course import KVCache, LlamaConfig
from llama_course.attention import causal_mask
from llama_course.cost import kv_cache_bytes
from llama_course.mla import MultiHeadLatentAttention
from llama_course.rope import RotaryEmbedding

transformers = pytest.importorskip("transformers")


def _config(**changes):
    sizes = dict(vocab_size=40, d_model=48, n_layers=2, n_heads=4, q_lora_rank=24, kv_lora_rank=16,
                 qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, max_seq_len=32)
    return LlamaConfig(**{**sizes, **changes})


def _mla(config, seed=0):
    torch.manual_seed(seed)
    rope = RotaryEmbedding(config.qk_rope_head_dim, config.max_seq_len, layout="interleaved")
    mla = MultiHeadLatentAttention(config, position_hook=rope)
    with torch.no_grad():
        for name, p in mla.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
    return mla


@pytest.mark.parametrize("q_lora_rank", [24, None], ids=["low-rank-q", "full-q"])
def test_absorbed_equals_naive(q_lora_rank):
    mla = _mla(_config(q_lora_rank=q_lora_rank))
    x = torch.randn(2, 7, 48, generator=torch.Generator().manual_seed(1))
    q_nope, q_pe = mla.queries(x)
    c_kv, k_pe = mla.latents(x)
    mask = causal_mask(7)
    naive = mla.naive(q_nope, q_pe, c_kv, k_pe, mask)
    absorbed = mla.absorbed(q_nope, q_pe, c_kv, k_pe, mask)
    assert naive.shape == absorbed.shape == (2, 4, 7, 10)
    torch.testing.assert_close(absorbed, naive, rtol=0, atol=1e-5)


def test_cached_decode_absorbed_equals_full_naive_forward():
    config = _config()
    mla = _mla(config, seed=2)
    x = torch.randn(1, 9, 48, generator=torch.Generator().manual_seed(3))
    mla.form = "naive"
    with torch.no_grad():
        expected = mla(x)
        cache = KVCache(config.replace(n_layers=1), 1, 9)
        assert cache.keys[0].shape == (1, 1, 9, config.kv_lora_rank)          # the latents c_kv
        assert cache.values[0].shape == (1, 1, 9, config.qk_rope_head_dim)    # the shared rope keys k_pe
        mla.form = "auto"                                    # naive prefill, absorbed decode steps
        steps = [mla(x[:, :4], cache=cache)]
        cache.advance()
        for t in range(4, 9):
            steps.append(mla(x[:, t:t + 1], cache=cache))
            cache.advance()
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-5)
    # the cache holds (r + d_r) numbers per token and layer: the latent and the one rope key
    assert cache.keys[0].shape == (1, 1, 9, 16) and cache.values[0].shape == (1, 1, 9, 8)


def test_mla_layer_equals_transformers_deepseek_v3_attention():
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
    hf_config = transformers.DeepseekV3Config(hidden_size=48, num_attention_heads=4, num_key_value_heads=4,
                                              q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12,
                                              qk_rope_head_dim=8, v_head_dim=10, max_position_embeddings=32,
                                              rope_interleave=True, attn_implementation="eager")
    reference = ds.DeepseekV3Attention(hf_config, layer_idx=0).eval()
    ours = _mla(_config(), seed=4)
    reference.load_state_dict(ours.state_dict())                       # the same names, the same shapes
    x = torch.randn(2, 6, 48, generator=torch.Generator().manual_seed(5))
    positions = torch.arange(6)[None].expand(2, 6)
    cos, sin = ds.DeepseekV3RotaryEmbedding(hf_config)(x, positions)
    additive = torch.zeros(6, 6).masked_fill(~causal_mask(6), float("-inf"))
    with torch.no_grad():
        expected, _ = reference(x, (cos, sin), additive[None, None])
        got = ours(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_rope_cannot_be_absorbed():
    # q.R_m^T R_n k depends on m and n; (W^T R_m q) . c with one folded matrix would not: show the
    # scores of a rotated pair change with the positions while the absorbed nope part does not move
    mla = _mla(_config(), seed=6)
    x = torch.randn(1, 2, 48, generator=torch.Generator().manual_seed(7))
    q_nope, q_pe = mla.queries(x)
    c_kv, k_pe = mla.latents(x)
    rope = mla.position_hook
    scores = []
    for start in (0, 5):
        q_rot, k_rot = rope(q_pe, k_pe, torch.tensor([start, start + 1]))
        scores.append((q_rot[:, :, 1] * k_rot[:, :, 0]).sum(-1))       # query at start+1, key at start
    torch.testing.assert_close(scores[0], scores[1], rtol=1e-5, atol=1e-5)   # relative distance only
    q_rot, k_rot = rope(q_pe, k_pe, torch.tensor([0, 3]))
    assert not torch.allclose((q_rot[:, :, 1] * k_rot[:, :, 0]).sum(-1), scores[0], atol=1e-3)


def test_latent_cache_bytes_deepseek_v3():
    from llama_course import PRESETS
    v3 = PRESETS["deepseek-v3"]
    assert kv_cache_bytes(v3) == (512 + 64) * 61 * 2 == 70_272
    with torch.device("meta"):
        cache = KVCache(v3, 1, 100, dtype=torch.bfloat16)
    assert cache.nbytes() == kv_cache_bytes(v3, 100)


def test_config_checks_mla_fields():
    with pytest.raises(ValueError, match="v_head_dim"):
        LlamaConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, kv_lora_rank=8, qk_nope_head_dim=4,
                    qk_rope_head_dim=4)
    with pytest.raises(ValueError, match="head_dim"):
        _config(head_dim=16)
    assert _config().head_dim == 8


@pytest.mark.parametrize("form", ["naive", "absorbed"])
def test_both_forms_attend_with_chapter_4s_function_and_mlas_scale(form, monkeypatch):
    # MLA has no softmax of its own: both forms call attention.scaled_dot_product_attention with
    # the scale 1 / sqrt(d_n + d_r), not the 1 / sqrt(width of q) the function would default to.
    import llama_course.mla as mla_module
    from llama_course import attention

    calls = []

    def spy(q, k, v, mask=None, backend="explicit", scale=None):
        calls.append((q.shape[-1], v.shape[-1], scale))
        return attention.scaled_dot_product_attention(q, k, v, mask, backend, scale=scale)

    config = _config()
    mla = _mla(config)
    mla.form = form
    x = torch.randn(2, 5, config.d_model, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = mla(x)
        monkeypatch.setattr(mla_module, "scaled_dot_product_attention", spy)
        torch.testing.assert_close(mla(x), expected, atol=0, rtol=0)
    width = config.qk_nope_head_dim + config.qk_rope_head_dim
    q_width = width if form == "naive" else config.kv_lora_rank + config.qk_rope_head_dim
    v_width = config.v_head_dim if form == "naive" else config.kv_lora_rank
    assert calls == [(q_width, v_width, pytest.approx(width ** -0.5))]
