"""Token embeddings (Chapter 2): token ids -> vectors.

    x_i = E[t_i]          (a row lookup)
        = onehot(t_i) @ E (the same thing as a matrix product, V times slower)

E has shape (vocab_size, d_model); LLaMA-2 7B's is 32000 x 4096 = 131,072,000 parameters.
"""

from __future__ import annotations

import torch


def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Look up one row of ``weight`` (vocab, d) per id: (...,) int ids -> (..., d)."""
    if not isinstance(token_ids, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("token_ids and weight must be torch.Tensors")
    if token_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"token_ids must be int64 or int32, got {token_ids.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be (vocab_size, d_model), got shape {tuple(weight.shape)}")
    bad = first_out_of_range(token_ids, weight.shape[0])
    if bad is not None:
        raise ValueError(f"token_ids must be in [0, {weight.shape[0]}); got {bad}")
    return weight[token_ids]  # (..., d) advanced indexing: one row per id


def first_out_of_range(token_ids: torch.Tensor, vocab_size: int) -> int | None:
    """The first id outside [0, vocab_size), or None if there is none. Ids on the meta device have
    no values and are not checked. (One device-to-host copy on a GPU.)"""
    if token_ids.device.type == "meta" or not token_ids.numel():
        return None
    bad = token_ids[(token_ids < 0) | (token_ids >= vocab_size)]
    return int(bad[0]) if bad.numel() else None
