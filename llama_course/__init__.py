"""llama_course: the reference implementations behind *LLaMA from the Inside*.

One module per idea, in the order the book teaches them:

    config   LlamaConfig, PRESETS, ffn_hidden_dim, count_parameters   (Chapter 1)
    loss     next_token_loss                                           (Chapters 1-2)
    embedding  embed                                                   (Chapter 2)
    norm     rms_norm, layer_norm, RMSNorm                             (Chapter 3)
    ffn      silu, swiglu, SwiGLU                                      (Chapter 6)
    tokenizer  train_bpe, BPETokenizer, llama3_tokenizer               (Chapter 2)
    utils    get_device, seed_everything
    plots    figures (imports matplotlib lazily)
    grade    the exercise grader: python -m llama_course.grade [PATH]
"""

from .config import PRESETS, LlamaConfig, count_parameters, ffn_hidden_dim
from .embedding import embed
from .ffn import SwiGLU, silu, swiglu
from .loss import next_token_loss
from .norm import RMSNorm, layer_norm, rms_norm
from .utils import get_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "LlamaConfig",
    "PRESETS",
    "RMSNorm",
    "SwiGLU",
    "count_parameters",
    "embed",
    "ffn_hidden_dim",
    "get_device",
    "layer_norm",
    "next_token_loss",
    "rms_norm",
    "seed_everything",
    "silu",
    "swiglu",
    "__version__",
]
