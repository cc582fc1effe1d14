"""Grouped-query attention: the shared-KV path equals the repeat path, mha_to_gqa, and Qwen3."""

import json

import pytest
import torch
import torch.nn.functional as F

from llama_course import LlamaConfig, count_parameters
from llama_course.attention import causal_mask, padding_mask
from llama_course.checkpoint import load_hf
from llama_course.gqa import gqa_attention, mha_to_gqa, repeat_kv
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Attention

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1], ids=["mha", "gqa4", "gqa2", "mqa"])
@pytest.mark.parametrize("backend", ["explicit", "sdpa"])
def test_shared_kv_path_equals_repeat_path(device, n_kv_heads, backend):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 5, 16, generator=g).to(device)
    k, v = (torch.randn(2, n_kv_heads, 7, 16, generator=g).to(device) for _ in range(2))
    padding = padding_mask(torch.tensor([[0, 1, 1, 1, 1, 1, 1], [1] * 7], device=device))
    mask = causal_mask(5, 7, device=device) & padding
    rep = 8 // n_kv_heads  # the oracle: torch's attention on explicitly repeated heads (no row is fully masked)
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              attn_mask=mask)
    torch.testing.assert_close(gqa_attention(q, k, v, mask, backend=backend), expected, rtol=1e-5, atol=1e-5)


def test_repeat_kv_matches_transformers():
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = torch.randn(2, 3, 5, 4)
    assert torch.equal(repeat_kv(x, 4), modeling_llama.repeat_kv(x, 4))


def test_mha_to_gqa_pools_each_group():
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4)
    mha = Attention(config)
    pooled = mha_to_gqa({k: v.detach() for k, v in mha.state_dict().items()}, 4, 2)
    w = mha.k_proj.weight.detach().view(4, 8, 32)
    torch.testing.assert_close(pooled["k_proj.weight"][8:16], (w[2] + w[3]) / 2)
    gqa = Attention(config.replace(n_kv_heads=2))
    gqa.load_state_dict(pooled)
    same = mha_to_gqa(dict(mha.state_dict()), 4, 4)  # pooling groups of one changes nothing
    assert all(torch.equal(same[k], v) for k, v in mha.state_dict().items())
    with pytest.raises(ValueError, match="n_kv_heads"):
        mha_to_gqa(pooled, 4, 3)


def test_qwen3_logits_match_transformers(tmp_path, device):
    config = transformers.Qwen3Config(vocab_size=151, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                      max_position_embeddings=128, rope_theta=1_000_000.0, tie_word_embeddings=True,
                                      rms_norm_eps=1e-6, attn_implementation="eager")
    torch.manual_seed(2)
    reference = transformers.Qwen3ForCausalLM(config).eval()
    realistic_weights_(reference, std=0.2)
    reference.save_pretrained(tmp_path)
    ours = load_hf(tmp_path, device=device)
    assert ours.config.qk_norm and ours.config.head_dim == 32 and ours.config.tie_embeddings
    assert sum(p.numel() for p in ours.parameters()) == count_parameters(ours.config)["total"] == \
        sum(p.numel() for p in reference.parameters())
    ids = torch.randint(0, 151, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids.to(device)).cpu(), reference(ids).logits, rtol=1e-5, atol=1e-5)


def test_checkpoint_kv_shapes_must_match_the_config(tmp_path):
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["num_key_value_heads"] = 4
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"k_proj.weight: file \(16, 32\), model \(32, 32\)"):
        load_hf(tmp_path)
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4, n_kv_heads=0)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_backends_agree_on_nan(causal):
    """Four query heads share two K/V heads: a NaN key of K/V head 1 makes NaN every output of
    query heads 2 and 3 that sees it, in both backends (the fused kernels alone would give zeros)."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 3, 8, generator=g)
    k, v = (torch.randn(1, 2, 3, 8, generator=g) for _ in range(2))
    k[0, 1, 1, 2] = float("nan")
    mask = causal_mask(3) if causal else None
    for backend in ("explicit", "sdpa"):
        out = gqa_attention(q, k, v, mask, backend)
        seen = slice(1, None) if causal else slice(None)  # query 0 cannot see key 1 when causal (the kernels
        assert out[0, 2:, seen].isnan().all(), backend      # may still give NaN there, as in test_attention)
        assert not out[0, :2].isnan().any(), backend
