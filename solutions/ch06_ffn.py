"""Chapter 6 exercises: the SiLU activation and the SwiGLU feed-forward network.

Read Chapter 6 ("The FFN: activations, GLU and SwiGLU") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 6

Weights use nn.Linear's layout (out_features, in_features), so a linear map is x @ W.T.
"""

import torch


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x * sigmoid(x), elementwise."""
    # BEGIN SOLUTION Exercise 6.1 silu (Chapter 6, section 6.2 "Activations")
    return x * torch.sigmoid(x)
    # END SOLUTION


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU(x) = W_down( SiLU(W_gate x) * (W_up x) ).

    x (..., d_model); w_gate, w_up (d_ff, d_model); w_down (d_model, d_ff). No biases.
    """
    # BEGIN SOLUTION Exercise 6.2 swiglu (Chapter 6, section 6.4 "SwiGLU")
    return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
    # END SOLUTION
