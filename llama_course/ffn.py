"""The feed-forward network (Chapter 6): SiLU and SwiGLU.

    SiLU(x)    = x * sigmoid(x)
    SwiGLU(x)  = W_down( SiLU(W_gate x) * (W_up x) )          * is elementwise

Weights are in nn.Linear layout (out_features, in_features): W_gate and W_up are (d_ff, d_model),
W_down is (d_model, d_ff). LLaMA uses no biases. Every position is transformed on its own.
"""

from __future__ import annotations

import torch
from torch import nn

from .linear import Linear, linear


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU (swish): x * sigmoid(x). Unbounded above, minimum about -0.278 at x about -1.278."""
    return x * torch.sigmoid(x)


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU FFN: x (..., d_model) -> (..., d_model) through a hidden width d_ff."""
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got {getattr(w, 'shape', type(w).__name__)}")
    d_model = x.shape[-1]
    if w_gate.shape[1] != d_model or w_up.shape != w_gate.shape:
        raise ValueError(f"w_gate and w_up must both be (d_ff, d_model={d_model}); got w_gate "
                         f"{tuple(w_gate.shape)}, w_up {tuple(w_up.shape)}")
    if w_down.shape != (d_model, w_gate.shape[0]):
        raise ValueError(f"w_down must be (d_model, d_ff) = {(d_model, w_gate.shape[0])}, got {tuple(w_down.shape)}")
    # linear(x, w) = x @ w.T, as F.linear (it spreads a decode step's few rows over the CPU cores, Ch. 8)
    gate = silu(linear(x, w_gate))      # (..., d_ff) the gate branch: x W_gate^T
    up = linear(x, w_up)                # (..., d_ff) the value branch: x W_up^T
    return linear(gate * up, w_down)    # (..., d_model)


class SwiGLU(nn.Module):
    """LLaMA's FFN with Hugging Face's names: gate_proj, up_proj, down_proj (Meta: w1, w3, w2).
    ``Linear`` is nn.Linear with a decode step's few rows spread over the CPU's cores (Chapter 8)."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.gate_proj = Linear(d_model, d_ff, bias=False, device=device, dtype=dtype)
        self.up_proj = Linear(d_model, d_ff, bias=False, device=device, dtype=dtype)
        self.down_proj = Linear(d_ff, d_model, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)
