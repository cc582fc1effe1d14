"""The KV cache (Chapter 8): keys and values of past positions, kept so decode steps reuse them.

One preallocated buffer per layer, (batch, n_kv_heads, max_seq_len, head_dim) for keys and the
same for values, on the model's device and dtype. ``update`` writes the new positions in place
(no concatenation that copies the whole cache every step) and returns the filled part.

    memory = 2 (K and V) * n_layers * batch * n_kv_heads * max_seq_len * head_dim * bytes per number
"""

from __future__ import annotations

import torch

from .config import LlamaConfig


class KVCache:
    """Per-layer key/value buffers and the number of positions filled so far (``length``)."""

    def __new__(cls, config=None, *args, **kwargs):
        if cls is KVCache and isinstance(config, LlamaConfig):   # Chapter 12: sliding windows and MLA
            from .variants import cache_class  # cache other things (variants.py)
            cls = cache_class(config)
        return super().__new__(cls)

    def __init__(self, config: LlamaConfig, batch_size: int, max_seq_len: int | None = None,
                 device=None, dtype=None):
        max_seq_len = config.max_seq_len if max_seq_len is None else max_seq_len
        for name, value in (("batch_size", batch_size), ("max_seq_len", max_seq_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        shape = (batch_size, config.n_kv_heads, max_seq_len, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.batch_size, self.max_seq_len, self.n_layers = batch_size, max_seq_len, config.n_layers
        self.length = 0          # positions filled in every layer
        self._pending = 0        # positions being written by the current forward pass

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (batch, n_kv_heads, new, head_dim) after the cached positions of ``layer``;
        return all keys and values so far, (batch, n_kv_heads, length + new, head_dim)."""
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an int in [0, {self.n_layers}), got {layer!r}")
        new = k.shape[-2]
        end = self.length + new
        if end > self.max_seq_len:
            raise ValueError(f"the KV cache holds {self.max_seq_len} positions (its capacity); "
                             f"{self.length} are filled and {new} more do not fit")
        batch, heads, _, head_dim = self.keys[layer].shape
        for name, t in (("k", k), ("v", v)):
            if t.shape != (batch, heads, new, head_dim):
                raise ValueError(f"{name} must be (batch, n_kv_heads, new, head_dim) = {(batch, heads, new, head_dim)} "
                                 f"as the cache was made, got {tuple(t.shape)}")
        self.keys[layer][:, :, self.length:end] = k       # in place: no copy of the past
        self.values[layer][:, :, self.length:end] = v
        self._pending = new
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self) -> None:
        """Called by the model after all layers wrote this step's positions."""
        self.length += self._pending
        self._pending = 0

    def reset(self) -> None:
        """Forget every position (the buffers are reused, not freed)."""
        self.length = self._pending = 0

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` positions (e.g. to rewind a rejected draft)."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length must be an int in [0, {self.length}], got {length!r}")
        self.length = length

    def nbytes(self) -> int:
        """Bytes held by the buffers (all layers, keys and values)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)
