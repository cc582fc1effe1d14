# Exercise stub, generated from the course's key (solutions/ch07_model.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 7 exercises: the LLaMA block, the whole model, and the checkpoint name map.

Read Chapter 7 ("The LLaMA block and the whole model") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 7

You may (and should) use what you built in earlier chapters; the package's versions are imported
here so that this file works on its own.
"""

import torch

from llama_course.attention import causal_mask, scaled_dot_product_attention
from llama_course.config import LlamaConfig
from llama_course.ffn import swiglu
from llama_course.norm import rms_norm
from llama_course.rope import apply_rope


def llama_block(x: torch.Tensor, weights: dict, config: LlamaConfig, positions: torch.Tensor) -> torch.Tensor:
    """One LLaMA block, Hugging Face layout (RoPE layout "half"), causal:

        h = x + W_O · Attention(RoPE(W_Q n), RoPE(W_K n), W_V n),   n = RMSNorm(x)
        y = h + SwiGLU(RMSNorm(h))

    x (B, T, d); positions (T,). ``weights`` uses Hugging Face's names inside one layer:
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight".
    With grouped-query attention (config.n_kv_heads < config.n_heads) KV head j serves query
    heads j * n_rep ... (j + 1) * n_rep - 1.
    """
    raise NotImplementedError('Exercise 7.1 llama_block (Chapter 7, section 7.1 "The block"): not implemented yet')


def llama_forward(input_ids: torch.Tensor, state_dict: dict, config: LlamaConfig) -> torch.Tensor:
    """Logits (B, T, vocab) of a whole model from a Hugging Face state dict ("model.embed_tokens.weight",
    "model.layers.{i}.<name>", "model.norm.weight", "lm_head.weight" -- absent when the head is tied
    to the embedding). Positions are 0 .. T-1."""
    raise NotImplementedError(
        'Exercise 7.2 llama_forward (Chapter 7, section 7.2 "The whole model")'
        ': not implemented yet'
    )


def hf_to_course_names(state_dict: dict) -> dict:
    """Rename a Hugging Face LlamaForCausalLM state dict to the course model's names.

    The course keeps Hugging Face's module names without the "model." prefix
    ("model.layers.0.self_attn.q_proj.weight" -> "layers.0.self_attn.q_proj.weight";
    "lm_head.weight" stays), and drops the RoPE buffers some checkpoints carry
    ("...rotary_emb.inv_freq"), which the course recomputes. Return a new dict with the same tensors.
    """
    raise NotImplementedError(
        'Exercise 7.3 hf_to_course_names (Chapter 7, section 7.4 "Loading real checkpoints")'
        ': not implemented yet'
    )
# generated stub, sha256 bc9bfae504a633e0255c734ca649eb70ea7b3046936de77d4a1e671dbf64b333
