"""The next-token objective (Chapter 1, worked again in Chapter 2).

    L = -(1 / (T - 1)) * sum_{t=1}^{T-1} log p(x_t | x_<t)

The logits at position t predict token t + 1, so the targets are the inputs
shifted left by one.
"""

from __future__ import annotations

import torch

from .checks import check_tensor, check_token_ids


def _check_loss(logits, token_ids) -> None:
    check_tensor("logits", logits, 3, floating=True)
    check_token_ids("token_ids", token_ids, logits.shape[-1], like=logits,
                    like_name="logits")
    if token_ids.shape != logits.shape[:2]:
        raise ValueError(f"token_ids must be (batch, seq) = "
                         f"{tuple(logits.shape[:2])}, "
                         f"got {tuple(token_ids.shape)}")
    if logits.shape[0] < 1 or logits.shape[1] < 2:
        raise ValueError("need at least 1 sequence of at least 2 positions "
                         "to predict a next token, got logits of shape "
                         f"{tuple(logits.shape)}")


def next_token_loss(logits: torch.Tensor,
                    token_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ``token_ids[:, t + 1]`` from
    ``logits[:, t]``.

    logits     (batch, seq, vocab)  scores for the token after each position
    token_ids  (batch, seq)         the sequence the logits were computed from

    log p = z - logsumexp(z) is computed in float32 (float64 stays float64)
    with the maximum subtracted, so logits of magnitude 1e4 give a finite
    loss. Returns a scalar in that dtype.
    """
    _check_loss(logits, token_ids)
    wide = torch.promote_types(logits.dtype, torch.float32)
    z = logits[:, :-1].to(wide)             # (B, T-1, V)  predictions
    targets = token_ids[:, 1:].long()       # (B, T-1)     what came next
    z = z - z.amax(dim=-1, keepdim=True)    # (B, T-1, V)  max 0: exp() <= 1
    log_probs = z - torch.logsumexp(z, dim=-1, keepdim=True)
    #                                         (B, T-1, V)  log softmax
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    #                                         (B, T-1)     log p(x_t | x_<t)
    return -picked.mean()                   # ()  mean negative log-likelihood
