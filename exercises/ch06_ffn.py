# Exercise stub, generated from the course's key (solutions/ch06_ffn.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 6 exercises: the SiLU activation and the SwiGLU feed-forward network.

Read Chapter 6 ("The FFN: activations, GLU and SwiGLU") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 6

Weights use nn.Linear's layout (out_features, in_features), so a linear map is x @ W.T.
"""

import torch


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x * sigmoid(x), elementwise."""
    raise NotImplementedError('Exercise 6.1 silu (Chapter 6, section 6.2 "Activations"): not implemented yet')


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU(x) = W_down( SiLU(W_gate x) * (W_up x) ).

    x (..., d_model); w_gate, w_up (d_ff, d_model); w_down (d_model, d_ff). No biases.
    """
    raise NotImplementedError('Exercise 6.2 swiglu (Chapter 6, section 6.4 "SwiGLU"): not implemented yet')
# generated stub, sha256 6927401c8db9cd5e577b294a244fed29c951af7ba89fe55a46aa5e1008a1f4ed
