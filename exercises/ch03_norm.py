# Exercise stub, generated from the course's key (solutions/ch03_norm.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 3 exercises: RMSNorm, LayerNorm and the Pre-Norm residual step.

Read Chapter 3 ("RMSNorm, residuals and Pre-Norm") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 3

All functions normalize over the LAST dimension, compute in float32 and return x's dtype.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight.

    As LLaMA does it: compute in float32, cast the normalized x back to x's dtype, THEN multiply
    by the weight. x (..., d), weight (d,).
    """
    raise NotImplementedError(
        'Exercise 3.1 rms_norm (Chapter 3, section 3.2 "LayerNorm and RMSNorm")'
        ': not implemented yet'
    )


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor = None, eps: float = 1e-5) -> torch.Tensor:
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias (bias optional).

    var is the population variance (divide by d, not d - 1). Compute in float32, return x's dtype.
    """
    raise NotImplementedError(
        'Exercise 3.2 layer_norm (Chapter 3, section 3.2 "LayerNorm and RMSNorm")'
        ': not implemented yet'
    )


def pre_norm_residual(x: torch.Tensor, sublayer, norm_weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """One Pre-Norm residual step: y = x + sublayer(RMSNorm(x)).

    ``sublayer`` is any callable (..., d) -> (..., d), e.g. attention or the FFN. Use your rms_norm.
    """
    raise NotImplementedError(
        'Exercise 3.3 pre_norm_residual (Chapter 3, section 3.3 "Pre-Norm and Post-Norm")'
        ': not implemented yet'
    )
# generated stub, sha256 9b251834351af923a808540814db89b8f5c3885fbc2409d04f077b5fa9188e92
