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
"""

from __future__ import annotations

import math

import torch
from torch import nn

LAYOUTS = ("interleaved", "half")
ROPE_TYPES = ("default", "linear", "ntk", "dynamic", "llama3")
_SCALING_KEYS = {  # what each rope_type reads besides "factor"
    "dynamic": ("original_max_position_embeddings",),
    "llama3": ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}


def _check_head_dim(head_dim) -> None:
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even int (RoPE rotates pairs), got {head_dim!r}")


def _check_base(base) -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ValueError(f"base must be a number > 0, got {base!r}")


def rope_inv_freq(head_dim: int, base: float = 10000.0, scaling: dict | None = None,
                  seq_len: int | None = None, device=None) -> torch.Tensor:
    """The rotation speeds w_k = base^(-2k/d), k = 0 .. d/2 - 1, in float32, optionally scaled.

    ``scaling`` follows Hugging Face's ``rope_parameters`` / ``rope_scaling``:
        {"rope_type": "linear", "factor": s}       position interpolation: w_k / s (Chen et al. 2023)
        {"rope_type": "ntk", "factor": s}          NTK-aware: base * s^(d / (d - 2)), a static stretch
        {"rope_type": "dynamic", "factor": s, "original_max_position_embeddings": L}
                                                   NTK with s grown to fit ``seq_len`` (none below L)
        {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
         "original_max_position_embeddings": 8192} Llama 3.1: slow pairs / 8, fast pairs kept,
                                                   a smooth blend in between
    """
    _check_head_dim(head_dim)
    _check_base(base)
    scaling = dict(scaling or {})
    rope_type = scaling.pop("rope_type", scaling.pop("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"scaling['rope_type'] must be one of {ROPE_TYPES}, got {rope_type!r}")
    factor = scaling.get("factor", 1.0)
    if rope_type != "default" and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1):
        raise ValueError(f"scaling['factor'] must be a number >= 1, got {factor!r}")
    missing = [key for key in _SCALING_KEYS.get(rope_type, ()) if key not in scaling]
    if missing:
        raise ValueError(f"scaling with rope_type {rope_type!r} needs {', '.join(missing)}")
    if rope_type == "llama3" and not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
        raise ValueError(f"scaling['high_freq_factor'] ({scaling['high_freq_factor']}) must be > "
                         f"scaling['low_freq_factor'] ({scaling['low_freq_factor']})")
    if rope_type == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    elif rope_type == "dynamic":
        original = scaling["original_max_position_embeddings"]
        seq_len = max(seq_len or original, original)
        base = base * ((factor * seq_len / original) - (factor - 1)) ** (head_dim / (head_dim - 2))
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim  # 2k/d
    inv_freq = 1.0 / (base ** exponents)                                                            # (d/2,)
    if rope_type == "linear":
        inv_freq = inv_freq / factor
    elif rope_type == "llama3":
        original = scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelength = 2 * math.pi / inv_freq                                   # (d/2,) tokens per turn
        smooth = (original / wavelength - low) / (high - low)                 # 0 (slow) .. 1 (fast)
        scaled = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelength >= original / high) & (wavelength <= original / low)
        inv_freq = torch.where(medium, blended, scaled)
    return inv_freq


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0, scaling: dict | None = None,
                 seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(m w_k) and sin(m w_k), each (*positions.shape, head_dim / 2), always in float32.

    Angles are computed in float32 whatever the model's dtype: in bfloat16, position 1000 times
    w_0 = 1 would already be off by several radians' worth of rounding (8 bits of mantissa).
    """
    _check_positions(positions)
    inv_freq = rope_inv_freq(head_dim, base, scaling, seq_len, device=positions.device)  # (d/2,)
    angles = positions.float()[..., None] * inv_freq                                      # (..., d/2)
    return angles.cos(), angles.sin()


def _check_positions(positions) -> None:
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an integer torch.Tensor, got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers, got {positions.dtype}")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate the pairs of x (..., d) by angles whose cos/sin are (..., d/2), in x's dtype."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # as Hugging Face does: angles in fp32, product in x's dtype
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]                        # (..., d/2) each: pairs (x_2i, x_2i+1)
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)  # (..., d)
    if layout == "half":
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]                      # (..., d/2) each: pairs (x_i, x_i+d/2)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)                # (..., d)
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _broadcast_angles(cos, sin, x, positions):
    """Line cos/sin (*positions.shape, d/2) up with x (..., seq, d)."""
    if positions.shape[-1] != x.shape[-2]:
        raise ValueError(f"positions {tuple(positions.shape)} must give one position per row of x "
                         f"{tuple(x.shape)} (length {x.shape[-2]})")
    if positions.dim() == 2:
        if x.dim() < 3 or positions.shape[0] != x.shape[0]:
            raise ValueError(f"positions of shape {tuple(positions.shape)} are (batch, seq); x {tuple(x.shape)} "
                             f"must be (batch, ..., seq, head_dim) with the same batch")
        while cos.dim() < x.dim():
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)        # (batch, 1, seq, d/2) for (B, H, T, d)
    elif positions.dim() != 1:
        raise ValueError(f"positions must be (seq,) or (batch, seq), got {tuple(positions.shape)}")
    return cos, sin


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               layout: str = "interleaved", scaling: dict | None = None) -> torch.Tensor:
    """Rotate x (..., seq, head_dim) by its positions: (seq,), or (batch, seq) for x (batch, heads, seq, d).

    Returns x's shape and dtype; the angles are computed in float32.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2:
        raise ValueError(f"x must be (..., seq, head_dim), got shape {tuple(x.shape)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    cos, sin = rope_cos_sin(positions, x.shape[-1], base, scaling)          # (..., d/2) fp32
    cos, sin = _broadcast_angles(cos, sin, x, positions)
    return _rotate(x, cos, sin, layout)


def interleaved_to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Permute the rows of W_Q or W_K (n_heads * head_dim, d_in) from the interleaved layout to
    the half layout: within each head, rows (0, 1, 2, 3, ...) = pairs (0,1), (2,3), ... become
    (0, 2, 4, ..., 1, 3, 5, ...). This is the permutation Hugging Face's Meta-to-HF conversion applies."""
    rows, d_in, head_dim = _check_qk_weight(w, n_heads)
    return w.view(n_heads, head_dim // 2, 2, d_in).transpose(1, 2).reshape(rows, d_in)


def half_to_interleaved(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The inverse of interleaved_to_half."""
    rows, d_in, head_dim = _check_qk_weight(w, n_heads)
    return w.view(n_heads, 2, head_dim // 2, d_in).transpose(1, 2).reshape(rows, d_in)


def _check_qk_weight(w, n_heads):
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"w must be a 2-D (n_heads * head_dim, d_in) weight, got {getattr(w, 'shape', w)}")
    rows, d_in = w.shape
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads <= 0 or rows % n_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a positive int dividing w's rows ({rows})")
    _check_head_dim(rows // n_heads)
    return rows, d_in, rows // n_heads


class RotaryEmbedding(nn.Module):
    """RoPE with cos/sin tables cached (float32) for positions 0 .. max_seq_len - 1.

    Use it as the Attention module's position hook: ``q, k = rope(q, k, positions)``. It rotates
    queries and keys only; values are never rotated.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, layout: str = "interleaved",
                 scaling: dict | None = None, device=None):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len <= 0:
            raise ValueError(f"max_seq_len must be a positive int, got {max_seq_len!r}")
        self.head_dim, self.max_seq_len, self.base, self.layout = head_dim, max_seq_len, base, layout
        self.scaling = dict(scaling) if scaling else None
        cos, sin = rope_cos_sin(torch.arange(max_seq_len, device=device), head_dim, base, scaling)
        self.register_buffer("cos", cos, persistent=False)   # (max_seq_len, d/2) float32
        self.register_buffer("sin", sin, persistent=False)
        self._last = None   # (positions, its version, cos, sin) of the last lookup

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.angles(positions)                        # (*positions.shape, d/2)
        cos, sin = _broadcast_angles(cos, sin, q, positions)
        return _rotate(q, cos, sin, self.layout), _rotate(k, cos, sin, self.layout)

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos and sin rows of ``positions``, float32, (*positions.shape, d/2).

        Every layer of one forward passes the same positions tensor, so the lookup and its range
        check (a device-to-host copy on a GPU) are done once and reused for as long as that very
        tensor is unchanged (same object, same version counter, which in-place writes bump)."""
        _check_positions(positions)
        version = None if positions.is_inference() else positions._version
        last = self._last
        if last is not None and last[0] is positions and version is not None and last[1] == version:
            return last[2], last[3]
        if positions.device.type != "meta" and positions.numel() and (
                positions.min() < 0 or positions.max() >= self.max_seq_len):
            raise ValueError(f"positions must be in [0, {self.max_seq_len}) (max_seq_len), got "
                             f"[{int(positions.min())}, {int(positions.max())}]")
        cos, sin = self.cos[positions], self.sin[positions]      # (*positions.shape, d/2)
        self._last = (positions, version, cos, sin)
        return cos, sin

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, base={self.base}, layout={self.layout!r}"
