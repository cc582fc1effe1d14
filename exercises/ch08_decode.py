# Exercise stub, generated from the course's key (solutions/ch08_decode.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 8 exercises: the KV cache, a decode step, greedy generation, nucleus sampling, and the
size of the cache.

Read Chapter 8 ("Prefill and decode") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 8

The course model calls a cache like this during model(input_ids, cache=cache):
    cache.length                      positions already cached (before this call)
    k, v = cache.update(layer, k, v)  once per layer: store the new positions, get all so far
    cache.advance()                   once at the end: the new positions now count as cached
"""

import torch

from llama_course.config import LlamaConfig


class KVCache:
    """Preallocated keys and values, one (batch, n_kv_heads, max_seq_len, head_dim) buffer per layer."""

    def __init__(self, config: LlamaConfig, batch_size: int, max_seq_len: int, device=None, dtype=torch.float32):
        shape = (batch_size, config.n_kv_heads, max_seq_len, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.max_seq_len = max_seq_len
        self.length = 0
        self.pending = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k and v, (batch, n_kv_heads, new, head_dim), right after the ``self.length`` cached
        positions of ``layer``, IN PLACE (no torch.cat of the whole cache); remember ``new`` in
        self.pending; return the keys and values of positions 0 .. length + new - 1.
        Raise ValueError mentioning the capacity (max_seq_len) if they do not fit.
        """
        raise NotImplementedError(
            'Exercise 8.1 KVCache.update (Chapter 8, section 8.2 "The KV cache")'
            ': not implemented yet'
        )

    def advance(self):
        self.length += self.pending
        self.pending = 0


def decode_step(model, token_ids: torch.Tensor, cache) -> torch.Tensor:
    """Feed ``token_ids`` (batch, new) -- a whole prompt (prefill) or one token per row (decode) --
    through ``model`` with ``cache`` and return the logits of the LAST position, (batch, vocab).
    The positions are cache.length, cache.length + 1, ...; the model takes them from the cache."""
    raise NotImplementedError(
        'Exercise 8.2 decode_step (Chapter 8, section 8.3 "The decode loop")'
        ': not implemented yet'
    )


def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding with your KVCache: one prefill, then one decode step per new token, always
    taking the most likely token. Return the prompt followed by the new tokens, (batch, T + n)."""
    raise NotImplementedError(
        'Exercise 8.3 greedy_generate (Chapter 8, section 8.3 "The decode loop")'
        ': not implemented yet'
    )


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probabilities add up to
    at least ``top_p``; set every other logit to -inf. Always keep the most likely token.
    logits (..., vocab); return the same shape."""
    raise NotImplementedError('Exercise 8.4 top_p_filter (Chapter 8, section 8.4 "Sampling"): not implemented yet')


def kv_cache_bytes(config: LlamaConfig, seq_len: int = 1, batch_size: int = 1, bytes_per_value: float = 2) -> int:
    """Bytes of the KV cache: keys AND values, every layer, every KV head, for seq_len tokens of
    batch_size sequences, at bytes_per_value bytes per number (2 for fp16/bf16)."""
    raise NotImplementedError(
        'Exercise 8.5 kv_cache_bytes (Chapter 8, section 8.5 "What decode costs")'
        ': not implemented yet'
    )
# generated stub, sha256 deef443e2ab6a151ef9115b3e3b8fb0576e93bda949f13a43068bdfdb4fb9892
