"""Graded tests for Chapter 1 (exercises/ch01_anatomy.py).

Oracles: the published shapes and parameter counts of the released checkpoints (LLaMA-1 paper
Table 2; the params.json / config.json of Llama 2, Llama 3 and Mixtral; the parameter totals
reported for their released weights) and invariants -- never the reference implementation.
(tests/hidden also counts real torch layers built on the meta device.)
"""

import pytest

from llama_course import PRESETS, LlamaConfig

FFN = "Exercise 1.1 ffn_hidden_dim"
COUNT = "Exercise 1.2 count_parameters"


@pytest.mark.graded(FFN, weight=2)
def test_ffn_hidden_dim_llama1_and_2_widths(impl):
    # intermediate_size of the released LLaMA-1 / Llama-2 7B, 13B, 33B, 65B checkpoints
    for d_model, published in ((4096, 11008), (5120, 13824), (6656, 17920), (8192, 22016)):
        got = impl.ffn_hidden_dim(d_model)
        assert got == published, f"ffn_hidden_dim({d_model}) = {got}, but the released checkpoint has {published}"


@pytest.mark.graded(FFN, weight=2)
def test_ffn_hidden_dim_with_multiplier(impl):
    cases = (((8192, 4096, 1.3), 28672, "Llama-2 70B"), ((4096, 1024, 1.3), 14336, "Llama-3 8B"),
             ((4096, 256, 1.0), 11008, "a multiplier of 1 changes nothing"))
    for args, published, what in cases:
        got = impl.ffn_hidden_dim(*args)
        assert got == published, f"ffn_hidden_dim{args} = {got}, expected {published} ({what})"


@pytest.mark.graded(FFN, weight=1)
def test_ffn_hidden_dim_rounds_up_to_the_multiple(impl):
    for d_model in (64, 96, 100, 288, 768, 1000, 2048):
        for multiple_of in (1, 32, 256):
            two_thirds = (8 * d_model) // 3  # = int(2 * 4 * d / 3) for these sizes
            hidden = impl.ffn_hidden_dim(d_model, multiple_of)
            assert hidden % multiple_of == 0, \
                f"ffn_hidden_dim({d_model}, {multiple_of}) = {hidden} is not a multiple of {multiple_of}"
            assert two_thirds <= hidden < two_thirds + multiple_of, \
                f"ffn_hidden_dim({d_model}, {multiple_of}) = {hidden}: expected 8*d/3 = {two_thirds} rounded UP " \
                f"to the next multiple of {multiple_of}"


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


@pytest.mark.graded(COUNT, weight=3)
def test_count_parameters_llama2_7b_part_by_part(impl):
    counts = impl.count_parameters(PRESETS["llama2-7b"])
    for key, published in LLAMA2_7B.items():
        assert counts.get(key) == published, f"Llama-2 7B {key!r}: got {counts.get(key)}, expected {published:,}"
    assert counts["router"] == 0, f"a dense model has no router, got router = {counts['router']}"
    assert counts["active"] == counts["total"], "in a dense model every parameter is active: active != total"


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


@pytest.mark.graded(COUNT, weight=1)
@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_count_parameters_published_totals(impl, name):
    total = impl.count_parameters(PRESETS[name])["total"]
    assert total == PUBLISHED_TOTALS[name], \
        f"{name}: total {total:,}, but the released weights hold {PUBLISHED_TOTALS[name]:,} parameters"


@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_mixtral_active(impl):
    counts = impl.count_parameters(PRESETS["mixtral-8x7b"])
    assert round(counts["active"] / 1e9, 1) == 12.9, \
        f"Mixtral active = {counts['active']:,}; Jiang et al. 2024 report 12.9B active parameters"
    assert counts["router"] == 4096 * 8, f"Mixtral's router is 4096 x 8 per block, got {counts['router']}"
    everyone = impl.count_parameters(PRESETS["mixtral-8x7b"].replace(n_experts_per_token=8))
    assert everyone["active"] == everyone["total"] == counts["total"], \
        "with n_experts_per_token = n_experts every expert runs, so active must equal total"


SMALL = [
    LlamaConfig(vocab_size=100, d_model=64, n_layers=2, n_heads=4),
    LlamaConfig(vocab_size=257, d_model=96, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=200),
    LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=8, n_kv_heads=1, tie_embeddings=True),
    LlamaConfig(vocab_size=64, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=80,
                n_experts=4, n_experts_per_token=2),
]


@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_parts_add_up(impl):
    for config in SMALL + [PRESETS["llama3-8b"], PRESETS["mixtral-8x7b"]]:
        c = impl.count_parameters(config)
        assert c["per_block"] == c["attention"] + c["ffn"] + c["router"] + c["norms"], \
            f"{config}: per_block != attention + ffn + router + norms"
        assert c["blocks"] == config.n_layers * c["per_block"], f"{config}: blocks != n_layers * per_block"
        assert c["total"] == c["embedding"] + c["blocks"] + c["final_norm"] + c["lm_head"], \
            f"{config}: total != embedding + blocks + final_norm + lm_head"
        assert all(type(v) is int for v in c.values()), f"every count must be a Python int, got {c}"


@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_gqa_never_more_than_mha(impl):
    mha = PRESETS["llama2-70b"].replace(n_kv_heads=64)
    totals = [impl.count_parameters(mha.replace(n_kv_heads=h))["total"] for h in (64, 32, 16, 8, 4, 2, 1)]
    assert all(a > b for a, b in zip(totals, totals[1:])), \
        f"fewer KV heads must mean fewer parameters; totals for 64, 32, ..., 1 KV heads: {totals}"


@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_tied_embeddings_drop_the_head(impl):
    untied = impl.count_parameters(PRESETS["llama2-7b"])
    tied = impl.count_parameters(PRESETS["llama2-7b"].replace(tie_embeddings=True))
    assert tied["lm_head"] == 0, f"a tied head stores no matrix of its own, got lm_head = {tied['lm_head']}"
    assert tied["embedding"] == untied["embedding"], "tying does not change the embedding"
    assert untied["total"] - tied["total"] == 32000 * 4096, "tying must save exactly vocab_size * d_model"


@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_qk_norm_adds_two_head_norms(impl):
    plain = PRESETS["llama3-8b"]
    counts, with_qk = impl.count_parameters(plain), impl.count_parameters(plain.replace(qk_norm=True))
    assert with_qk["norms"] - counts["norms"] == 2 * plain.head_dim, \
        "qk_norm adds one query RMSNorm and one key RMSNorm of head_dim weights to each block's norms"
    assert with_qk["total"] - counts["total"] == plain.n_layers * 2 * plain.head_dim, "qk_norm: wrong total"
