"""Normalization (Chapter 3): RMSNorm, as LLaMA uses it, and LayerNorm for comparison.

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta      centre, then scale
    RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * gamma                      scale only

Both act on the last dimension, one token at a time. RMSNorm keeps the direction of x and sets
its root-mean-square to |gamma| (for a constant gamma); it skips the mean, and the bias.
The statistics are computed in float32, or in float64 for float64 inputs ("at least float32").
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_positive_int, check_positive_number, check_tensor


def _check_norm(x, weight, eps, bias=None) -> None:
    check_tensor("x", x, min_ndim=1, floating=True)
    check_tensor("weight", weight, shape=x.shape[-1:], like=x, like_name="x")
    if bias is not None:
        check_tensor("bias", bias, shape=x.shape[-1:], like=x, like_name="x")
    check_positive_number("eps", eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor,
             eps: float = 1e-6) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension.

    As in LLaMA: the statistics are computed in float32 (at least), the
    result is cast back to x's dtype, and only then multiplied by the
    weight. Returns x's dtype. x (..., d), weight (d,).
    Limit, as in LLaMA and Hugging Face: in float32 the sum of a row's d
    squares overflows once it passes 3.4e38, so a row of d entries of
    magnitude above about 1.8e19 / sqrt(d) (2.9e17 for d = 4096) has an
    infinite mean of squares and comes out as zeros. Activations of a
    working model are many orders of magnitude smaller; a float64 input
    computes in float64, where the same limit is about 1.3e154 / sqrt(d).
    """
    _check_norm(x, weight, eps)
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    #                                     (..., d) at least float32
    inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    #                                     (..., 1) 1 / RMS(x)
    return (weight * (h * inv_rms).to(x.dtype)).to(x.dtype)
    #                                     (..., d) gamma after the cast back


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, over the last dimension.

    var is the biased (population) variance, as in torch.nn.LayerNorm. Computed in float32 (at
    least), returned in x's dtype. x (..., d), weight and bias (d,).
    """
    _check_norm(x, weight, eps, bias)
    dtype = torch.promote_types(x.dtype, torch.float32)
    h = x.to(dtype)                                                 # (..., d)
    centred = h - h.mean(-1, keepdim=True)                          # (..., d) mean 0
    y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)  # (..., d) variance 1
    y = y * weight.to(dtype)                                        # (..., d)
    if bias is not None:
        y = y + bias.to(dtype)
    return y.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain gamma (initialised to ones). Hugging Face's LlamaRMSNorm."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        dim, self.eps = check_positive_int("dim", dim), check_positive_number("eps", eps)
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
