# Exercise stub, generated from the course's key (solutions/ch05_rope.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 5 exercises: rotary position embeddings.

Read Chapter 5 ("RoPE") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 5

x is (..., seq, head_dim); positions are integers, (seq,) or (batch, seq) for x (batch, heads, seq, d).
"""

import torch

from llama_course.rope import rope_cos_sin


def rope_inv_freq(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The rotation speeds w_k = base^(-2k / head_dim) for k = 0 .. head_dim/2 - 1, float32.

    rope_inv_freq(8) == [1, 0.1, 0.01, 0.001]
    """
    raise NotImplementedError(
        'Exercise 5.1 rope_inv_freq (Chapter 5, section 5.4 "Frequencies: fast to slow")'
        ': not implemented yet'
    )


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               layout: str = "interleaved") -> torch.Tensor:
    """Rotate each pair of features of x by (position * w_k).

    layout="interleaved": pairs (x_0, x_1), (x_2, x_3), ...   (Meta's layout)
    layout="half":        pairs (x_0, x_{d/2}), (x_1, x_{d/2+1}), ...   (Hugging Face's layout)
    Pair k uses w_k in both layouts. For each pair (a, b) and angle t:
        a' = a cos t - b sin t,   b' = a sin t + b cos t
    Return x's shape and dtype.
    """
    cos, sin = rope_cos_sin(positions, x.shape[-1], base)    # (*positions.shape, d/2), float32
    if positions.dim() == 2 and x.dim() == 4:
        cos, sin = cos[:, None], sin[:, None]                # (batch, 1, seq, d/2)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if layout == "interleaved":
        raise NotImplementedError(
            'Exercise 5.2 apply_rope interleaved (Chapter 5, section 5.3 "Rotating pairs of features")'
            ': not implemented yet'
        )
    raise NotImplementedError(
        'Exercise 5.3 apply_rope half (Chapter 5, section 5.7 "Two layouts")'
        ': not implemented yet'
    )


def interleaved_to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Permute the rows of a query or key weight (n_heads * head_dim, d_in) so that a model
    written for the interleaved layout computes the same attention in the half layout.

    Within each head the rows (0, 1, 2, 3, ..., d-2, d-1) become (0, 2, 4, ..., d-2, 1, 3, ..., d-1).
    """
    raise NotImplementedError(
        'Exercise 5.4 interleaved_to_half (Chapter 5, section 5.7 "Two layouts")'
        ': not implemented yet'
    )
# generated stub, sha256 1b1e7f2b465371793ba02126f8df5bf5342327a4a65d6d1930908c05985d4219
