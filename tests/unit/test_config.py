"""LlamaConfig validation and the presets' published shapes (the counts are graded in
tests/graded/test_ch01_anatomy.py, which `make test` also runs with --impl=package)."""

import subprocess
import sys

import pytest

from llama_course import PRESETS, LlamaConfig, ffn_hidden_dim

BASE = dict(vocab_size=100, d_model=64, n_layers=2, n_heads=4)


def test_defaults_resolve():
    config = LlamaConfig(**BASE)
    assert config.n_kv_heads == 4 and config.head_dim == 16
    assert config.d_ff == 256  # int(2 * 256 / 3) = 170, rounded up to 256
    assert config.n_experts == 1 and config.n_experts_per_token == 1 and config.tie_embeddings is False


@pytest.mark.parametrize("field, value, message", [
    ("n_heads", 5, "n_heads"),
    ("n_kv_heads", 3, "n_kv_heads"),
    ("d_model", 0, "d_model"),
    ("vocab_size", -1, "vocab_size"),
    ("n_layers", 0, "n_layers"),
    ("d_ff", 0, "d_ff"),
    ("max_seq_len", 0, "max_seq_len"),
    ("norm_eps", 0.0, "norm_eps"),
    ("rope_theta", -1.0, "rope_theta"),
    ("n_experts_per_token", 2, "n_experts_per_token"),
    ("ffn_dim_multiplier", 0.0, "ffn_dim_multiplier"),
])
def test_bad_values_raise_value_error_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        LlamaConfig(**{**BASE, field: value})


@pytest.mark.parametrize("field, value", [
    ("d_model", 64.0), ("n_heads", "4"), ("n_layers", True), ("norm_eps", "1e-5"), ("tie_embeddings", 1),
])
def test_wrong_types_raise_type_error_naming_the_field(field, value):
    with pytest.raises(TypeError, match=field):
        LlamaConfig(**{**BASE, field: value})


def test_ffn_hidden_dim_rejects_bad_input():
    with pytest.raises(ValueError, match="d_model"):
        ffn_hidden_dim(0)
    with pytest.raises(ValueError, match="multiple_of"):
        ffn_hidden_dim(4096, multiple_of=0)
    with pytest.raises(TypeError, match="d_model"):
        ffn_hidden_dim(4096.0)


def test_replace_validates_again():
    with pytest.raises(ValueError, match="n_kv_heads"):
        PRESETS["llama2-7b"].replace(n_kv_heads=5)
    assert PRESETS["llama2-7b"].replace(n_kv_heads=8).n_kv_heads == 8


# Shapes from LLaMA-1 Table 2 and the released params.json / config.json files.
PUBLISHED = {
    #               d_model layers heads kv  d_ff   vocab   max_seq
    "llama-7b":     (4096, 32, 32, 32, 11008, 32000, 2048),
    "llama-13b":    (5120, 40, 40, 40, 13824, 32000, 2048),
    "llama-33b":    (6656, 60, 52, 52, 17920, 32000, 2048),
    "llama-65b":    (8192, 80, 64, 64, 22016, 32000, 2048),
    "llama2-7b":    (4096, 32, 32, 32, 11008, 32000, 4096),
    "llama2-13b":   (5120, 40, 40, 40, 13824, 32000, 4096),
    "llama2-70b":   (8192, 80, 64, 8, 28672, 32000, 4096),
    "llama3-8b":    (4096, 32, 32, 8, 14336, 128256, 8192),
    "mixtral-8x7b": (4096, 32, 32, 8, 14336, 32000, 32768),
    "mistral-7b":   (4096, 32, 32, 8, 14336, 32000, 32768),
    "deepseek-v3":  (7168, 61, 128, 128, 18432, 129280, 4096),   # d_ff: the dense first layers' width
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_have_the_published_shapes(name):
    c = PRESETS[name]
    assert (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff, c.vocab_size, c.max_seq_len) == PUBLISHED[name]


def test_preset_details():
    assert set(PRESETS) == set(PUBLISHED)
    assert PRESETS["llama3-8b"].rope_theta == 500000.0
    assert PRESETS["mixtral-8x7b"].rope_theta == 1e6
    assert (PRESETS["mixtral-8x7b"].n_experts, PRESETS["mixtral-8x7b"].n_experts_per_token) == (8, 2)
    assert PRESETS["llama-7b"].norm_eps == 1e-6 and PRESETS["llama2-7b"].norm_eps == 1e-5
    assert all(c.head_dim == 128 for n, c in PRESETS.items() if n != "deepseek-v3")
    assert PRESETS["deepseek-v3"].head_dim == 64   # MLA: qk_rope_head_dim, the shared RoPE key's width


@pytest.mark.slow
def test_import_does_not_pull_in_plotting_or_jupyter():
    code = ("import sys, llama_course; "
            "print(sorted(m for m in ('matplotlib', 'IPython', 'jupyter_client', 'pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_non_finite_numbers_and_numpy_integers():
    import numpy as np

    base = dict(vocab_size=10, d_model=8, n_layers=1, n_heads=2)
    for field in ("norm_eps", "rope_theta"):
        with pytest.raises(ValueError, match=f"{field} must be a finite number > 0"):
            LlamaConfig(**base, **{field: float("inf")})
    config = LlamaConfig(vocab_size=np.int64(10), d_model=np.int32(8), n_layers=1, n_heads=2)
    assert config.vocab_size == 10 and type(config.vocab_size) is int and config.head_dim == 4
    with pytest.raises(TypeError, match="n_layers must be an int"):
        LlamaConfig(**{**base, "n_layers": np.float64(1.0)})
    with pytest.raises(ValueError, match="ffn_dim_multiplier must be a finite number > 0"):
        ffn_hidden_dim(64, ffn_dim_multiplier=float("inf"))


def test_each_layer_kind_is_declared_never_guessed():
    base = dict(vocab_size=8, d_model=8, n_layers=3, n_heads=2, n_experts=4, n_experts_per_token=2)
    # DeepSeekMoE's routing fields used to be read as "this is DeepSeek" (routed_scaling_factor != 1 ...)
    for field in (dict(moe_router="sigmoid"), dict(n_shared_experts=1), dict(routed_scaling_factor=2.5),
                  dict(n_group=2, topk_group=1)):
        with pytest.raises(ValueError, match="ffn='deepseek_moe'"):
            LlamaConfig(**base, **field)
    deepseek = LlamaConfig(**base, moe_router="sigmoid", ffn="deepseek_moe", first_k_dense_replace=1)
    assert [deepseek.ffn_kind(i) for i in range(3)] == ["dense", "deepseek_moe", "deepseek_moe"]
    assert [LlamaConfig(**base).ffn_kind(i) for i in range(3)] == ["moe"] * 3
    with pytest.raises(ValueError, match="ffn 'dense'"):
        LlamaConfig(**base, ffn="dense")
    with pytest.raises(ValueError, match="ffn"):
        LlamaConfig(**base, ffn="swiglu")
    mixed = LlamaConfig(**base, sliding_window=4, attention="sliding",
                        layer_types=("sliding_attention", "full_attention", "sliding_attention"))
    assert [mixed.attention_kind(i) for i in range(3)] == ["sliding", "full", "sliding"]
    with pytest.raises(ValueError, match="sliding_window"):
        LlamaConfig(**base, attention="sliding")
    with pytest.raises(ValueError, match="kv_lora_rank"):
        LlamaConfig(**base, attention="latent")
    with pytest.raises(ValueError, match="layer_idx"):
        mixed.attention_kind(3)


def test_the_presets_and_checkpoints_declare_their_layers():
    from llama_course.checkpoint import config_from_hf

    assert PRESETS["mistral-7b"].attention == "sliding" and PRESETS["mixtral-8x7b"].ffn == "moe"
    assert (PRESETS["deepseek-v3"].attention, PRESETS["deepseek-v3"].ffn) == ("latent", "deepseek_moe")
    hf = dict(vocab_size=8, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16)
    v3 = dict(hf, model_type="deepseek_v3", kv_lora_rank=4, qk_rope_head_dim=2, qk_nope_head_dim=2, v_head_dim=2,
              n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=4, routed_scaling_factor=1.0,
              n_shared_experts=0, n_group=1, topk_group=1)
    cases = [(dict(hf, model_type="llama"), "full", "dense"),
             (dict(hf, model_type="mistral", sliding_window=4), "sliding", "dense"),
             (dict(hf, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2), "full", "moe"),
             (v3, "latent", "deepseek_moe")]                   # V3 routed by DeepSeek's rule even at scale 1
    for hf_config, attention, ffn in cases:
        config = config_from_hf(hf_config)
        assert (config.attention_kind(1), config.ffn_kind(1)) == (attention, ffn), hf_config["model_type"]


def test_the_block_builds_what_the_config_declares():
    from llama_course.deepseek_moe import DeepSeekMoE
    from llama_course.ffn import SwiGLU
    from llama_course.mla import MultiHeadLatentAttention
    from llama_course.model import Attention, Llama
    from llama_course.moe import MoE

    config = LlamaConfig(vocab_size=8, d_model=8, n_layers=3, n_heads=2, n_experts=4, n_experts_per_token=2,
                         first_k_dense_replace=1, sliding_window=2, attention="sliding",
                         layer_types=("full_attention", "sliding_attention", "sliding_attention"))
    layers = Llama(config, device="meta").layers
    assert [type(b.self_attn) for b in layers] == [Attention] * 3
    assert [b.self_attn.window for b in layers] == [None, 2, 2]
    assert [type(b.mlp) for b in layers] == [SwiGLU, MoE, MoE]
    latent = LlamaConfig(vocab_size=8, d_model=8, n_layers=2, n_heads=2, n_experts=4, n_experts_per_token=2,
                         kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2, ffn="deepseek_moe")
    layers = Llama(latent, device="meta").layers
    assert [(type(b.self_attn), type(b.mlp)) for b in layers] == [(MultiHeadLatentAttention, DeepSeekMoE)] * 2
