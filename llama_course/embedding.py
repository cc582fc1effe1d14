"""Token embeddings (Chapter 2): token ids -> vectors.

    x_i = E[t_i]          (a row lookup)
        = onehot(t_i) @ E (the same thing as a matrix product, V times slower)

E has shape (vocab_size, d_model); LLaMA-2 7B's is 32000 x 4096 =
131,072,000 parameters.
"""

from __future__ import annotations

import torch

from .checks import check_tensor, check_token_ids


def _check_embed(token_ids, weight) -> None:
    check_tensor("weight", weight, 2)
    check_token_ids("token_ids", token_ids, weight.shape[0], like=weight,
                    like_name="weight")


def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Look up one row of ``weight`` (vocab, d) per id:
    (...,) int ids -> (..., d)."""
    _check_embed(token_ids, weight)
    return weight[token_ids]  # (..., d) advanced indexing: one row per id
