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


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, eps: float = 1e-6):
    """The backward pass of y = x / sqrt(mean(x^2) + eps) * weight, by hand (no autograd).

    x and grad_out (..., d), weight (d,). With r = 1 / sqrt(mean(x^2) + eps), x_hat = x * r and
    g = grad_out * weight, return (grad_x, grad_weight):

        grad_weight = sum over every leading position of grad_out * x_hat          (d,)
        grad_x      = r * (g - x_hat * mean(g * x_hat))     (mean over the last dim)  (..., d)

    Compute in at least float32 (float64 stays float64) and return grad_x in x's dtype and
    grad_weight in weight's dtype. Do not call torch.autograd or .backward() inside:
    ``RMSNormFunction`` below uses this function as its backward, and the grader checks it with
    torch.autograd.gradcheck.

    Example: x = [[3., 4.]], weight = [1., 1.], grad_out = [[1., 0.]], eps = 0: r = 1/sqrt(12.5),
    x_hat = [0.8485, 1.1314], grad_weight = [0.8485, 0] and
    grad_x = r * ([1, 0] - x_hat * 0.8485 / 2) = [0.1810, -0.1358].
    """
    raise NotImplementedError(
        'Homework 3.A rms_norm_backward (Chapter 3, beyond section 3.2 "LayerNorm and RMSNorm")'
        ': not implemented yet'
    )


class RMSNormFunction(torch.autograd.Function):
    """rms_norm with a hand-written backward: RMSNormFunction.apply(x, weight, eps)."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        h = x.to(compute)
        return (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(compute)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x, grad_weight = rms_norm_backward(x, weight, grad_out, ctx.eps)
        return grad_x, grad_weight, None


def fold_norm_weights(state_dict: dict, n_layers: int) -> dict:
    """Fold every RMSNorm gain of a Hugging Face Llama state dict into the linear map after it.

    Because RMSNorm ends with a feature-wise product by its weight g, and the next linear map
    multiplies by W on the right of that (x @ W.T), W @ diag(g) does the same job with a gain of
    ones. Return a NEW dict (the input is not modified) where

        model.layers.{i}.input_layernorm.weight folds into self_attn.{q,k,v}_proj.weight,
        model.layers.{i}.post_attention_layernorm.weight folds into mlp.{gate,up}_proj.weight,
        model.norm.weight folds into lm_head.weight,

    each norm weight is replaced by ones (same shape, dtype and device), and every other tensor is
    unchanged. A tied checkpoint (no "lm_head.weight") gets an
    "lm_head.weight" of its own (the embedding times g): the embedding itself must NOT change.
    Multiply in float32 (float64 stays float64) and store in each weight's dtype.

    Example: a q_proj weight [[1, 2], [3, 4]] after a norm weight [10, 0.5] becomes
    [[10, 1], [30, 2]] (column j times g_j), and the norm weight becomes [1, 1].
    """
    raise NotImplementedError(
        'Homework 3.B fold_norm_weights (Chapter 3, beyond section 3.2 "LayerNorm and RMSNorm")'
        ': not implemented yet'
    )
# generated stub, sha256 2aced0bc021ebfba251f65ff600ed2f41cc3f96ba240c0cee934ae037051c7ea
