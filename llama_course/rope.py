"""Rotary position embeddings, RoPE (Chapter 5).

Each pair of features (x_a, x_b) of a query or key at position m is rotated by the angle m * w_k:

    w_k   = base^(-2k / d)                    k = 0 .. d/2 - 1, fast (w_0 = 1) to slow
    x_a'  = x_a cos(m w_k) - x_b sin(m w_k)
    x_b'  = x_a sin(m w_k) + x_b cos(m w_k)

so that <R_m q, R_n k> = <q, R_{n-m} k>: attention scores depend only on relative position.

Two layouts pair the features differently:
    "interleaved"  (x_0, x_1), (x_2, x_3), ...          Meta's original code and the course text
    "half"         (x_0, x_{d/2}), (x_1, x_{d/2+1}), ... Hugging Face's rotate_half
A model trained in one layout runs in the other after permuting the rows of W_Q and W_K
(interleaved_to_half / half_to_interleaved).

Angles are computed in float32, like Meta's and Hugging Face's code: positions are exact in float32
up to 2^24 = 16,777,216, so larger positions are refused rather than silently rounded.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import (
    check_int,
    check_number,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_tensor,
)

LAYOUTS = ("interleaved", "half")
ROPE_TYPES = ("default", "linear", "ntk", "dynamic", "llama3")
MAX_POSITION = 2 ** 24  # the first integer float32 cannot tell from its neighbour
_SCALING_KEYS = {  # what each rope_type needs (transformers, too, refuses a scaling without its factor)
    "linear": ("factor",), "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}


def _check_head_dim(head_dim) -> int:
    if check_positive_int("head_dim", head_dim) % 2:
        raise ValueError(f"head_dim must be a positive even int (RoPE rotates pairs), got {head_dim!r}")
    return head_dim


def _check_rope(head_dim, base, scaling) -> tuple[str, dict]:
    """Check rope_inv_freq's arguments; return the rope_type and the other scaling entries."""
    _check_head_dim(head_dim)
    check_positive_number("base", base)
    if scaling is not None and not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict or None, got {type(scaling).__name__}")
    scaling = dict(scaling or {})
    rope_type = check_one_of("scaling['rope_type']", scaling.pop("rope_type", scaling.pop("type", "default")),
                             ROPE_TYPES)
    if rope_type != "default":
        check_number("scaling['factor']", scaling.get("factor", 1.0), low=1)
    missing = [key for key in _SCALING_KEYS.get(rope_type, ()) if key not in scaling]
    if missing:
        raise ValueError(f"scaling with rope_type {rope_type!r} needs {', '.join(missing)}")
    if "original_max_position_embeddings" in _SCALING_KEYS.get(rope_type, ()):
        check_positive_int("scaling['original_max_position_embeddings']", scaling["original_max_position_embeddings"])
    if rope_type == "llama3":
        low = check_positive_number("scaling['low_freq_factor']", scaling["low_freq_factor"])
        check_number("scaling['high_freq_factor']", scaling["high_freq_factor"], low=low, low_open=True)
    return rope_type, scaling


def rope_inv_freq(head_dim: int, base: float = 10000.0,
                  scaling: dict | None = None, seq_len: int | None = None,
                  device=None) -> torch.Tensor:
    """The rotation speeds w_k = base^(-2k/d), k = 0 .. d/2 - 1, in float32,
    optionally scaled.

    ``scaling`` follows Hugging Face's ``rope_parameters`` / ``rope_scaling``:
        {"rope_type": "linear", "factor": s}
            position interpolation: w_k / s (Chen et al. 2023)
        {"rope_type": "ntk", "factor": s}
            NTK-aware: base * s^(d / (d - 2)), a static stretch
        {"rope_type": "dynamic", "factor": s,
         "original_max_position_embeddings": L}
            NTK with s grown to fit ``seq_len`` (none below L)
        {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
         "high_freq_factor": 4, "original_max_position_embeddings": 8192}
            Llama 3.1: slow pairs / 8, fast pairs kept, a smooth blend
            in between
    """
    rope_type, scaling = _check_rope(head_dim, base, scaling)
    factor = scaling.get("factor", 1.0)
    if rope_type == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    elif rope_type == "dynamic":
        original = scaling["original_max_position_embeddings"]
        seq_len = max(seq_len or original, original)
        grown = (factor * seq_len / original) - (factor - 1)
        base = base * grown ** (head_dim / (head_dim - 2))
    k2 = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device)
    exponents = k2.float() / head_dim              # 2k/d
    inv_freq = 1.0 / (base ** exponents)           # (d/2,)
    if rope_type == "linear":
        inv_freq = inv_freq / factor
    elif rope_type == "llama3":
        original = scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelength = 2 * math.pi / inv_freq        # (d/2,) tokens per turn
        smooth = (original / wavelength - low) / (high - low)
        #                                            0 (slow) .. 1 (fast)
        slow = wavelength > original / low
        scaled = torch.where(slow, inv_freq / factor, inv_freq)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ((wavelength >= original / high)
                  & (wavelength <= original / low))
        inv_freq = torch.where(medium, blended, scaled)
    return inv_freq


def check_positions(positions, max_seq_len: int | None = None) -> None:
    """An integer tensor of positions, (seq,) or (batch, seq): each in [0, max_seq_len) for a table
    of that many rows, else within float32's exact integers, |m| < 2^24 (negative positions rotate
    backwards). One device-to-host copy on a GPU; meta tensors hold no values."""
    check_tensor("positions", positions, integer=True)
    if positions.dim() not in (1, 2):
        raise ValueError(f"positions must be (seq,) or (batch, seq), got shape {tuple(positions.shape)}")
    low, high = (0, max_seq_len) if max_seq_len is not None else (-MAX_POSITION + 1, MAX_POSITION)
    if positions.device.type != "meta" and positions.numel() and (positions.min() < low or positions.max() >= high):
        bound = "max_seq_len" if max_seq_len is not None else "float32 angles are exact only up to 2^24"
        raise ValueError(f"positions must be in [{low}, {high}) ({bound}), got "
                         f"[{int(positions.min())}, {int(positions.max())}]")


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0, scaling: dict | None = None,
                 seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(m w_k) and sin(m w_k), each (*positions.shape, head_dim / 2), always in float32.

    Angles are computed in float32 whatever the model's dtype: in bfloat16, position 1000 times
    w_0 = 1 would already be off by several radians' worth of rounding (8 bits of mantissa).
    """
    check_positions(positions)
    inv_freq = rope_inv_freq(head_dim, base, scaling, seq_len, device=positions.device)  # (d/2,)
    angles = positions.float()[..., None] * inv_freq                                      # (..., d/2)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            layout: str) -> torch.Tensor:
    """Rotate the pairs of x (..., d) by angles whose cos/sin are
    (..., d/2), in x's dtype."""
    # as Hugging Face does: angles in fp32, the product in x's dtype
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]   # (..., d/2) each: (x_2i, x_2i+1)
        rotated = (a * cos - b * sin, a * sin + b * cos)
        return torch.stack(rotated, dim=-1).flatten(-2)          # (..., d)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]     # (..., d/2) each: (x_i, x_i+d/2)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    #                                                            (..., d)


def _broadcast_angles(cos, sin, x):
    """Line cos/sin (seq, d/2) or (batch, seq, d/2) up with x (..., seq, d): a batch of positions
    gets a head axis, (batch, 1, seq, d/2), for x (batch, heads, seq, d)."""
    while cos.dim() > 2 and cos.dim() < x.dim():
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return cos, sin


def _check_rope_input(x, positions, layout) -> None:
    check_tensor("x", x, min_ndim=2, floating=True)
    check_one_of("layout", layout, LAYOUTS)
    check_tensor("positions", positions, integer=True, like=x, like_name="x")   # values: rope_cos_sin
    if positions.dim() not in (1, 2) or positions.shape[-1] != x.shape[-2]:
        raise ValueError(f"positions must be (seq,) or (batch, seq) with one position per row of x "
                         f"{tuple(x.shape)} (seq = {x.shape[-2]}), got {tuple(positions.shape)}")
    if positions.dim() == 2 and (x.dim() < 3 or positions.shape[0] != x.shape[0]):
        raise ValueError(f"positions of shape {tuple(positions.shape)} are (batch, seq); x {tuple(x.shape)} "
                         f"must be (batch, ..., seq, head_dim) with the same batch")


def apply_rope(x: torch.Tensor, positions: torch.Tensor,
               base: float = 10000.0, layout: str = "interleaved",
               scaling: dict | None = None) -> torch.Tensor:
    """Rotate x (..., seq, head_dim) by its positions: (seq,), or
    (batch, seq) for x (batch, heads, seq, d).

    Returns x's shape and dtype; the angles are computed in float32.
    """
    _check_rope_input(x, positions, layout)
    cos, sin = rope_cos_sin(positions, x.shape[-1], base, scaling)
    #                                       (..., d/2) fp32
    cos, sin = _broadcast_angles(cos, sin, x)   # broadcast over heads
    return _rotate(x, cos, sin, layout)


def _check_qk_weight(w, n_heads) -> None:
    check_tensor("w", w, 2)
    if check_positive_int("n_heads", n_heads) and w.shape[0] % n_heads:
        raise ValueError(f"n_heads ({n_heads}) must divide w's rows ({w.shape[0]})")
    _check_head_dim(w.shape[0] // n_heads)


def interleaved_to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Permute the rows of W_Q or W_K (n_heads * head_dim, d_in) from the
    interleaved layout to the half layout: within each head, rows
    (0, 1, 2, 3, ...) = pairs (0,1), (2,3), ... become
    (0, 2, 4, ..., 1, 3, 5, ...). This is the permutation Hugging Face's
    Meta-to-HF conversion applies."""
    _check_qk_weight(w, n_heads)
    rows, d_in = w.shape
    pairs = w.view(n_heads, rows // n_heads // 2, 2, d_in)
    return pairs.transpose(1, 2).reshape(rows, d_in)


def half_to_interleaved(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The inverse of interleaved_to_half."""
    _check_qk_weight(w, n_heads)
    rows, d_in = w.shape
    return w.view(n_heads, 2, rows // n_heads // 2, d_in).transpose(1, 2).reshape(rows, d_in)


class RotaryEmbedding(nn.Module):
    """RoPE with cos/sin tables (float32) for positions 0 .. max_seq_len - 1, made once.

    Use it as the Attention module's position hook: ``q, k = rope(q, k, positions)``. It rotates
    queries and keys only; values are never rotated. ``positions`` may also be the (cos, sin) pair
    that :meth:`angles` returned for them: Llama.forward looks the angles up once and hands the
    pair to every layer, as Hugging Face's LlamaModel does.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, layout: str = "interleaved",
                 scaling: dict | None = None, device=None):
        super().__init__()
        check_int("max_seq_len", max_seq_len, 1, MAX_POSITION)
        self.head_dim, self.max_seq_len, self.base = head_dim, max_seq_len, base
        self.layout = check_one_of("layout", layout, LAYOUTS)
        self.scaling = dict(scaling) if scaling else None
        cos, sin = rope_cos_sin(torch.arange(max_seq_len, device=device), head_dim, base, scaling)
        self.register_buffer("cos", cos, persistent=False)   # (max_seq_len, d/2) float32
        self.register_buffer("sin", sin, persistent=False)

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows of the cos and sin tables at ``positions`` (..., T): float32, (..., T, d/2).

        A lookup inside every forward, so it checks metadata only: the positions' values must be
        in [0, max_seq_len), which the entry points check (Llama.forward; :meth:`forward` when
        given positions rather than angles). Outside the table, indexing raises IndexError on a CPU.
        """
        check_tensor("positions", positions, integer=True, like=self.cos, like_name="the RoPE tables")
        return self.cos[positions], self.sin[positions]                   # (..., T, d/2) each

    def forward(self, q: torch.Tensor, k: torch.Tensor,
                positions: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k (..., T, d). ``positions``: (T,) or (B, T) integers, whose values are checked
        here (the layer used on its own is an entry point), or the (cos, sin) pair of :meth:`angles`."""
        if not isinstance(positions, tuple):
            check_positions(positions, self.max_seq_len)                   # reads the values
        cos, sin = positions if isinstance(positions, tuple) else self.angles(positions)  # (..., T, d/2)
        cos, sin = _broadcast_angles(cos, sin, q)                # (B, 1, T, d/2) for a batch of positions
        return _rotate(q, cos, sin, self.layout), _rotate(k, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, base={self.base}, layout={self.layout!r}"
