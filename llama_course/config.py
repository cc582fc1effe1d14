"""Model shapes: the configuration dataclass, published presets and the parameter count.

Everything in this file is plain integer arithmetic -- no tensors -- so the shapes of a
70-billion-parameter model can be studied on any laptop (Chapter 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .checks import (
    check_bool,
    check_int,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_type,
)

_check_int = check_positive_int  # the old name, still imported by train.py


def _check_ffn(d_model, multiple_of, ffn_dim_multiplier) -> None:
    check_positive_int("d_model", d_model)
    check_positive_int("multiple_of", multiple_of)
    if ffn_dim_multiplier is not None:
        check_positive_number("ffn_dim_multiplier", ffn_dim_multiplier)


def ffn_hidden_dim(d_model: int, multiple_of: int = 256,
                   ffn_dim_multiplier: float | None = None) -> int:
    """Width of the SwiGLU feed-forward layer by Meta's rule.

        h = int(2 * 4 * d_model / 3)      # 3 matrices, not 2: params ~ 8 d^2
        h = int(ffn_dim_multiplier * h)   # optional (Llama-2 70B, Llama 3)
        h = multiple_of * ceil(h / multiple_of)   # round *up*: friendly shapes

    ``ffn_hidden_dim(4096) == 11008`` (LLaMA 7B),
    ``ffn_hidden_dim(8192, 4096, 1.3) == 28672`` (Llama-2 70B).
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
BOOLS = ("tie_embeddings", "qk_norm", "single_expert_moe")


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

    Chapter 12 (defaults keep a LLaMA model unchanged; see sliding_window.py, mla.py, deepseek_moe.py):
    attention             what each block's attention is: "full" (LLaMA's), "sliding" (within a
                          window) or "latent" (MLA); None: "latent" when kv_lora_rank is set,
                          "sliding" when sliding_window is, else "full". See attention_kind.
    ffn                   what each block's FFN is: "dense" (SwiGLU), "moe" (Mixtral, Qwen3-MoE) or
                          "deepseek_moe" (shared + routed experts); None: "moe" when is_moe, else
                          "dense". DeepSeekMoE is never inferred: declare it. See ffn_kind.
    sliding_window        W: query i sees keys i-W+1 .. i (None: every earlier key; Mistral: 4096)
    layer_types           per layer "sliding_attention" or "full_attention" (None: all sliding
                          when sliding_window is set; Gemma 3: five sliding, then one full)
    q_lora_rank, kv_lora_rank   Multi-head Latent Attention when kv_lora_rank is set (DeepSeek-V2/V3);
                          q_lora_rank None -> a full-rank q_proj
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim   MLA's per-head widths (head_dim = qk_rope_head_dim)
    moe_d_ff              width of each routed expert (None -> d_ff; Qwen3-MoE, DeepSeek set it)
    moe_norm_topk         renormalise the top-k weights to sum to 1 (Mixtral, DeepSeek; Qwen3-MoE's flag)
    moe_router            "softmax" (Mixtral, Qwen3-MoE) or "sigmoid" (DeepSeek-V3)
    n_shared_experts      experts every token passes through (DeepSeekMoE), width moe_d_ff each
    n_group, topk_group   group-limited routing: experts chosen only from the topk_group best groups
    routed_scaling_factor multiplies the routed experts' weights (DeepSeek-V3: 2.5)
    first_k_dense_replace the first k blocks use a dense SwiGLU of width d_ff instead of experts
    single_expert_moe     MoE layers (a router over one expert) although n_experts == 1: transformers'
                          MoE models allow one routed expert; its weight is 1 under softmax, s_e
                          (times routed_scaling_factor) under DeepSeek's sigmoid. ``is_moe`` says which.
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
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    moe_d_ff: int | None = None
    moe_norm_topk: bool = True
    moe_router: str = "softmax"
    n_shared_experts: int = 0
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    first_k_dense_replace: int = 0
    single_expert_moe: bool = False
    attention: str | None = None
    ffn: str | None = None

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
        _check_chapter12(self)   # before head_dim: MLA's head_dim is its RoPE width
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
        if self.single_expert_moe and self.n_experts != 1:
            raise ValueError(f"single_expert_moe is for n_experts == 1 (got {self.n_experts}): with more "
                             f"experts the layers are MoE anyway")
        if self.n_experts_per_token > self.n_experts:
            raise ValueError(f"n_experts_per_token ({self.n_experts_per_token}) must be <= "
                             f"n_experts ({self.n_experts})")

    @property
    def is_moe(self) -> bool:
        """Whether the FFN layers route tokens to experts (more than one, or single_expert_moe)."""
        return self.n_experts > 1 or self.single_expert_moe

    def attention_kind(self, layer_idx: int) -> str:
        """"full", "sliding" or "latent": the attention of block ``layer_idx`` (layer_types can
        make some layers of a sliding model full, as Gemma 3's and Qwen3's global layers)."""
        check_int("layer_idx", layer_idx, 0, self.n_layers - 1)
        kind = self.attention or ("latent" if self.kv_lora_rank is not None
                                  else "sliding" if self.sliding_window is not None else "full")
        if kind == "sliding" and self.layer_types is not None and self.layer_types[layer_idx] == "full_attention":
            return "full"
        return kind

    def ffn_kind(self, layer_idx: int) -> str:
        """"dense", "moe" or "deepseek_moe": the FFN of block ``layer_idx`` (the first
        first_k_dense_replace blocks of an MoE model are dense)."""
        check_int("layer_idx", layer_idx, 0, self.n_layers - 1)
        if not self.is_moe or layer_idx < self.first_k_dense_replace:
            return "dense"
        return self.ffn or "moe"

    def replace(self, **changes) -> LlamaConfig:
        """A copy with some fields changed (and validated again).

        ``n_kv_heads``, ``d_ff`` and ``head_dim`` were resolved when this config was made and are
        kept as they are; pass them again (``d_ff=None``) to derive them from the new shapes.
        """
        return dataclasses.replace(self, **changes)


# ------------------------------------------------------------------------------ Chapter 12

LAYER_TYPES = ("sliding_attention", "full_attention")
ATTENTION_KINDS = ("full", "sliding", "latent")
FFN_KINDS = ("dense", "moe", "deepseek_moe")


def _check_kinds(c: LlamaConfig) -> None:
    """attention and ffn, when declared, agree with the fields their layers need; DeepSeekMoE's
    routing fields are taken only when ffn == "deepseek_moe" is declared (never guessed from them)."""
    if c.attention is not None:
        check_one_of("attention", c.attention, ATTENTION_KINDS)
        if (c.attention == "latent") != (c.kv_lora_rank is not None):
            raise ValueError(f"attention {c.attention!r} with kv_lora_rank {c.kv_lora_rank}: latent attention "
                             f"(MLA) and kv_lora_rank go together")
        if (c.attention == "sliding") != (c.sliding_window is not None):
            raise ValueError(f"attention {c.attention!r} with sliding_window {c.sliding_window}: a sliding "
                             f"attention and its window go together")
    if c.ffn is not None:
        check_one_of("ffn", c.ffn, FFN_KINDS)
        if (c.ffn != "dense") != c.is_moe:
            raise ValueError(f"ffn {c.ffn!r} with n_experts {c.n_experts}: experts (n_experts > 1 or "
                             f"single_expert_moe) and an ffn of 'moe' or 'deepseek_moe' go together")
    deepseek = {"moe_router": c.moe_router != "softmax", "n_shared_experts": c.n_shared_experts > 0,
                "n_group": c.n_group > 1, "routed_scaling_factor": c.routed_scaling_factor != 1.0}
    if c.ffn != "deepseek_moe" and any(deepseek.values()):
        names = ", ".join(name for name, used in deepseek.items() if used)
        raise ValueError(f"{names} belong to DeepSeekMoE: declare ffn='deepseek_moe' (got ffn={c.ffn!r})")


def _check_chapter12(c: LlamaConfig) -> None:
    """The fields Chapter 12 adds (sliding windows, MLA, DeepSeekMoE)."""
    for name in ("sliding_window", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim", "moe_d_ff"):
        if getattr(c, name) is not None:
            setattr(c, name, check_positive_int(name, getattr(c, name)))
    for name in ("n_group", "topk_group"):
        setattr(c, name, check_positive_int(name, getattr(c, name)))
    for name in ("n_shared_experts", "first_k_dense_replace"):
        setattr(c, name, check_int(name, getattr(c, name), low=0))
    check_bool("moe_norm_topk", c.moe_norm_topk)
    check_one_of("moe_router", c.moe_router, ("softmax", "sigmoid"))
    c.routed_scaling_factor = check_positive_number("routed_scaling_factor", c.routed_scaling_factor)
    if c.n_experts % c.n_group or not c.topk_group <= c.n_group:
        raise ValueError(f"n_group ({c.n_group}) must divide n_experts ({c.n_experts}) and topk_group "
                         f"({c.topk_group}) must be <= n_group")
    if c.n_group > 1 and c.n_experts_per_token > c.topk_group * (c.n_experts // c.n_group):
        raise ValueError(f"n_experts_per_token ({c.n_experts_per_token}) exceeds the experts of the "
                         f"topk_group ({c.topk_group}) groups it may choose from")
    _check_kinds(c)
    if c.layer_types is not None:
        c.layer_types = tuple(c.layer_types)
        if len(c.layer_types) != c.n_layers or not set(c.layer_types) <= set(LAYER_TYPES):
            raise ValueError(f"layer_types must list one of {LAYER_TYPES} per layer ({c.n_layers}), "
                             f"got {c.layer_types!r}")
        if c.sliding_window is None and "sliding_attention" in c.layer_types:
            raise ValueError("layer_types has sliding layers but sliding_window is None")
    if c.kv_lora_rank is not None:
        missing = [n for n in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if getattr(c, n) is None]
        if missing:
            raise ValueError(f"Multi-head Latent Attention (kv_lora_rank set) needs {', '.join(missing)}")
        if c.sliding_window is not None:
            raise ValueError("sliding_window with Multi-head Latent Attention is not supported")
        if c.head_dim is None:
            c.head_dim = c.qk_rope_head_dim       # RoPE turns only the decoupled part (as transformers)
        if c.head_dim != c.qk_rope_head_dim:
            raise ValueError(f"with MLA head_dim ({c.head_dim}) must equal qk_rope_head_dim "
                             f"({c.qk_rope_head_dim}): it sizes the RoPE tables")


def is_sliding_layer(config: LlamaConfig, layer_idx: int) -> bool:
    """Whether block ``layer_idx`` attends within the sliding window."""
    return config.attention_kind(layer_idx) == "sliding"



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
                                n_experts=8, n_experts_per_token=2, ffn="moe"),
}


def count_parameters(config: LlamaConfig) -> dict[str, int]:
    """Parameters of a LLaMA model, part by part (no biases anywhere).

        embedding   = V * d                         token embedding E
        attention   = d * (H * hd) + 2 * d * (H_kv * hd) + (H * hd) * d
                                                    W_Q, W_K, W_V, W_O
        ffn         = n_experts * 3 * d * d_ff      W_gate, W_up, W_down
        router      = d * n_experts  (0 if dense)   MoE gate
        norms       = 2 * d (+ 2 * hd, qk_norm)     RMSNorm weights
        per_block   = attention + ffn + router + norms
        blocks      = L * per_block
        final_norm  = d
        lm_head     = V * d   (0 when tied to the embedding)
        total       = embedding + blocks + final_norm + lm_head
        active      = total - L * (n_experts - k) * 3 * d * d_ff
                                                    (used per token)

    ``attention``, ``ffn``, ``router`` and ``norms`` are per block.
    """
    check_type("config", config, LlamaConfig)
    if (config.kv_lora_rank is not None or config.moe_d_ff is not None
            or config.n_shared_experts):
        return count_parameters_deepseek(config)  # Chapter 12: blocks differ
    d, hd = config.d_model, config.head_dim
    H, H_kv = config.n_heads, config.n_kv_heads
    expert = 3 * d * config.d_ff
    counts = {
        "embedding": config.vocab_size * d,
        "attention": d * H * hd + 2 * d * H_kv * hd + H * hd * d,
        "ffn": config.n_experts * expert,
        "router": d * config.n_experts if config.is_moe else 0,
        "norms": 2 * d + (2 * hd if config.qk_norm else 0),
    }
    counts["per_block"] = (counts["attention"] + counts["ffn"]
                           + counts["router"] + counts["norms"])
    counts["blocks"] = config.n_layers * counts["per_block"]
    counts["final_norm"] = d
    counts["lm_head"] = 0 if config.tie_embeddings else config.vocab_size * d
    counts["total"] = (counts["embedding"] + counts["blocks"]
                       + counts["final_norm"] + counts["lm_head"])
    idle = config.n_experts - config.n_experts_per_token
    counts["active"] = counts["total"] - config.n_layers * idle * expert
    return counts


def count_parameters_deepseek(config: LlamaConfig) -> dict[str, int]:
    """count_parameters for models whose blocks differ (MLA, shared experts, dense first layers,
    expert width moe_d_ff); the keys of config.count_parameters, per-block ones for an MoE block.

        attention   = mla_parameters  (or the LLaMA/GQA formula)
        norms       = 2 d (+ r_q + r with MLA, + 2 head_dim with qk_norm)
        ffn (MoE)   = (E + n_shared) * 3 d moe_d_ff,  router = d E
        dense FFN   = 3 d d_ff  in the first first_k_dense_replace blocks
        active      = total - (MoE blocks) * (E - k) * 3 d moe_d_ff
    """
    c, d = config, config.d_model
    if c.kv_lora_rank is not None:
        attention = mla_parameters(c)
        norms = 2 * d + (c.q_lora_rank or 0) + c.kv_lora_rank
    else:
        attention = d * c.n_heads * c.head_dim * 2 + 2 * d * c.n_kv_heads * c.head_dim
        norms = 2 * d + (2 * c.head_dim if c.qk_norm else 0)
    expert = 3 * d * (c.moe_d_ff or c.d_ff)
    sparse = c.is_moe
    n_moe = c.n_layers - min(c.first_k_dense_replace, c.n_layers) if sparse else 0
    counts = {"embedding": c.vocab_size * d, "attention": attention,
              "ffn": (c.n_experts + c.n_shared_experts) * expert if sparse else 3 * d * c.d_ff,
              "router": d * c.n_experts if sparse else 0, "norms": norms}
    counts["per_block"] = attention + counts["ffn"] + counts["router"] + norms
    counts["dense_ffn"] = 3 * d * c.d_ff
    counts["blocks"] = n_moe * counts["per_block"] + (c.n_layers - n_moe) * (attention + norms + counts["dense_ffn"])
    counts["final_norm"] = d
    counts["lm_head"] = 0 if c.tie_embeddings else c.vocab_size * d
    counts["total"] = counts["embedding"] + counts["blocks"] + counts["final_norm"] + counts["lm_head"]
    counts["active"] = counts["total"] - n_moe * (c.n_experts - c.n_experts_per_token) * expert
    return counts


def mla_parameters(config: LlamaConfig) -> int:
    """Weights of one MLA layer (no biases):

        q     = d r_q + r_q H (d_n + d_r)    (or d H (d_n + d_r) without q_lora_rank)
        kv    = d (r + d_r) + r H (d_n + d_v)
        out   = H d_v d
    plus RMSNorm weights r_q + r (counted with the norms)."""
    c, d, h = config, config.d_model, config.n_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    q = d * h * qk if c.q_lora_rank is None else d * c.q_lora_rank + c.q_lora_rank * h * qk
    kv = d * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank * h * (c.qk_nope_head_dim + c.v_head_dim)
    return q + kv + h * c.v_head_dim * d


# Chapter 12. Mistral 7B v0.1: Jiang et al. 2023 and its config.json (window 4096 on every layer).
# DeepSeek-V3: DeepSeek-AI 2024 and its config.json; its YaRN extension to 128K is not modelled
# (rope_scaling None, the 4096-token pre-training context). The multi-token-prediction module is
# not part of the model (as in transformers).
PRESETS.update({
    "mistral-7b": LlamaConfig(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
                              rope_theta=10000.0, norm_eps=1e-5, max_seq_len=32768, sliding_window=4096,
                              attention="sliding"),
    "deepseek-v3": LlamaConfig(vocab_size=129280, d_model=7168, n_layers=61, n_heads=128, d_ff=18432,
                               norm_eps=1e-6, max_seq_len=4096, q_lora_rank=1536, kv_lora_rank=512,
                               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                               n_experts=256, n_experts_per_token=8, moe_d_ff=2048, moe_router="sigmoid",
                               n_shared_experts=1, n_group=8, topk_group=4, routed_scaling_factor=2.5,
                               first_k_dense_replace=3, attention="latent", ffn="deepseek_moe"),
})
