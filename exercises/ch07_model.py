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
        'Exercise 7.3 hf_to_course_names (Chapter 7, section 7.4 "Loading checkpoints in the real formats")'
        ': not implemented yet'
    )


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def parallel_block(x: torch.Tensor, weights: dict, config: LlamaConfig, positions: torch.Tensor) -> torch.Tensor:
    """A "parallel" block (GPT-J, PaLM, Cohere): attention and the FFN read the SAME normalised
    input and both add to the residual stream at once,

        n = RMSNorm(x),   y = x + W_O · Attention(RoPE(W_Q n), RoPE(W_K n), W_V n) + SwiGLU(n).

    There is one norm ("input_layernorm.weight"; "post_attention_layernorm.weight" is absent).
    Everything else is as in Exercise 7.1: Hugging Face's names inside one layer, RoPE layout
    "half" with config.rope_theta, causal attention, grouped-query attention when
    config.n_kv_heads < config.n_heads, RMSNorm with config.norm_eps. x (B, T, d); positions (T,);
    return (B, T, d) in x's dtype.

    Example: with every projection weight zero (q, k, v, o, gate, up, down) the block returns x.
    """
    raise NotImplementedError(
        'Homework 7.A parallel_block (Chapter 7, beyond section 7.1 "The block")'
        ': not implemented yet'
    )


def logit_lens(input_ids: torch.Tensor, state_dict: dict, config: LlamaConfig) -> torch.Tensor:
    """The "logit lens" (nostalgebraist 2020): what the model would predict if it stopped after
    each block. Return a tensor (n_layers + 1, B, T, vocab) whose row l is

        lm_head(RMSNorm_final(h_l)),

    where h_0 is the embedding of input_ids and h_l the residual stream after block l (so row
    n_layers equals the model's logits). The state dict and config are as in Exercise 7.2
    (Hugging Face names, "lm_head.weight" absent when the head is tied to the embedding);
    positions are 0 .. T-1. You may use your llama_block.

    Example: for a model with n_layers = 2, logit_lens(ids, sd, config)[2] == llama_forward(ids,
    sd, config), and row 0 depends on each token alone (no attention has happened yet).
    """
    raise NotImplementedError(
        'Homework 7.B logit_lens (Chapter 7, beyond section 7.2 "The whole model")'
        ': not implemented yet'
    )
# generated stub, sha256 514fc0c87d79cb364cdc5bb9ef9de6ca850c0447bbaf97ce24f90fe44d8bd6d8
