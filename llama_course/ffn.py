"""The feed-forward network (Chapter 6): SiLU and SwiGLU.

    SiLU(x)    = x * sigmoid(x)
    SwiGLU(x)  = W_down( SiLU(W_gate x) * (W_up x) )          * is elementwise

Weights are in nn.Linear layout (out_features, in_features): W_gate and W_up
are (d_ff, d_model), W_down is (d_model, d_ff). LLaMA uses no biases. Every
position is transformed on its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_positive_int, check_tensor
from .linear import Linear


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU (swish): x * sigmoid(x). Unbounded above, minimum about -0.278
    at x about -1.278."""
    return x * torch.sigmoid(x)


def _check_swiglu(x, w_gate, w_up, w_down) -> None:
    check_tensor("x", x, min_ndim=1, floating=True)
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        check_tensor(name, w, 2, like=x, like_name="x")
    d_model, d_ff = x.shape[-1], w_gate.shape[0]
    if (w_gate.shape != (d_ff, d_model) or w_up.shape != w_gate.shape
            or d_ff == 0):
        raise ValueError(f"w_gate and w_up must both be (d_ff >= 1, "
                         f"d_model={d_model}); got w_gate "
                         f"{tuple(w_gate.shape)}, w_up {tuple(w_up.shape)}")
    if w_down.shape != (d_model, d_ff):
        raise ValueError(f"w_down must be (d_model, d_ff) = "
                         f"{(d_model, d_ff)}, got {tuple(w_down.shape)}")


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
           w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU FFN: x (..., d_model) -> (..., d_model) through a hidden
    width d_ff."""
    _check_swiglu(x, w_gate, w_up, w_down)
    gate = silu(F.linear(x, w_gate))    # (..., d_ff) gate branch: x W_gate^T
    up = F.linear(x, w_up)              # (..., d_ff) value branch: x W_up^T
    return F.linear(gate * up, w_down)  # (..., d_model)


class SwiGLU(nn.Module):
    """LLaMA's FFN with Hugging Face's names: gate_proj, up_proj, down_proj
    (Meta: w1, w3, w2). Each projection is a ``Linear`` layer (nn.Linear,
    Chapter 8 says what it adds)."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        d_model = check_positive_int("d_model", d_model)
        d_ff = check_positive_int("d_ff", d_ff)
        kw = {"bias": False, "device": device, "dtype": dtype}
        self.gate_proj = Linear(d_model, d_ff, **kw)
        self.up_proj = Linear(d_model, d_ff, **kw)
        self.down_proj = Linear(d_ff, d_model, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = silu(self.gate_proj(x)) * self.up_proj(x)   # (..., d_ff)
        return self.down_proj(gated)                        # (..., d_model)
