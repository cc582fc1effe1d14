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
