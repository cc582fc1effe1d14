"""Normalization (Chapter 3): RMSNorm, as LLaMA uses it, and LayerNorm for comparison.

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta      centre, then scale
    RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * gamma                      scale only

Both act on the last dimension, one token at a time. RMSNorm keeps the direction of x and sets
its root-mean-square to |gamma| (for a constant gamma); it skips the mean, and the bias.
"""

from __future__ import annotations

import torch
from torch import nn


def _check(x: torch.Tensor, weight: torch.Tensor, eps: float, name: str = "weight") -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"x and {name} must be torch.Tensors")
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"{name} must have shape {tuple(x.shape[-1:])} (x's last dimension, x is "
                         f"{tuple(x.shape)}), got {tuple(weight.shape)}")
    _check_eps(eps)


def _check_eps(eps) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"eps must be a number > 0, got {eps!r}")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension.

    As in LLaMA: the statistics are computed in float32, the result is cast back to x's dtype,
    and only then multiplied by the weight. Returns x's dtype. x (..., d), weight (d,).
    """
    _check(x, weight, eps)
    h = x.float()                                            # (..., d) float32
    inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1) 1 / RMS(x)
    return (weight * (h * inv_rms).to(x.dtype)).to(x.dtype)  # (..., d) gamma after the cast back


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, over the last dimension.

    var is the biased (population) variance, as in torch.nn.LayerNorm. Computed in float32,
    returned in x's dtype. x (..., d), weight and bias (d,).
    """
    _check(x, weight, eps)
    if bias is not None:
        _check(x, bias, eps, "bias")
    h = x.float()                                             # (..., d)
    centred = h - h.mean(-1, keepdim=True)                    # (..., d) mean 0
    y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)  # (..., d) variance 1
    y = y * weight.float()                                    # (..., d)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain gamma (initialised to ones). Hugging Face's LlamaRMSNorm."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        _check_eps(eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
