"""Helpers for tests and notebooks: weights at a realistic scale.

Freshly initialised models have tiny weights (std 0.02), small enough that many mistakes -- a
wrong RoPE layout, a missing norm -- change the outputs by less than a loose tolerance. Tests
therefore use weights with std 0.2 and norm gains around 1.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def realistic_weights_(model: nn.Module, std: float = 0.2, norm_std: float = 0.1) -> nn.Module:
    """In place: every matrix ~ N(0, std^2), every norm weight ~ 1 + N(0, norm_std^2). Uses torch's
    global generator (seed it first). Returns the model."""
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1 + norm_std * torch.randn_like(p))
        else:
            p.copy_(std * torch.randn_like(p))
    return model


class ConstantLogits(nn.Module):
    """A toy language model for tests of decoding rules: the same next-token logits (V,) at every
    position, whatever came before. ids (B, T) -> logits (B, T, V)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.register_buffer("row", logits)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.row.expand(ids.shape[0], ids.shape[1], -1)


class LastTwoTokens(nn.Module):
    """A toy language model whose next-token logits depend on the last two tokens only:
    table (K, K, V), looked up at (previous token mod K, token mod K). ids (B, T) -> (B, T, V)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.register_buffer("table", table)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        k = self.table.shape[0]
        prev = torch.cat([ids[:, :1], ids[:, :-1]], dim=1)                 # (B, T)
        return self.table[prev % k, ids % k]                               # (B, T, V)


def value_and_grad(fn, wrt: int, *args):
    """(fn(*args) detached, d fn / d args[wrt]) where fn runs, or (value, None) when the value
    carries no gradient back to args[wrt] (cut off from the graph: .item(), torch.tensor(...),
    .detach()). Runs in the process that holds fn: called through ``gradient_in_worker``."""
    x = args[wrt].detach().clone().requires_grad_(True)
    with torch.enable_grad():
        value = fn(*args[:wrt], x, *args[wrt + 1:])
        if not isinstance(value, torch.Tensor) or value.grad_fn is None:
            return (value.detach() if isinstance(value, torch.Tensor) else value), None
        (grad,) = torch.autograd.grad(value.sum(), x, allow_unused=True)
    return value.detach(), grad


def gradient_in_worker(impl, name: str, wrt: int, *args):
    """value_and_grad of the implementation's function ``name``, computed where it runs: in the
    grader's worker process (autograd graphs do not cross processes) or here, for a module."""
    from llama_course.grade.sandbox import Remote

    if isinstance(impl, Remote):
        return impl._sandbox.request("call", value_and_grad, (getattr(impl, name), wrt, *args), {})
    return value_and_grad(getattr(impl, name), wrt, *args)
