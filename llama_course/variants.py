"""Which attention, FFN and cache each block of a model uses (Chapter 12 widens the choice).

    attention   Attention (LLaMA, GQA)  |  SlidingWindowAttention (Mistral, Gemma's local layers)
                |  MultiHeadLatentAttention (DeepSeek-V2/V3)
    FFN         SwiGLU  |  MoE (Mixtral, Qwen3-MoE)  |  DeepSeekMoE (shared + routed, sigmoid, groups)
    cache       KVCache  |  SlidingWindowKVCache (rolling buffers)  |  LatentKVCache (c_kv and k_pe)

KV cache per token (bytes b per number), summed over the layers:
    full attention layer      2 * H_kv * head_dim * b           for each of the T tokens
    sliding layer             2 * H_kv * head_dim * b           for min(T, W) tokens only
    MLA layer                 (kv_lora_rank + qk_rope_head_dim) * b
"""

from __future__ import annotations

import re

import torch
from torch import nn

from .config import LlamaConfig, is_sliding_layer
from .ffn import SwiGLU
from .kv_cache import KVCache
from .moe import MoE


def is_deepseek_moe(config: LlamaConfig) -> bool:
    """Whether the experts are routed DeepSeek's way (anything beyond Mixtral's softmax top-k)."""
    return config.is_moe and (config.moe_router == "sigmoid" or config.n_shared_experts > 0
                                     or config.n_group > 1 or config.routed_scaling_factor != 1.0)


def make_attention(config: LlamaConfig, layer_idx: int, rotary, device=None, dtype=None) -> nn.Module:
    """The attention module of block ``layer_idx``."""
    from .model import Attention  # model.py imports this module: import at call time
    if config.kv_lora_rank is not None:
        from .mla import MultiHeadLatentAttention
        return MultiHeadLatentAttention(config, position_hook=rotary, device=device, dtype=dtype)
    if is_sliding_layer(config, layer_idx):
        from .sliding_window import SlidingWindowAttention
        return SlidingWindowAttention(config, config.sliding_window, position_hook=rotary, device=device, dtype=dtype)
    return Attention(config, position_hook=rotary, device=device, dtype=dtype)


def make_ffn(config: LlamaConfig, layer_idx: int, device=None, dtype=None) -> nn.Module:
    """The FFN of block ``layer_idx``: dense, Mixtral-style MoE, or DeepSeekMoE."""
    if not config.is_moe or layer_idx < config.first_k_dense_replace:
        return SwiGLU(config.d_model, config.d_ff, device=device, dtype=dtype)
    if is_deepseek_moe(config):
        from .deepseek_moe import DeepSeekMoE
        return DeepSeekMoE(config, device=device, dtype=dtype)
    return MoE(config.d_model, config.moe_d_ff or config.d_ff, config.n_experts, config.n_experts_per_token,
               normalize_topk=config.moe_norm_topk, device=device, dtype=dtype)


def cache_class(config: LlamaConfig) -> type[KVCache]:
    """The KVCache subclass a model of this config fills."""
    if config.kv_lora_rank is not None:
        from .mla import LatentKVCache
        return LatentKVCache
    if config.sliding_window is not None:
        from .sliding_window import SlidingWindowKVCache
        return SlidingWindowKVCache
    return KVCache


def hf_config_fields(hf: dict) -> dict:
    """The Chapter 12 LlamaConfig fields of a transformers config.json (Mistral/Mixtral windows,
    Qwen3-MoE's experts, DeepSeek-V3's MLA and DeepSeekMoE); {} for a LLaMA."""
    model_type, fields = hf.get("model_type"), {}
    slides = hf.get("use_sliding_window") if model_type in ("qwen3", "qwen3_moe") else True
    if slides and hf.get("sliding_window"):
        fields["sliding_window"] = hf["sliding_window"]
        if hf.get("layer_types"):                 # e.g. Qwen3: sliding only from max_window_layers on
            fields["layer_types"] = tuple(hf["layer_types"])
        elif model_type in ("qwen3", "qwen3_moe"):
            fields["layer_types"] = tuple("sliding_attention" if i >= hf.get("max_window_layers", 28)
                                          else "full_attention" for i in range(hf["num_hidden_layers"]))
    if model_type == "qwen3_moe":
        if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
            raise ValueError("qwen3_moe with decoder_sparse_step != 1 or mlp_only_layers is not supported "
                             "(every block of the course's Qwen3-MoE has experts)")
        fields.update(qk_norm=True, n_experts=hf.get("num_experts", hf.get("num_local_experts")),
                      moe_d_ff=hf["moe_intermediate_size"], moe_norm_topk=bool(hf.get("norm_topk_prob", False)))
    if model_type == "deepseek_v3":
        fields.update(
            q_lora_rank=hf.get("q_lora_rank"), kv_lora_rank=hf["kv_lora_rank"], head_dim=hf["qk_rope_head_dim"],
            qk_nope_head_dim=hf["qk_nope_head_dim"], qk_rope_head_dim=hf["qk_rope_head_dim"],
            v_head_dim=hf["v_head_dim"], n_experts=hf["n_routed_experts"], moe_d_ff=hf["moe_intermediate_size"],
            moe_router="sigmoid", n_shared_experts=hf.get("n_shared_experts") or 0, n_group=hf.get("n_group") or 1,
            topk_group=hf.get("topk_group") or 1, routed_scaling_factor=float(hf.get("routed_scaling_factor", 1.0)),
            first_k_dense_replace=hf.get("first_k_dense_replace") or 0,
            moe_norm_topk=bool(hf.get("norm_topk_prob", True)),
            rope_layout="interleaved" if hf.get("rope_interleave", True) else "half")
    return fields


_FUSED = re.compile(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)")


def split_fused_experts(name: str, tensor: torch.Tensor):
    """transformers keeps experts in memory as 3-D tensors, gate_up_proj (E, 2 F, d) and down_proj
    (E, d, F); yield them as the per-expert 2-D weights a saved checkpoint lists. Others pass as is."""
    match = _FUSED.fullmatch(name)
    if match is None or tensor.dim() != 3:
        yield name, tensor
        return
    prefix, kind = match.groups()
    for e, w in enumerate(tensor):                                       # w: (2F, d) or (d, F)
        if kind == "down_proj":
            yield f"{prefix}.{e}.down_proj.weight", w
        else:
            gate, up = w.chunk(2, dim=0)                                 # (F, d) each: gate first
            yield f"{prefix}.{e}.gate_proj.weight", gate
            yield f"{prefix}.{e}.up_proj.weight", up
