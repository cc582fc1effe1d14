"""The KV cache (Chapter 8): keys and values of past positions, kept so decode steps reuse them.

One preallocated buffer per layer, (batch, n_kv_heads, max_seq_len, head_dim) for keys and the
same for values, on the model's device and dtype. ``update`` writes the new positions in place
(no concatenation that copies the whole cache every step) and returns the filled part.

    memory = 2 (K and V) * n_layers * batch * n_kv_heads * max_seq_len * head_dim * bytes per number

A tensor-parallel rank (Chapter 13) computes only n_kv_heads / N of the heads: ``cache_config(model)``
gives the config its cache is sized from.
"""

from __future__ import annotations

import torch

from .checks import check_int, check_positive_int, check_tensor, check_type
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
        check_type("config", config, LlamaConfig)
        max_seq_len = config.max_seq_len if max_seq_len is None else check_positive_int("max_seq_len", max_seq_len)
        shape = (check_positive_int("batch_size", batch_size), config.n_kv_heads, max_seq_len, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.batch_size, self.max_seq_len, self.n_layers = batch_size, max_seq_len, config.n_layers
        self.length = 0          # positions filled in every layer
        self._pending = 0        # positions being written by the current forward pass

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (batch, n_kv_heads, new, head_dim) after the cached positions of ``layer``;
        return all keys and values so far, (batch, n_kv_heads, length + new, head_dim)."""
        self._check_update(layer, k, v)
        end = self.length + k.shape[-2]
        self.keys[layer][:, :, self.length:end] = k       # in place: no copy of the past
        self.values[layer][:, :, self.length:end] = v
        self._pending = k.shape[-2]
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def _check_update(self, layer, k, v) -> None:
        check_int("layer", layer, 0, self.n_layers - 1)
        buffer = self.keys[layer]
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, 4, like=buffer, like_name="the cache")
            if t.dtype != buffer.dtype:
                raise TypeError(f"{name} is {t.dtype} but the cache holds {buffer.dtype}: make the cache "
                                f"with the model's dtype")
            if t.shape != (*buffer.shape[:2], k.shape[-2], buffer.shape[-1]):
                raise ValueError(f"{name} must be (batch, n_kv_heads, new, head_dim) = "
                                 f"{(*buffer.shape[:2], k.shape[-2], buffer.shape[-1])} as the cache was made, "
                                 f"got {tuple(t.shape)}")
        self.check_room(k.shape[-2])

    def check_room(self, new: int) -> None:
        """ValueError unless ``new`` more positions fit after the ``length`` cached ones."""
        if self.length + new > self.max_seq_len:
            raise ValueError(f"the KV cache holds {self.max_seq_len} positions (its capacity); "
                             f"{self.length} are filled and {new} more do not fit")

    def advance(self) -> None:
        """Called by the model after all layers wrote this step's positions."""
        self.length += self._pending
        self._pending = 0

    def reset(self) -> None:
        """Forget every position (the buffers are reused, not freed)."""
        self.length = self._pending = 0

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` positions (e.g. to rewind a rejected draft)."""
        self.length = check_int("length", length, 0, self.length)

    def nbytes(self) -> int:
        """Bytes held by the buffers (all layers, keys and values)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def cache_config(model) -> LlamaConfig:
    """The config a KV cache for ``model`` is sized from: ``model.config``, except on a
    tensor-parallel rank (Chapter 13), whose attention layers compute only their share of the
    key/value heads (``parallelize`` sets their ``n_kv_heads`` to n_kv_heads / N; the config keeps
    the whole model's count)."""
    local = getattr(model.layers[0].self_attn, "n_kv_heads", model.config.n_kv_heads)  # MLA: none per head
    return model.config if local == model.config.n_kv_heads else model.config.replace(n_kv_heads=local)
