"""Sliding-window attention (Chapter 12; Mistral 7B, the local layers of Gemma 2 and 3).

With a window of W tokens, the query at sequence index i sees the keys j with

    i - W < j <= i                        (W keys, itself included; causal as before)

One layer moves information at most W - 1 positions; L layers stacked move it up to L (W - 1):
the receptive field grows by W - 1 per layer, while each layer's work and cache stay bounded.

The cache of a sliding layer is a rolling buffer of W slots: position p is written to slot
p mod W, overwriting position p - W, which no later query can see. However long the generation
runs, the layer holds W positions. Layers may mix: ``config.layer_types`` lists
"sliding_attention" or "full_attention" per layer (Gemma 3: five local layers, then one global).

Windows count sequence indices, padding included, as transformers does.

The window is an argument of LLaMA's Attention (model.py): ``window_mask`` narrows its mask to
the band, and the KV cache keeps a sliding layer's positions in a rolling buffer (kv_cache.py).
"""

from __future__ import annotations

import torch

from .checks import check_positive_int


def sliding_window_mask(q_index: torch.Tensor, kv_index: torch.Tensor,
                        window: int) -> torch.Tensor:
    """Boolean (T, S): True where query at index q_index[t] may see the key
    at index kv_index[s], that is  q - W < k <= q."""
    check_positive_int("window", window)
    distance = q_index[:, None] - kv_index[None, :]
    #                                     (T, S) how far back each key is
    return (distance >= 0) & (distance < window)                # (T, S)


def banded_mask(q_len: int, window: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """causal_mask with a window: (q_len, kv_len), the queries being the last q_len positions."""
    kv_len = check_positive_int("q_len", q_len) if kv_len is None else check_positive_int("kv_len", kv_len)
    if kv_len < q_len:
        raise ValueError(f"kv_len ({kv_len}) must be >= q_len ({q_len}): queries are the last kv positions")
    q_index = torch.arange(kv_len - q_len, kv_len, device=device)     # (q_len,)
    return sliding_window_mask(q_index, torch.arange(kv_len, device=device), window)


def window_mask(mask: torch.Tensor | None, window: int, q_len: int, kv_len: int, end: int,
                device=None) -> torch.Tensor:
    """The mask of a sliding layer whose q_len queries and kv_len keys are the last positions
    before ``end`` (sequence indices end - q_len .. end - 1 and end - kv_len .. end - 1): the band
    q - W < k <= q, and ``mask`` (None, or covering indices 0 .. end - 1: causal, padding) kept."""
    q_index = torch.arange(end - q_len, end, device=device)           # (T,) sequence indices of the queries
    kv_index = torch.arange(end - kv_len, end, device=device)         # (S,) and of the keys
    band = sliding_window_mask(q_index, kv_index, window)             # (T, S)
    return band if mask is None else mask[..., kv_index] & band       # (..., T, S) padding kept
