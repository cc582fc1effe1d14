"""llama_course: the reference implementations behind *LLaMA from the Inside*.

One module per idea, in the order the book teaches them:

    config     LlamaConfig, PRESETS, ffn_hidden_dim, count_parameters            (Chapter 1)
    loss       next_token_loss                                                   (Chapters 1-2)
    tokenizer/ train_bpe, BPETokenizer, llama3_tokenizer; spm (SentencePiece)    (Chapter 2)
    embedding  embed                                                             (Chapter 2)
    data       the course corpus                                                 (Chapters 2, 6, 9-11)
    norm       rms_norm, layer_norm, RMSNorm                                     (Chapter 3)
    attention  softmax, causal_mask, padding_mask, scaled_dot_product_attention,
               split_heads, merge_heads, MultiHeadAttention                      (Chapter 4)
    rope       apply_rope, rope_inv_freq, RotaryEmbedding                        (Chapter 5)
    ffn        silu, swiglu, SwiGLU                                              (Chapter 6)
    model      Attention (Chapter 4's + RoPE, cache, GQA, QK-norm, window), LlamaBlock
               (picks each layer's attention and FFN by the config), Llama       (Chapter 7)
    checkpoint load_hf, load_meta: Hugging Face and Meta checkpoints             (Chapter 7)
    kv_cache   KVCache (full, sliding and latent layers)                         (Chapter 8)
    generate   generate, stream_generate, sample_next, top_k/top_p filters       (Chapter 8)
    cost       FLOPs, bytes, the roofline, measured bandwidth                    (Chapter 8)
    linear     Linear: nn.Linear that spreads a decode step over the CPU cores   (Chapter 8)
    gqa        repeat_kv, gqa_attention, mha_to_gqa; Qwen3 checkpoints           (Chapter 9)
    moe        MoE, route_topk, load_balancing_loss, router_z_loss               (Chapter 10)
    sliding_window, mla, deepseek_moe   windows, latent attention, DeepSeekMoE; the config
               says which each layer uses; Mistral, Qwen3-MoE, DeepSeek-V3 checkpoints (Chapter 12)
    train/     the lab (Chapter 11): data, the loop, the run's checkpoint, the
               command line (python -m llama_course.train)
    parallel/  several processes (Chapter 13): ZeRO's memory, DDP, FSDP2,
               the sharded checkpointer, tensor parallel
    device     get_device, available_devices, synchronize, seed_everything       (every chapter)
    checks     the argument checks every public function makes in one line
    plots      figures (imports matplotlib lazily)
    grade/     the tools, not course content: the grader (python -m llama_course.grade [PATH]),
               its sandbox and pytest plugin, the stub writer, the autograder, test helpers

Imports flow one way, down these layers (tests/unit/test_import_dag.py enforces it; a module
imports only from its own layer or those above it in this list):

    foundations   checks, device, config, linear, utils, data
    layers        loss, tokenizer, embedding, norm, attention, rope, ffn, gqa, moe, kv_cache,
                  and Chapter 12's sliding_window, mla, deepseek_moe
    model         model (assembles the layers; each block's choice is visible there)
    using it      checkpoint, generate, cost, plots, train, your_llama
    parallel      parallel/ (Chapter 13): wraps the model train/'s loop is handed
    programs      train/__main__.py (python -m llama_course.train): 11 + 13
    tools         grade/
"""

from .attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
)
from .config import PRESETS, LlamaConfig, count_parameters, ffn_hidden_dim
from .deepseek_moe import DeepSeekMoE
from .device import available_devices, get_device, seed_everything, synchronize
from .embedding import embed
from .ffn import SwiGLU, silu, swiglu
from .generate import generate, stream_generate
from .gqa import gqa_attention, mha_to_gqa, repeat_kv
from .kv_cache import KVCache
from .loss import next_token_loss
from .mla import MultiHeadLatentAttention
from .model import Attention, Llama, LlamaBlock
from .moe import MoE, load_balancing_loss, route_topk, router_z_loss
from .norm import RMSNorm, layer_norm, rms_norm
from .rope import RotaryEmbedding, apply_rope
from .sliding_window import banded_mask

__version__ = "0.1.0"

__all__ = [
    "DeepSeekMoE",
    "MultiHeadLatentAttention",
    "banded_mask",
    "Attention",
    "KVCache",
    "Llama",
    "LlamaBlock",
    "LlamaConfig",
    "MoE",
    "MultiHeadAttention",
    "PRESETS",
    "RMSNorm",
    "RotaryEmbedding",
    "SwiGLU",
    "apply_rope",
    "available_devices",
    "causal_mask",
    "count_parameters",
    "embed",
    "ffn_hidden_dim",
    "generate",
    "get_device",
    "gqa_attention",
    "layer_norm",
    "load_balancing_loss",
    "mha_to_gqa",
    "next_token_loss",
    "padding_mask",
    "repeat_kv",
    "rms_norm",
    "route_topk",
    "router_z_loss",
    "scaled_dot_product_attention",
    "seed_everything",
    "silu",
    "softmax",
    "stream_generate",
    "swiglu",
    "synchronize",
    "__version__",
]
