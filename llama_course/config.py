"""Model shapes: the configuration dataclass, published presets and the parameter count.

Everything in this file is plain integer arithmetic -- no tensors -- so the shapes of a
70-billion-parameter model can be studied on any laptop (Chapter 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .checks import check_bool, check_one_of, check_positive_int, check_positive_number, check_type

_check_int = check_positive_int  # the old name, still imported by train.py


def _check_ffn(d_model, multiple_of, ffn_dim_multiplier) -> None:
    check_positive_int("d_model", d_model)
    check_positive_int("multiple_of", multiple_of)
    if ffn_dim_multiplier is not None:
        check_positive_number("ffn_dim_multiplier", ffn_dim_multiplier)


def ffn_hidden_dim(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Width of the SwiGLU feed-forward layer by Meta's rule.

        h = int(2 * 4 * d_model / 3)              # SwiGLU has 3 matrices, not 2: keep params ~ 8 d^2
        h = int(ffn_dim_multiplier * h)           # optional (Llama-2 70B, Llama 3: 1.3)
        h = multiple_of * ceil(h / multiple_of)   # round *up* for hardware-friendly shapes

    ``ffn_hidden_dim(4096) == 11008`` (LLaMA 7B), ``ffn_hidden_dim(8192, 4096, 1.3) == 28672``
    (Llama-2 70B).
    """
    _check_ffn(d_model, multiple_of, ffn_dim_multiplier)
    hidden = int(2 * (4 * d_model) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# Fields checked by kind in __post_init__; a new field joins one of these (or gets its own check).
POSITIVE_INTS = ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len", "n_experts",
                 "n_experts_per_token", "multiple_of")
POSITIVE_NUMBERS = ("rope_theta", "norm_eps")   # finite and > 0
BOOLS = ("tie_embeddings", "qk_norm")


@dataclass
class LlamaConfig:
    """Every shape of a LLaMA-family model.

    vocab_size        V   rows of the embedding and of the vocabulary head
    d_model           d   width of the residual stream
    n_layers          L   number of identical blocks
    n_heads           H   query heads; head_dim = d / H
    n_kv_heads        H_kv key/value heads (None -> H, plain multi-head attention; 1 -> MQA)
    d_ff                  hidden width of each SwiGLU FFN (None -> ffn_hidden_dim(d, multiple_of, ffn_dim_multiplier))
    rope_theta            RoPE base (10000 for LLaMA-1/2, 500000 for Llama 3)
    norm_eps              epsilon inside RMSNorm
    max_seq_len           longest context the model is built for
    tie_embeddings        share the embedding matrix with the vocabulary head
    n_experts             experts per FFN layer (1 -> a dense model)
    n_experts_per_token   experts each token is routed to (top-k)
    multiple_of, ffn_dim_multiplier   Meta's rule for d_ff (see ffn_hidden_dim)
    head_dim              width of one attention head (None -> d_model / n_heads; Qwen3 sets it)
    rope_layout           "interleaved" (Meta, the course) or "half" (Hugging Face checkpoints)
    rope_scaling          None, or Hugging Face's rope_scaling dict (see rope.rope_inv_freq)
    qk_norm               RMSNorm on each head's queries and keys before RoPE (Qwen3)
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 4096
    tie_embeddings: bool = False
    n_experts: int = 1
    n_experts_per_token: int = 1
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    head_dim: int | None = None
    rope_layout: str = "interleaved"
    rope_scaling: dict | None = None
    qk_norm: bool = False

    def __post_init__(self) -> None:
        for name in POSITIVE_INTS:
            setattr(self, name, check_positive_int(name, getattr(self, name)))
        for name in POSITIVE_NUMBERS:
            setattr(self, name, check_positive_number(name, getattr(self, name)))
        for name in BOOLS:
            check_bool(name, getattr(self, name))
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.d_ff is None:
            self.d_ff = ffn_hidden_dim(self.d_model, self.multiple_of, self.ffn_dim_multiplier)
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
            self.head_dim = self.d_model // self.n_heads
        for name in ("n_kv_heads", "d_ff", "head_dim"):   # derived when None
            setattr(self, name, check_positive_int(name, getattr(self, name)))
        if self.ffn_dim_multiplier is not None:
            check_positive_number("ffn_dim_multiplier", self.ffn_dim_multiplier)
        check_one_of("rope_layout", self.rope_layout, ("interleaved", "half"))
        if self.rope_scaling is not None:
            check_type("rope_scaling", self.rope_scaling, dict)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if self.n_experts_per_token > self.n_experts:
            raise ValueError(f"n_experts_per_token ({self.n_experts_per_token}) must be <= "
                             f"n_experts ({self.n_experts})")

    def replace(self, **changes) -> LlamaConfig:
        """A copy with some fields changed (and validated again).

        ``n_kv_heads``, ``d_ff`` and ``head_dim`` were resolved when this config was made and are
        kept as they are; pass them again (``d_ff=None``) to derive them from the new shapes.
        """
        return dataclasses.replace(self, **changes)


# Published shapes. LLaMA-1: Touvron et al. 2023a, Table 2; Llama 2: Touvron et al. 2023b and
# the released params.json files; Llama 3: Meta's Llama-3-8B params.json; Mixtral: Jiang et al. 2024.
_LLAMA1 = dict(vocab_size=32000, norm_eps=1e-6, max_seq_len=2048)
_LLAMA2 = dict(vocab_size=32000, norm_eps=1e-5, max_seq_len=4096)
PRESETS: dict[str, LlamaConfig] = {
    "llama-7b": LlamaConfig(d_model=4096, n_layers=32, n_heads=32, **_LLAMA1),
    "llama-13b": LlamaConfig(d_model=5120, n_layers=40, n_heads=40, **_LLAMA1),
    "llama-33b": LlamaConfig(d_model=6656, n_layers=60, n_heads=52, **_LLAMA1),
    "llama-65b": LlamaConfig(d_model=8192, n_layers=80, n_heads=64, **_LLAMA1),
    "llama2-7b": LlamaConfig(d_model=4096, n_layers=32, n_heads=32, **_LLAMA2),
    "llama2-13b": LlamaConfig(d_model=5120, n_layers=40, n_heads=40, **_LLAMA2),
    "llama2-70b": LlamaConfig(d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8,
                              multiple_of=4096, ffn_dim_multiplier=1.3, **_LLAMA2),
    "llama3-8b": LlamaConfig(vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                             multiple_of=1024, ffn_dim_multiplier=1.3, rope_theta=500000.0,
                             norm_eps=1e-5, max_seq_len=8192),
    "mixtral-8x7b": LlamaConfig(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                                d_ff=14336, rope_theta=1e6, norm_eps=1e-5, max_seq_len=32768,
                                n_experts=8, n_experts_per_token=2),
}


def count_parameters(config: LlamaConfig) -> dict[str, int]:
    """Parameters of a LLaMA model, part by part (no biases anywhere).

        embedding   = V * d                                   token embedding E
        attention   = d * (H * hd) + 2 * d * (H_kv * hd) + (H * hd) * d     W_Q, W_K, W_V, W_O
        ffn         = n_experts * 3 * d * d_ff                W_gate, W_up, W_down per expert
        router      = d * n_experts   (0 for a dense model)   MoE gate
        norms       = 2 * d (+ 2 * head_dim with qk_norm)     RMSNorm weights per block
        per_block   = attention + ffn + router + norms
        blocks      = L * per_block
        final_norm  = d
        lm_head     = V * d   (0 when tied to the embedding)
        total       = embedding + blocks + final_norm + lm_head
        active      = total - L * (n_experts - k) * 3 * d * d_ff   (used per token)

    ``attention``, ``ffn``, ``router`` and ``norms`` are per block.
    """
    check_type("config", config, LlamaConfig)
    d, hd = config.d_model, config.head_dim
    expert = 3 * d * config.d_ff
    counts = {
        "embedding": config.vocab_size * d,
        "attention": d * config.n_heads * hd + 2 * d * config.n_kv_heads * hd + config.n_heads * hd * d,
        "ffn": config.n_experts * expert,
        "router": d * config.n_experts if config.n_experts > 1 else 0,
        "norms": 2 * d + (2 * hd if config.qk_norm else 0),
    }
    counts["per_block"] = counts["attention"] + counts["ffn"] + counts["router"] + counts["norms"]
    counts["blocks"] = config.n_layers * counts["per_block"]
    counts["final_norm"] = d
    counts["lm_head"] = 0 if config.tie_embeddings else config.vocab_size * d
    counts["total"] = counts["embedding"] + counts["blocks"] + counts["final_norm"] + counts["lm_head"]
    inactive = config.n_layers * (config.n_experts - config.n_experts_per_token) * expert
    counts["active"] = counts["total"] - inactive
    return counts
