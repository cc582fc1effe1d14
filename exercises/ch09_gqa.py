# Exercise stub, generated from the course's key (solutions/ch09_gqa.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 9 exercises: grouped-query attention.

Read Chapter 9 ("GQA and MQA") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 9

Convention (Hugging Face's): with n_rep = n_heads // n_kv_heads, KV head j serves the query
heads j * n_rep ... (j + 1) * n_rep - 1.
"""

import math

import torch


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H_kv, T, d) -> (B, H_kv * n_rep, T, d): each KV head repeated n_rep times, in place of
    the query heads it serves (KV head 0 becomes heads 0 .. n_rep - 1, and so on)."""
    raise NotImplementedError('Exercise 9.1 repeat_kv (Chapter 9, section 9.2 "MHA, MQA and GQA"): not implemented yet')


def gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor = None) -> torch.Tensor:
    """Grouped-query attention WITHOUT materialising repeated keys and values.

    q (B, H, T, d); k, v (B, H_kv, S, d); mask boolean, broadcastable to (T, S) or (B, 1, T, S)
    (True = may attend). The n_rep = H // H_kv query heads of group j all read KV head j, so stack
    them as extra query rows, (B, H_kv, n_rep * T, d), and attend to k and v as they are (repeat
    the mask's rows to match); softmax(q k^T / sqrt(d)) v; return (B, H, T, d).
    Do not call repeat_kv, repeat_interleave or .repeat( on k or v. (Broadcasting k as
    (B, H_kv, 1, S, d) is correct too, but torch.matmul then copies k and v: see section 9.3.)
    """
    raise NotImplementedError(
        'Exercise 9.2 gqa_attention (Chapter 9, section 9.3 "GQA without copies")'
        ': not implemented yet'
    )


def mha_to_gqa(weights: dict, n_heads: int, n_kv_heads: int) -> dict:
    """Turn multi-head attention weights into grouped-query ones by mean-pooling each group's
    key heads and value heads (Ainslie et al. 2023).

    ``weights`` has "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" in
    nn.Linear layout; k and v are (n_heads * head_dim, d). Return a new dict where k and v are
    (n_kv_heads * head_dim, d) -- KV head j is the mean of old heads j*n_rep .. (j+1)*n_rep - 1 --
    and every other entry is unchanged.
    """
    raise NotImplementedError(
        'Exercise 9.3 mha_to_gqa (Chapter 9, section 9.6 "Converting MHA to GQA")'
        ': not implemented yet'
    )


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

class Int8KVCache:
    """A KV cache that stores keys and values as int8, with one float32 scale per batch row, KV head
    and position: a quarter of the memory of a float32 cache (plus the scales).

    Same interface as Chapter 8's KVCache (``length``, ``pending``, ``update``, ``advance``), for
    the course model. Buffers: ``keys[layer]`` and ``values[layer]`` int8 (batch, n_kv_heads,
    max_seq_len, head_dim); ``key_scales[layer]`` and ``value_scales[layer]`` float32
    (batch, n_kv_heads, max_seq_len, 1). ``dtype`` is the dtype that update returns.
    """

    def __init__(self, config, batch_size: int, max_seq_len: int, device=None, dtype=torch.float32):
        shape = (batch_size, config.n_kv_heads, max_seq_len, config.head_dim)
        scale_shape = shape[:3] + (1,)
        self.keys = [torch.zeros(shape, device=device, dtype=torch.int8) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=torch.int8) for _ in range(config.n_layers)]
        self.key_scales = [torch.ones(scale_shape, device=device) for _ in range(config.n_layers)]
        self.value_scales = [torch.ones(scale_shape, device=device) for _ in range(config.n_layers)]
        self.max_seq_len, self.dtype = max_seq_len, dtype
        self.length = 0
        self.pending = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Quantise k and v (batch, n_kv_heads, new, head_dim) and write them IN PLACE after the
        ``self.length`` cached positions of ``layer``; remember ``new`` in self.pending; return the
        dequantised keys and values of positions 0 .. length + new - 1 in ``self.dtype``.

        Symmetric absmax quantisation of each head_dim vector: scale = max|x| / 127 (1.0 for an
        all-zero vector), q = round(x / scale) (torch.round: halves to even) as int8, computed in
        float32; dequantised value = q * scale. ValueError mentioning max_seq_len if they do not fit.

        Example: the vector [0.5, -1.27, 0.0] is stored as [50, -127, 0] with scale 0.01.
        """
        raise NotImplementedError(
            'Homework 9.A Int8KVCache.update (Chapter 9, beyond section 9.4 "KV cache sizes")'
            ': not implemented yet'
        )

    def advance(self):
        self.length += self.pending
        self.pending = 0


def ragged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_lens: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention over a batch whose rows have cached different numbers of tokens
    (continuous batching): row b's cache holds kv_lens[b] valid positions, the rest is stale.

    q (B, H, T, d): the T newest tokens of each row, which sit at positions
    kv_lens[b] - T .. kv_lens[b] - 1; k, v (B, H_kv, S, d) with KV head j serving query heads
    j*n_rep .. (j+1)*n_rep - 1; kv_lens (B,) integers. Query t of row b may attend to keys
    0 .. kv_lens[b] - T + t (causal) and never to keys at or after kv_lens[b], whatever finite
    values they hold. softmax(q k^T / sqrt(d)) v with the softmax in float32; return (B, H, T, d)
    in q's dtype. ValueError naming kv_lens unless T <= kv_lens[b] <= S for every row.

    Example: B = 2, T = 1, S = 4, kv_lens = [4, 2]: row 0 attends to all 4 keys, row 1 to keys 0
    and 1 only, whatever k[1, :, 2:] and v[1, :, 2:] contain.
    """
    raise NotImplementedError(
        'Homework 9.B ragged_attention (Chapter 9, beyond section 9.3 "GQA without copies")'
        ': not implemented yet'
    )
# generated stub, sha256 7082d8533081df3830e08c6fd08c44ca149569f2a801823e8b3dfe8c4db30216
