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
"""

from __future__ import annotations

import torch

from .attention import merge_heads
from .checks import check_int, check_positive_int, check_type
from .config import LlamaConfig, is_sliding_layer
from .gqa import gqa_attention
from .kv_cache import KVCache
from .model import Attention, causal_inputs


def sliding_window_mask(q_index: torch.Tensor, kv_index: torch.Tensor, window: int) -> torch.Tensor:
    """Boolean (T, S): True where query at index q_index[t] may see the key at index kv_index[s],
    that is  q - W < k <= q."""
    check_positive_int("window", window)
    distance = q_index[:, None] - kv_index[None, :]                   # (T, S) how far back each key is
    return (distance >= 0) & (distance < window)                      # (T, S)


def banded_mask(q_len: int, window: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """causal_mask with a window: (q_len, kv_len), the queries being the last q_len positions."""
    kv_len = check_positive_int("q_len", q_len) if kv_len is None else check_positive_int("kv_len", kv_len)
    if kv_len < q_len:
        raise ValueError(f"kv_len ({kv_len}) must be >= q_len ({q_len}): queries are the last kv positions")
    q_index = torch.arange(kv_len - q_len, kv_len, device=device)     # (q_len,)
    return sliding_window_mask(q_index, torch.arange(kv_len, device=device), window)


class SlidingWindowAttention(Attention):
    """Attention (Chapter 4-9, GQA and qk_norm included) that sees only the last ``window`` keys."""

    def __init__(self, config: LlamaConfig, window: int, backend: str = "explicit", position_hook=None,
                 device=None, dtype=None):
        super().__init__(config, backend, position_hook, device=device, dtype=dtype)
        self.window = check_positive_int("window", window)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                cache=None, layer_idx: int = 0) -> torch.Tensor:
        """As Attention.forward; ``mask`` (if given) covers sequence indices 0 .. past + T - 1."""
        seq, past = x.shape[1], cache.length if cache is not None else 0
        mask, positions = causal_inputs(seq, past, device=x.device, mask=mask, positions=positions)
        q, k, v = self.project(x)                                     # (B, H, T, hd), (B, H_kv, T, hd) twice
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.position_hook is not None:
            q, k = self.position_hook(q, k, positions)
        q_index = torch.arange(past, past + seq, device=x.device)     # (T,) sequence indices of the queries
        if isinstance(cache, SlidingWindowKVCache):
            k, v, kv_index = cache.update_window(layer_idx, k, v)     # (B, H_kv, S, hd), S <= W - 1 + T
        elif cache is not None:
            k, v = cache.update(layer_idx, k, v)                      # a full cache: every index kept
            kv_index = torch.arange(past + seq, device=x.device)
        else:
            kv_index = q_index
        band = sliding_window_mask(q_index, kv_index, self.window)    # (T, S)
        mask = band if mask is None else mask[..., kv_index] & band   # (..., T, S) padding kept
        out = gqa_attention(q, k, v, mask, self.backend)              # (B, H, T, hd)
        return self.o_proj(merge_heads(out))                          # (B, T, d)

    def extra_repr(self) -> str:
        return f"window={self.window}"


class SlidingWindowKVCache(KVCache):
    """A KVCache whose sliding layers keep a rolling buffer of min(W, max_seq_len) slots; full
    layers keep every position as before."""

    def __init__(self, config: LlamaConfig, batch_size: int, max_seq_len: int | None = None,
                 device=None, dtype=None):
        check_type("config", config, LlamaConfig)
        max_seq_len = config.max_seq_len if max_seq_len is None else check_positive_int("max_seq_len", max_seq_len)
        check_positive_int("batch_size", batch_size)
        self.sliding = [is_sliding_layer(config, i) for i in range(config.n_layers)]
        slots = [min(config.sliding_window, max_seq_len) if s else max_seq_len for s in self.sliding]
        shapes = [(batch_size, config.n_kv_heads, n, config.head_dim) for n in slots]
        self.keys = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.values = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.batch_size, self.max_seq_len, self.n_layers = batch_size, max_seq_len, config.n_layers
        self.length = self._pending = 0

    def update_window(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Return the keys and values a query of this step may need -- the last W - 1 cached
        positions and the new ones -- with their sequence indices (S,); then keep the newest W."""
        self._check_window_update(layer, k, v)                  # a sliding layer; shapes, dtype, capacity
        past, new = self.length, k.shape[-2]
        buf_k, buf_v = self.keys[layer], self.values[layer]
        slots = buf_k.shape[-2]
        held = torch.arange(max(0, past - slots + 1), past, device=k.device)        # (h,) indices still visible
        keys = torch.cat([buf_k[:, :, held % slots], k], dim=2)                      # (B, H_kv, h + new, hd)
        values = torch.cat([buf_v[:, :, held % slots], v], dim=2)
        kept = torch.arange(past + max(0, new - slots), past + new, device=k.device)  # the newest <= W
        buf_k[:, :, kept % slots] = k[:, :, kept - past]                             # in place, slot p mod W
        buf_v[:, :, kept % slots] = v[:, :, kept - past]
        self._pending = new
        return keys, values, torch.cat([held, torch.arange(past, past + new, device=k.device)])

    def _check_window_update(self, layer, k, v) -> None:
        if not self.sliding[check_int("layer", layer, 0, self.n_layers - 1)]:
            raise ValueError(f"layer {layer} is a full-attention layer: use update")
        self._check_update(layer, k, v)

    def crop(self, length: int) -> None:
        """A rolling buffer has overwritten old positions: it cannot be rewound."""
        if any(self.sliding) and length != self.length:
            raise ValueError(f"a sliding-window cache cannot be cropped (length {length}, holds {self.length})")
        super().crop(length)
