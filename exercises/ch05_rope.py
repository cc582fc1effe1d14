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
            'Exercise 5.2 apply_rope (interleaved) (Chapter 5, section 5.3 "Rotating pairs of features")'
            ': not implemented yet'
        )
    raise NotImplementedError(
        'Exercise 5.3 apply_rope (half) (Chapter 5, section 5.7 "Two layouts")'
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


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def apply_partial_rope(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int, base: float = 10000.0,
                       layout: str = "half") -> torch.Tensor:
    """Partial rotary embeddings: rotate only the first ``rotary_dim`` features of each head and
    pass the other head_dim - rotary_dim through unchanged (GPT-NeoX, GPT-J, Phi).

    The rotated part is RoPE of width rotary_dim: pair k (k = 0 .. rotary_dim/2 - 1) turns by
    position * base^(-2k / rotary_dim) -- the speeds depend on rotary_dim, not on head_dim.
    layout="half" pairs (x_k, x_{k + rotary_dim/2}) (GPT-NeoX, Hugging Face); layout="interleaved"
    pairs (x_{2k}, x_{2k+1}) (GPT-J). x (..., seq, head_dim); positions (seq,) or (batch, seq) for
    x (batch, heads, seq, head_dim), as in apply_rope. Angles in float32; return x's shape, dtype and
    device. ValueError naming rotary_dim unless it is even and 0 < rotary_dim <= head_dim, and
    naming layout for any other layout.

    Example: head_dim 4, rotary_dim 2, x = [1, 0, 5, 6] at position 1 turns the pair (1, 0) by
    1 radian and keeps the rest: [cos 1, sin 1, 5, 6] = [0.5403, 0.8415, 5, 6] in both layouts.
    """
    raise NotImplementedError(
        'Homework 5.A apply_partial_rope (Chapter 5, beyond section 5.7 "Two layouts")'
        ': not implemented yet'
    )


def apply_rope_2d(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, base: float = 100.0) -> torch.Tensor:
    """Axial 2-D RoPE for a grid of tokens (image patches): the first half of each head's features
    encodes the row, the second half the column.

    x (..., seq, head_dim) with head_dim divisible by 4; rows and cols integer tensors (seq,): token
    t sits at (rows[t], cols[t]). Let m = head_dim / 2. Features 0 .. m-1 are rotated by rows[t] and
    features m .. 2m-1 by cols[t], each half in the interleaved layout of Exercise 5.2 with its own
    speeds base^(-2k / m), k = 0 .. m/2 - 1 (so both axes use the same set of speeds). Then the
    score <R(r1, c1) q, R(r2, c2) k> depends on the positions only through (r2 - r1, c2 - c1).
    Angles in float32; return x's shape, dtype and device. ValueError naming head_dim unless
    head_dim % 4 == 0; ValueError naming rows/cols if they are not (seq,).

    Example: head_dim 4 (m = 2, one speed, 1), x = [1, 0, 1, 0] at row 1, column 2 gives
    [cos 1, sin 1, cos 2, sin 2] = [0.5403, 0.8415, -0.4161, 0.9093].
    """
    raise NotImplementedError(
        'Homework 5.B apply_rope_2d (Chapter 5, beyond section 5.6 "Relative position")'
        ': not implemented yet'
    )
# generated stub, sha256 00507597f8bfeb2a166f0ea2167272e9144629e990c392830da1c2c21c621b43
