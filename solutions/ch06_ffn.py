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

    x (..., d_model); w_gate, w_up (d_ff, d_model); w_down (d_model, d_ff) -- nn.Linear's
    (out_features, in_features) layout, so W_gate x is x @ w_gate.T. No biases. Return
    (..., d_model) in x's dtype.
    """
    # BEGIN SOLUTION Exercise 6.2 swiglu (Chapter 6, section 6.4 "SwiGLU")
    return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def swiglu_backward(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                    grad_out: torch.Tensor):
    """The backward pass of y = SwiGLU(x) = (SiLU(x W_gate^T) * (x W_up^T)) W_down^T, by hand.

    x and grad_out (..., d_model); w_gate, w_up (d_ff, d_model); w_down (d_model, d_ff) (the layout
    of Exercise 6.2). Return (grad_x, grad_w_gate, grad_w_up, grad_w_down), the gradients of
    sum(grad_out * y), each with the shape of its input. The weight gradients sum over every
    leading position of x. You need SiLU'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))). Do not use
    torch.autograd or .backward(). Work in the inputs' dtype (float32 or float64) and device.

    Example (d_model = d_ff = 1): x = [[1.]], w_gate = w_up = w_down = [[1.]], grad_out = [[1.]]:
    y = SiLU(1) * 1 = 0.7311, so grad_w_down = 0.7311,
    grad_w_up = 0.7311, grad_w_gate = SiLU'(1) = 0.9277, grad_x = 0.7311 + 0.9277 = 1.6587 (to 4 places).
    """
    # BEGIN SOLUTION Homework 6.A swiglu_backward (Chapter 6, beyond section 6.4 "SwiGLU")
    xs = x.reshape(-1, x.shape[-1])                              # (N, d)
    dy = grad_out.reshape(-1, grad_out.shape[-1])                # (N, d)
    a, u = xs @ w_gate.T, xs @ w_up.T                            # (N, f) each
    s = torch.sigmoid(a)
    h = a * s * u                                                # (N, f) the gated hidden layer
    dh = dy @ w_down                                             # (N, f)
    grad_w_down = dy.T @ h                                       # (d, f)
    du = dh * a * s                                              # (N, f)
    da = dh * u * s * (1 + a * (1 - s))                          # (N, f)
    grad_w_up = du.T @ xs                                        # (f, d)
    grad_w_gate = da.T @ xs                                      # (f, d)
    grad_x = da @ w_gate + du @ w_up                             # (N, d)
    return grad_x.reshape(x.shape), grad_w_gate, grad_w_up, grad_w_down
    # END SOLUTION


def prune_ffn(w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, x_calib: torch.Tensor,
              keep: int):
    """Structured pruning of a SwiGLU FFN: keep the ``keep`` hidden units that matter most on
    calibration data, and return smaller weights (w_gate', w_up', w_down') with d_ff = keep.

    Hidden unit j contributes h_nj * W_down[:, j] to token n's output, where
    h = SiLU(x W_gate^T) * (x W_up^T) (N, d_ff). Its importance is the mean size of that
    contribution over the calibration tokens, s_j = mean_n |h_nj| * ||W_down[:, j]||_2, computed in
    float32 (float64 stays float64). Keep the ``keep`` largest s_j (ties: the lower index first),
    in their ORIGINAL order: rows of w_gate and w_up, columns of w_down. x_calib (..., d_model).
    The returned weights keep the inputs' dtype and device. keep not in [1, d_ff] -> ValueError
    naming keep.

    Example (d_model = 1, d_ff = 3): w_gate = [[10], [10], [10]], w_up = [[1], [3], [2]],
    w_down = [[1, 1, 1]], x_calib = [[1.]]: h ~ 10 * [1, 3, 2], so keep=2 keeps units 1 and 2:
    w_gate' = [[10], [10]], w_up' = [[3], [2]], w_down' = [[1, 1]].
    """
    # BEGIN SOLUTION Homework 6.B prune_ffn (Chapter 6, beyond section 6.4 "SwiGLU")
    d_ff = w_gate.shape[0]
    if not 1 <= keep <= d_ff:
        raise ValueError(f"keep must be in [1, {d_ff}], got {keep}")
    compute = torch.float64 if x_calib.dtype == torch.float64 else torch.float32
    x = x_calib.reshape(-1, x_calib.shape[-1]).to(compute)                         # (N, d)
    a = x @ w_gate.to(compute).T                                                   # (N, f)
    h = a * torch.sigmoid(a) * (x @ w_up.to(compute).T)                            # (N, f)
    score = h.abs().mean(dim=0) * w_down.to(compute).norm(dim=0)                   # (f,)
    order = sorted(range(d_ff), key=lambda j: (-score[j].item(), j))[:keep]        # best first
    kept = torch.tensor(sorted(order), device=w_gate.device)                       # original order
    return w_gate[kept], w_up[kept], w_down[:, kept]
    # END SOLUTION
