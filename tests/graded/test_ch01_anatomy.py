"""Graded tests for Chapter 1 (exercises/ch01_anatomy.py).

Oracles: the published shapes and parameter counts of the released checkpoints (LLaMA-1 paper
Table 2; the params.json / config.json of Llama 2, Llama 3 and Mixtral; the parameter totals
reported for their released weights), invariants, and torch's own count of real layer shapes
built on the meta device -- never the reference implementation.
"""

import pytest
import torch
from torch import nn

from llama_course import PRESETS, LlamaConfig

FFN = "Exercise 1.1 ffn_hidden_dim"
COUNT = "Exercise 1.2 count_parameters"


@pytest.mark.graded(FFN, points=2)
def test_ffn_hidden_dim_llama1_and_2_widths(impl):
    # intermediate_size of the released LLaMA-1 / Llama-2 7B, 13B, 33B, 65B checkpoints
    assert impl.ffn_hidden_dim(4096) == 11008
    assert impl.ffn_hidden_dim(5120) == 13824
    assert impl.ffn_hidden_dim(6656) == 17920
    assert impl.ffn_hidden_dim(8192) == 22016


@pytest.mark.graded(FFN, points=2)
def test_ffn_hidden_dim_with_multiplier(impl):
    assert impl.ffn_hidden_dim(8192, multiple_of=4096, ffn_dim_multiplier=1.3) == 28672  # Llama-2 70B
    assert impl.ffn_hidden_dim(4096, multiple_of=1024, ffn_dim_multiplier=1.3) == 14336  # Llama-3 8B
    assert impl.ffn_hidden_dim(4096, 256, 1.0) == 11008  # multiplier 1 changes nothing


@pytest.mark.graded(FFN, points=1)
def test_ffn_hidden_dim_rounds_up_to_the_multiple(impl):
    for d_model in (64, 96, 100, 288, 768, 1000, 2048):
        for multiple_of in (1, 32, 256):
            two_thirds = (8 * d_model) // 3  # = int(2 * 4 * d / 3) for these sizes
            hidden = impl.ffn_hidden_dim(d_model, multiple_of)
            assert hidden % multiple_of == 0, (d_model, multiple_of, hidden)
            assert two_thirds <= hidden < two_thirds + multiple_of, (d_model, multiple_of, hidden)


LLAMA2_7B = {
    "embedding": 131_072_000,
    "attention": 67_108_864,
    "ffn": 135_266_304,
    "norms": 8_192,
    "per_block": 202_383_360,
    "blocks": 6_476_267_520,
    "final_norm": 4_096,
    "lm_head": 131_072_000,
    "total": 6_738_415_616,
}


@pytest.mark.graded(COUNT, points=3)
def test_count_parameters_llama2_7b_part_by_part(impl):
    counts = impl.count_parameters(PRESETS["llama2-7b"])
    assert {key: counts[key] for key in LLAMA2_7B} == LLAMA2_7B
    assert counts["router"] == 0
    assert counts["active"] == counts["total"]


# Totals of the released weights (sum of every tensor in the checkpoint).
PUBLISHED_TOTALS = {
    "llama-7b": 6_738_415_616,
    "llama-13b": 13_015_864_320,
    "llama-33b": 32_528_943_616,
    "llama-65b": 65_285_660_672,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,    # grouped-query attention, 8 KV heads
    "llama3-8b": 8_030_261_248,      # GQA and a 128,256-token vocabulary
    "mixtral-8x7b": 46_702_792_704,  # 8 experts per layer and a router
}


@pytest.mark.graded(COUNT, points=1)
@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_count_parameters_published_totals(impl, name):
    assert impl.count_parameters(PRESETS[name])["total"] == PUBLISHED_TOTALS[name]


@pytest.mark.graded(COUNT, points=1)
def test_count_parameters_mixtral_active(impl):
    counts = impl.count_parameters(PRESETS["mixtral-8x7b"])
    assert round(counts["active"] / 1e9, 1) == 12.9  # "12.9B active parameters" (Jiang et al. 2024)
    assert counts["router"] == 4096 * 8
    everyone = impl.count_parameters(PRESETS["mixtral-8x7b"].replace(n_experts_per_token=8))
    assert everyone["active"] == everyone["total"] == counts["total"]


def _torch_count(config: LlamaConfig) -> int:
    """Build every weight of the model as real torch layers on the meta device and count them."""
    d, hd, V = config.d_model, config.d_model // config.n_heads, config.vocab_size
    with torch.device("meta"):
        parts = [nn.Embedding(V, d), nn.RMSNorm(d)]
        if not config.tie_embeddings:
            parts.append(nn.Linear(d, V, bias=False))
        for _ in range(config.n_layers):
            parts += [nn.RMSNorm(d), nn.RMSNorm(d),
                      nn.Linear(d, config.n_heads * hd, bias=False),
                      nn.Linear(d, config.n_kv_heads * hd, bias=False),
                      nn.Linear(d, config.n_kv_heads * hd, bias=False),
                      nn.Linear(config.n_heads * hd, d, bias=False)]
            if config.n_experts > 1:
                parts.append(nn.Linear(d, config.n_experts, bias=False))
            for _ in range(config.n_experts):
                parts += [nn.Linear(d, config.d_ff, bias=False), nn.Linear(d, config.d_ff, bias=False),
                          nn.Linear(config.d_ff, d, bias=False)]
    return sum(p.numel() for part in parts for p in part.parameters())


SMALL = [
    LlamaConfig(vocab_size=100, d_model=64, n_layers=2, n_heads=4),
    LlamaConfig(vocab_size=257, d_model=96, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=200),
    LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=8, n_kv_heads=1, tie_embeddings=True),
    LlamaConfig(vocab_size=64, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=80,
                n_experts=4, n_experts_per_token=2),
]


@pytest.mark.graded(COUNT, points=1)
@pytest.mark.parametrize("config", SMALL, ids=["mha", "gqa", "mqa-tied", "moe"])
def test_count_parameters_matches_real_layers(impl, config):
    assert impl.count_parameters(config)["total"] == _torch_count(config)


@pytest.mark.graded(COUNT, points=1)
def test_count_parameters_parts_add_up(impl):
    for config in SMALL + [PRESETS["llama3-8b"], PRESETS["mixtral-8x7b"]]:
        c = impl.count_parameters(config)
        assert c["per_block"] == c["attention"] + c["ffn"] + c["router"] + c["norms"]
        assert c["blocks"] == config.n_layers * c["per_block"]
        assert c["total"] == c["embedding"] + c["blocks"] + c["final_norm"] + c["lm_head"]


@pytest.mark.graded(COUNT, points=1)
def test_count_parameters_gqa_never_more_than_mha(impl):
    mha = PRESETS["llama2-70b"].replace(n_kv_heads=64)
    totals = [impl.count_parameters(mha.replace(n_kv_heads=h))["total"] for h in (64, 32, 16, 8, 4, 2, 1)]
    assert all(a > b for a, b in zip(totals, totals[1:])), totals  # fewer KV heads, fewer parameters


@pytest.mark.graded(COUNT, points=1)
def test_count_parameters_tied_embeddings_drop_the_head(impl):
    untied = impl.count_parameters(PRESETS["llama2-7b"])
    tied = impl.count_parameters(PRESETS["llama2-7b"].replace(tie_embeddings=True))
    assert tied["lm_head"] == 0
    assert tied["embedding"] == untied["embedding"]
    assert untied["total"] - tied["total"] == 32000 * 4096
