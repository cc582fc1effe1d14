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
    # BEGIN SOLUTION Exercise 5.1 rope_inv_freq (Chapter 5, section 5.4 "Frequencies: fast to slow")
    k = torch.arange(head_dim // 2, dtype=torch.float32)
    return base ** (-2 * k / head_dim)
    # END SOLUTION


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
        # BEGIN SOLUTION Exercise 5.2 apply_rope (interleaved) (Chapter 5, section 5.3 "Rotating pairs of features")
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
        # END SOLUTION
    # BEGIN SOLUTION Exercise 5.3 apply_rope (half) (Chapter 5, section 5.7 "Two layouts")
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    # END SOLUTION


def interleaved_to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Permute the rows of a query or key weight (n_heads * head_dim, d_in) so that a model
    written for the interleaved layout computes the same attention in the half layout.

    Within each head the rows (0, 1, 2, 3, ..., d-2, d-1) become (0, 2, 4, ..., d-2, 1, 3, ..., d-1).
    """
    # BEGIN SOLUTION Exercise 5.4 interleaved_to_half (Chapter 5, section 5.7 "Two layouts")
    rows, d_in = w.shape
    head_dim = rows // n_heads
    evens, odds = torch.arange(0, head_dim, 2, device=w.device), torch.arange(1, head_dim, 2, device=w.device)
    per_head = torch.cat([evens, odds])
    order = torch.cat([h * head_dim + per_head for h in range(n_heads)])
    return w[order]
    # END SOLUTION


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
    # BEGIN SOLUTION Homework 5.A apply_partial_rope (Chapter 5, beyond section 5.7 "Two layouts")
    head_dim = x.shape[-1]
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise ValueError(f"rotary_dim must be even and in (0, {head_dim}], got {rotary_dim}")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    k = torch.arange(rotary_dim // 2, device=x.device, dtype=torch.float32)
    inv_freq = base ** (-2 * k / rotary_dim)                                   # (r/2,)
    angles = positions.to(x.device, torch.float32)[..., None] * inv_freq       # (*pos, r/2)
    if positions.dim() == 2 and x.dim() == 4:
        angles = angles[:, None]                                               # (B, 1, T, r/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        a, b = rot[..., :rotary_dim // 2], rot[..., rotary_dim // 2:]
        rot = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([rot, rest], dim=-1)
    # END SOLUTION


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
    # BEGIN SOLUTION Homework 5.B apply_rope_2d (Chapter 5, beyond section 5.6 "Relative position")
    head_dim, seq = x.shape[-1], x.shape[-2]
    if head_dim % 4:
        raise ValueError(f"head_dim must be divisible by 4, got {head_dim}")
    for name, pos in (("rows", rows), ("cols", cols)):
        if pos.shape != (seq,):
            raise ValueError(f"{name} must have shape ({seq},), got {tuple(pos.shape)}")
    m = head_dim // 2
    inv_freq = base ** (-2 * torch.arange(m // 2, device=x.device, dtype=torch.float32) / m)   # (m/2,)

    def rotate(part, pos):                                                   # (..., seq, m)
        angles = pos.to(x.device, torch.float32)[:, None] * inv_freq         # (seq, m/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        a, b = part[..., 0::2], part[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)

    return torch.cat([rotate(x[..., :m], rows), rotate(x[..., m:], cols)], dim=-1)
    # END SOLUTION
