"""The whole model: presets on the meta device, bad input, hooks, numerics in every dtype (loading
checkpoints, and their logits against transformers, is in test_checkpoint.py)."""

import pytest
import torch

from llama_course import PRESETS, LlamaConfig, count_parameters
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Llama


@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"deepseek-v3"}))  # DeepSeek-V3: the next test
def test_presets_on_meta_allocate_nothing_and_count_right(name):
    with torch.device("meta"):
        model = Llama(PRESETS[name])
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == count_parameters(PRESETS[name])["total"]


def test_deepseek_v3_on_meta_counts_right_one_block_of_each_kind_times_its_layers():
    """DeepSeek-V3 whole on meta is ~47,000 expert modules (most of a minute). A block is made from
    the config and its layer's kind alone, so build one model with a block of each kind (3 dense,
    1 DeepSeekMoE), count each block and what lies outside the blocks, and multiply by the full
    model's layers of each kind: the full count, against count_parameters (671,026,404,352, the
    published 671B, in tests/unit/test_deepseek.py)."""
    full = PRESETS["deepseek-v3"]
    kinds = [full.ffn_kind(i) for i in range(full.n_layers)]
    assert kinds == ["dense"] * 3 + ["deepseek_moe"] * 58
    small = full.replace(n_layers=4)
    with torch.device("meta"):
        model = Llama(small)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == count_parameters(small)["total"]
    per_block = [sum(p.numel() for p in block.parameters()) for block in model.layers]
    assert per_block[0] == per_block[1] == per_block[2] != per_block[3]     # the three dense blocks alike
    outside = sum(p.numel() for p in model.parameters()) - sum(per_block)  # embedding, final norm, head
    by_kind = {"dense": per_block[0], "deepseek_moe": per_block[3]}
    assert outside + sum(by_kind[k] for k in kinds) == count_parameters(full)["total"] == 671_026_404_352


def test_meta_forward_shapes_of_llama2_7b():
    with torch.device("meta"):
        model = Llama(PRESETS["llama2-7b"])
        logits = model(torch.zeros(1, 6, dtype=torch.long))
    assert logits.shape == (1, 6, 32000) and logits.device.type == "meta"


def test_tied_head_is_one_matrix():
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, tie_embeddings=True))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == count_parameters(model.config)["total"]


def test_bad_input():
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    with pytest.raises(TypeError, match="input_ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="input_ids"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids must be in \[0, 50\) \(the vocabulary\), got 50"):
        model(torch.tensor([[1, 50]]))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3, dtype=torch.long))


def test_forward_hooks_fire_on_every_projection_of_a_block():
    for config in (LlamaConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1),
                   LlamaConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, n_experts=3, n_experts_per_token=3)):
        model = Llama(config)
        fired = []
        linears = [name for name, m in model.layers[0].named_modules() if isinstance(m, torch.nn.Linear)]
        for name in linears:
            model.layers[0].get_submodule(name).register_forward_hook(lambda m, a, o, name=name: fired.append(name))
        model(torch.tensor([[1, 2, 3]]))
        assert sorted(fired) == sorted(linears) and len(linears) == 4 + 1 + 3 * config.n_experts - (
            config.n_experts == 1)                      # q, k, v, o (+ the router) + 3 per expert


def test_float64_model_is_float64_accurate():
    """Cached decode and the full forward of a float64 model agree to float64 rounding (float32 rounding
    anywhere on the way -- softmax, norms, RoPE's product -- would leave ~1e-7)."""
    from llama_course.kv_cache import KVCache

    config = LlamaConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)
    torch.manual_seed(0)
    model = Llama(config, dtype=torch.float64).eval()
    realistic_weights_(model, std=0.3)
    ids = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(config, 2, 10, dtype=torch.float64)
        parts = [model(ids[:, :6], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(6, 10)]
    assert full.dtype == torch.float64
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-12)


def test_float16_model_forward_is_finite():
    """Queries and keys of 192 per feature: q . k = 16 * 192^2 = 589,824, beyond float16's 65,504."""
    config = LlamaConfig(vocab_size=20, d_model=64, n_layers=1, n_heads=4, d_ff=64)
    model = Llama(config, dtype=torch.float16).eval()
    with torch.no_grad():
        model.embed_tokens.weight.fill_(1.0)
        for name, p in model.layers[0].named_parameters():
            if name.endswith("_proj.weight"):
                p.fill_(3.0 if "self_attn" in name else 0.01)
        logits = model(torch.tensor([[1, 2, 3, 4]]))
    assert torch.isfinite(logits).all()


def test_attention_mask_values_and_mixed_devices_are_rejected():
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    ids = torch.tensor([[1, 2, 3]])
    for bad in ([[1, 2, 1]], [[-1, 1, 1]]):      # would shift the RoPE positions silently
        with pytest.raises(ValueError, match="attention_mask must hold only 0"):
            model(ids, attention_mask=torch.tensor(bad))
    with pytest.raises(ValueError, match="one device"):
        model(ids.to("meta"))
