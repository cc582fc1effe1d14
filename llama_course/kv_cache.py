"""The KV cache (Chapter 8): keys and values of past positions, kept so decode steps reuse them.

One preallocated buffer per layer, (batch, n_kv_heads, max_seq_len, head_dim) for keys and the
same for values, on the model's device and dtype. ``update`` writes the new positions in place
(no concatenation that copies the whole cache every step) and returns the filled part.

    memory = 2 (K and V) * n_layers * batch * n_kv_heads * max_seq_len * head_dim * bytes per number

Chapter 12's layers keep other buffers in the same cache, each layer by its kind
(config.attention_kind):

    full      keys, values (B, H_kv, S, hd)              every position
    sliding   keys, values (B, H_kv, min(W, S), hd)      a rolling buffer: position p in slot p mod W
    latent    c_kv (B, 1, S, r) as keys, k_pe (B, 1, S, d_r) as values       (MLA, mla.py)

``update`` always returns the last positions in order, so a caller knows their indices from the
shapes alone: the S keys returned end at the newest position.

A tensor-parallel rank (Chapter 13) computes only n_kv_heads / N of the heads: ``cache_config(model)``
gives the config its cache is sized from.
"""

from __future__ import annotations

import torch

from .checks import check_int, check_positive_int, check_tensor, check_type
from .config import LlamaConfig


def layer_shapes(config: LlamaConfig, layer: int, batch_size: int, max_seq_len: int) -> tuple[tuple, tuple]:
    """The shapes of layer ``layer``'s key and value buffers (see the module docstring)."""
    kind = config.attention_kind(layer)
    if kind == "latent":                                       # MLA: c_kv and k_pe, one "head"
        return (batch_size, 1, max_seq_len, config.kv_lora_rank), (batch_size, 1, max_seq_len, config.qk_rope_head_dim)
    slots = min(config.sliding_window, max_seq_len) if kind == "sliding" else max_seq_len
    shape = (batch_size, config.n_kv_heads, slots, config.head_dim)
    return shape, shape


class KVCache:
    """Per-layer key/value buffers and the number of positions filled so far (``length``)."""

    def __init__(self, config: LlamaConfig, batch_size: int, max_seq_len: int | None = None,
                 device=None, dtype=None):
        check_type("config", config, LlamaConfig)
        max_seq_len = config.max_seq_len if max_seq_len is None else check_positive_int("max_seq_len", max_seq_len)
        shapes = [layer_shapes(config, i, check_positive_int("batch_size", batch_size), max_seq_len)
                  for i in range(config.n_layers)]
        self.keys = [torch.zeros(k, device=device, dtype=dtype) for k, _ in shapes]
        self.values = [torch.zeros(v, device=device, dtype=dtype) for _, v in shapes]
        self.rolling = [config.attention_kind(i) == "sliding" for i in range(config.n_layers)]  # Chapter 12
        self.batch_size, self.max_seq_len, self.n_layers = batch_size, max_seq_len, config.n_layers
        self.length = 0          # positions filled in every layer
        self._pending = 0        # positions being written by the current forward pass

    def update(self, layer: int, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (batch, n_kv_heads, new, head_dim) after the cached
        positions of ``layer``; return all keys and values so far,
        (batch, n_kv_heads, length + new, head_dim) (a sliding layer: only
        the last ones its queries may see)."""
        self._check_update(layer, k, v)
        if self.rolling[layer]:   # Chapter 12: a sliding layer's ring buffer
            return self.update_window(layer, k, v)
        end = self.length + k.shape[-2]
        self.keys[layer][:, :, self.length:end] = k   # in place: no copy
        self.values[layer][:, :, self.length:end] = v
        self._pending = k.shape[-2]
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def update_window(self, layer: int, k: torch.Tensor,
                      v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A sliding layer: return the keys and values a query of this step
        may need -- the last W - 1 cached positions and the new ones, in
        order, (B, H_kv, S, hd) with S <= W - 1 + new -- then keep the
        newest W, position p in slot p mod W."""
        past, new = self.length, k.shape[-2]
        buf_k, buf_v = self.keys[layer], self.values[layer]
        slots = buf_k.shape[-2]                               # W
        held = torch.arange(max(0, past - slots + 1), past,
                            device=k.device)   # (h,) indices still visible
        keys = torch.cat([buf_k[:, :, held % slots], k], dim=2)
        #                                       (B, H_kv, h + new, hd)
        values = torch.cat([buf_v[:, :, held % slots], v], dim=2)
        kept = torch.arange(past + max(0, new - slots), past + new,
                            device=k.device)   # the newest <= W
        buf_k[:, :, kept % slots] = k[:, :, kept - past]  # slot p mod W
        buf_v[:, :, kept % slots] = v[:, :, kept - past]
        self._pending = new
        return keys, values

    def _check_update(self, layer, k, v) -> None:
        check_int("layer", layer, 0, self.n_layers - 1)
        for name, t, buffer in (("k", k, self.keys[layer]), ("v", v, self.values[layer])):
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
        """Keep only the first ``length`` positions (e.g. to rewind a rejected draft). A rolling
        buffer has overwritten old positions: a cache with sliding layers cannot be rewound."""
        length = check_int("length", length, 0, self.length)
        if any(self.rolling) and length != self.length:
            raise ValueError(f"a sliding-window cache cannot be cropped (length {length}, holds {self.length})")
        self.length = length

    def nbytes(self) -> int:
        """Bytes held by the buffers (all layers, keys and values)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def cache_config(model) -> LlamaConfig:
    """The config a KV cache for ``model`` is sized from: ``model.config``,
    except on a tensor-parallel rank (Chapter 13), whose attention layers
    compute only their share of the key/value heads: H_kv is read from the
    rows of this rank's k_proj weight, (H_kv/N * hd, d); the config keeps
    the whole model's count. (FSDP2 shards the weights too, but gathers
    them whole for every forward: its layers compute every head.)"""
    block = model.layers[0]
    k_proj = getattr(block.self_attn, "k_proj", None)
    if k_proj is None:                                  # MLA: no heads here
        return model.config
    if hasattr(block, "unshard"):  # FSDP2: sharded at rest, whole in forward
        return model.config
    weight = k_proj.weight                      # a DTensor when sharded
    local_weight = getattr(weight, "to_local", lambda: weight)()
    rows = local_weight.shape[0]                # (H_kv/N * hd, d)
    local = rows // model.config.head_dim
    if local == model.config.n_kv_heads:
        return model.config
    return model.config.replace(n_kv_heads=local)
