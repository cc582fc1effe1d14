"""llama_course: the reference implementations behind *LLaMA from the Inside*.

One module per idea, in the order the book teaches them:

    config   LlamaConfig, PRESETS, ffn_hidden_dim, count_parameters   (Chapter 1)
    loss     next_token_loss                                           (Chapters 1-2)
    embedding  embed                                                   (Chapter 2)
    norm     rms_norm, layer_norm, RMSNorm                             (Chapter 3)
    attention  softmax, scaled_dot_product_attention, causal_mask, Attention (Chapter 4)
    rope     apply_rope, RotaryEmbedding                               (Chapter 5)
    ffn      silu, swiglu, SwiGLU                                      (Chapter 6)
    model    LlamaBlock, Llama (+ checkpoint: Llama.from_hf, from_meta) (Chapter 7)
    kv_cache, generate, cost   KVCache, generate, roofline numbers     (Chapter 8)
    attention.gqa_attention, mha_to_gqa; Qwen3 checkpoints              (Chapter 9)
    moe      MoE, route_topk, load_balancing_loss; Mixtral checkpoints  (Chapter 10)
    tokenizer  train_bpe, BPETokenizer, llama3_tokenizer               (Chapter 2)
    utils    get_device, seed_everything
    plots    figures (imports matplotlib lazily)
    grade/   the tools, not course content: the grader (python -m llama_course.grade [PATH]),
             its sandbox and pytest plugin, the stub writer, the autograder, test helpers
"""

from .attention import Attention, causal_mask, padding_mask, scaled_dot_product_attention, softmax
from .config import PRESETS, LlamaConfig, count_parameters, ffn_hidden_dim
from .embedding import embed
from .ffn import SwiGLU, silu, swiglu
from .generate import generate, stream_generate
from .kv_cache import KVCache
from .loss import next_token_loss
from .model import Llama, LlamaBlock
from .moe import MoE, load_balancing_loss, route_topk
from .norm import RMSNorm, layer_norm, rms_norm
from .rope import RotaryEmbedding, apply_rope
from .utils import get_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "Attention",
    "KVCache",
    "Llama",
    "LlamaBlock",
    "LlamaConfig",
    "MoE",
    "PRESETS",
    "RMSNorm",
    "RotaryEmbedding",
    "SwiGLU",
    "apply_rope",
    "causal_mask",
    "count_parameters",
    "embed",
    "ffn_hidden_dim",
    "generate",
    "get_device",
    "layer_norm",
    "load_balancing_loss",
    "next_token_loss",
    "padding_mask",
    "rms_norm",
    "route_topk",
    "scaled_dot_product_attention",
    "seed_everything",
    "silu",
    "softmax",
    "stream_generate",
    "swiglu",
    "__version__",
]
