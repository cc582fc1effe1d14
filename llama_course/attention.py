"""Attention (Chapter 4): how tokens read from each other.

    scores  = Q K^T / sqrt(d_k)                (..., L_q, L_k)
    scores  = -inf where the mask is False     True means "may attend"
                                               (torch's convention)
    weights = softmax(scores) over the keys    each row sums to 1
                                               (or is all 0 if fully masked)
    out     = weights V                        (..., L_q, d_v)

Multi-head attention runs H of these side by side on slices of width d / H
and mixes the heads back with W_O. LLaMA's projections have no biases. The
softmax is computed in float32 (at least: float64 stays float64), and so are
the scores of float16 inputs, whose q . k can overflow.

This module is Chapter 4's attention. LLaMA's layer, ``model.Attention``,
adds the later chapters' steps on top of ``MultiHeadAttention``: RoPE
(Chapter 5), the KV cache (Chapter 8), shared key/value heads and QK-norm
(Chapter 9, gqa.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_int,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_tensor,
)
from .config import LlamaConfig
from .linear import Linear

BACKENDS = ("explicit", "sdpa")


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``, in float32 (or wider),
    returned in x's dtype.

    Subtracting the row maximum keeps exp() <= 1, so inputs of magnitude 1e4
    are fine. A row that is entirely -inf (a query allowed to see nothing)
    gives zeros, not NaN; a NaN gives NaN.
    """
    check_tensor("x", x, floating=True)
    z = x.to(torch.promote_types(x.dtype, torch.float32))  # at least float32
    row_max = z.amax(dim=dim, keepdim=True)
    # an all -inf row: exp() gives 0s
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(z - row_max)
    total = e.sum(dim=dim, keepdim=True)
    # an all -inf row stays 0s
    return (e / total.masked_fill(total == 0, 1.0)).to(x.dtype)


def causal_mask(q_len: int, kv_len: int | None = None,
                device=None) -> torch.Tensor:
    """Boolean (q_len, kv_len) mask, True where query i may attend to key j.

    The queries are the LAST q_len of the kv_len positions (decode, chunked
    prefill), so query i sits at position kv_len - q_len + i and sees keys
    0 .. kv_len - q_len + i.
    """
    kv_len = check_int("kv_len", q_len if kv_len is None else kv_len,
                       low=check_positive_int("q_len", q_len))
    ones = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=kv_len - q_len)  # (q_len, kv_len)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """From a Hugging Face 0/1 ``attention_mask`` (batch, kv_len) to a boolean
    key mask (batch, 1, 1, kv_len): True for real tokens, False for padding.
    Combine with ``&``::

        # (batch, 1, T, T)
        mask = causal_mask(T, device=d) & padding_mask(attention_mask)

    It runs inside every forward, so it checks the mask's shape and dtype but
    reads no values: that the entries are 0 or 1 is checked where the mask
    comes in (Llama.forward, generate; ``check_attention_mask_values``).
    """
    check_attention_mask(attention_mask)
    # (B, 1, 1, T): broadcasts over heads and queries
    return (attention_mask != 0)[:, None, None, :]


def check_attention_mask(attention_mask) -> None:
    """A (batch, seq) tensor of integers or booleans. Metadata only: reads no
    values."""
    check_tensor("attention_mask", attention_mask, 2)
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError("attention_mask must hold integers or booleans 0/1, "
                        f"got {attention_mask.dtype}")


def check_attention_mask_values(attention_mask: torch.Tensor) -> None:
    """Every entry of a checked attention_mask is 0 or 1. Reads the values
    (one device-to-host copy on a GPU; meta tensors hold none): for entry
    points only (checks.py)."""
    if attention_mask.device.type != "meta" and bool(
            ((attention_mask != 0) & (attention_mask != 1)).any()):
        raise ValueError(
            "attention_mask must hold only 0 (padding) and 1 (real token), "
            "got "
            f"{sorted(set(attention_mask.unique().tolist()) - {0, 1})[:3]}")


def _broadcast(*shapes) -> tuple[int, ...] | None:
    """numpy's broadcasting rule on shapes (None if they do not broadcast).
    Plain Python: the torch equivalent pulls in sympy on first use, a second
    of import time."""
    ndim = max(len(s) for s in shapes)
    out = []
    for dims in zip(*((1,) * (ndim - len(s)) + tuple(s) for s in shapes)):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def check_attention_inputs(q, k, v, mask, backend: str, kv_groups: int = 1,
                           scale: float | None = None) -> None:
    """q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v) floating tensors on
    one device, d >= 1, L_k >= 1; ``mask`` boolean, broadcasting to the
    scores; ``kv_groups`` query heads per K/V head.
    ``scale``: None or a positive number.
    Metadata only (shapes, dtypes, devices): it runs in every layer of every
    forward."""
    check_one_of("backend", backend, BACKENDS)
    if scale is not None:
        check_positive_number("scale", scale)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, min_ndim=2, floating=True, like=q, like_name="q")
    if q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        raise ValueError("q and k must have the same last dimension, >= 1, "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2] or k.shape[-2] == 0:
        raise ValueError("k and v must have the same length, >= 1, "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    kv_lead = ((*k.shape[:-3], k.shape[-3] * kv_groups) if kv_groups > 1
               else tuple(k.shape[:-2]))
    lead = _broadcast(tuple(q.shape[:-2]), kv_lead)
    if lead is None:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} have "
                         "batch/head dimensions that do not broadcast")
    if mask is not None:
        check_tensor("mask", mask, like=q, like_name="q")
        if mask.dtype != torch.bool:
            raise TypeError("mask must be a boolean tensor (True = may "
                            f"attend), got {mask.dtype}")
        scores_shape = (*lead, q.shape[-2], k.shape[-2])
        if _broadcast(tuple(mask.shape), scores_shape) != scores_shape:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to "
                f"the scores {tuple(scores_shape)} of q {tuple(q.shape)} "
                f"and k {tuple(k.shape)}")


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor,
                                 v: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 backend: str = "explicit",
                                 scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) masked) v, for q (..., L_q, d),
    k (..., L_k, d), v (..., L_k, d_v).

    ``mask`` is boolean and broadcasts to (..., L_q, L_k); True means "may
    attend". A query whose keys are all masked gets zeros.
    ``backend="explicit"`` (default) spells out every step and materialises
    the L_q x L_k score matrix; ``backend="sdpa"`` calls torch's fused
    F.scaled_dot_product_attention (Flash/memory-efficient kernels where
    available) with the same result up to rounding. ``scale`` replaces
    1 / sqrt(d): Chapter 12's MLA sets its own.
    """
    check_attention_inputs(q, k, v, mask, backend, scale=scale)
    if backend == "sdpa":
        return fused_attention(q, k, v, mask, scale=scale)  # (..., L_q, d_v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])                 # 1 / sqrt(d)
    # float16's q . k overflows at 65,504
    dtype = torch.float32 if q.dtype == torch.float16 else q.dtype
    # (..., L_q, L_k)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., L_q, L_k)
    # (..., L_q, L_k), the softmax in float32+
    weights = softmax(scores, dim=-1).to(v.dtype)
    return weights @ v                                     # (..., L_q, d_v)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None, enable_gqa: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """torch's F.scaled_dot_product_attention (``enable_gqa``: k and v have
    one head per group of query heads), made to agree with the explicit
    formula in its two corners: a query that sees no key gets zeros (the
    kernels give NaN), and a NaN in q or in a key it sees gives NaN (the
    kernels skip it and give zeros). ``scale``: None for 1 / sqrt(d)."""
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale,
        enable_gqa=enable_gqa)                     # (..., L_q, d_v)
    groups = q.shape[-3] // k.shape[-3] if enable_gqa else 1
    nan_key = k.isnan().any(-1)                    # (..., H_kv, L_k)
    if mask is None:           # every query sees every key (decode)
        # (..., H_kv, 1, 1)
        nan_head = nan_key.any(-1, keepdim=True)[..., None]
        if groups > 1:
            # (..., H, 1, 1)
            nan_head = nan_head.repeat_interleave(groups, dim=-3)
        # NaN rows
        return out.masked_fill(q.isnan().any(-1, keepdim=True) | nan_head,
                               float("nan"))
    if groups > 1:
        nan_key = nan_key.repeat_interleave(groups, dim=-2)  # (..., H, L_k)
    # (..., L_q, 1)
    nan = (q.isnan().any(-1, keepdim=True)
           | (nan_key[..., None, :] & mask).any(-1, keepdim=True))
    return out.masked_fill(nan, float("nan")).masked_fill(
        ~mask.any(-1, keepdim=True), 0.0)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D / H): head h takes features h*D/H ..
    (h+1)*D/H - 1."""
    _check_split(x, n_heads)
    batch, seq, d_model = x.shape
    # (B, H, T, D/H)
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)


def _check_split(x, n_heads) -> None:
    check_tensor("x", x, 3)
    if check_positive_int("n_heads", n_heads) and x.shape[-1] % n_heads:
        raise ValueError(f"n_heads ({n_heads}) must divide d_model "
                         f"({x.shape[-1]})")


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D / H) -> (B, T, D): the inverse of split_heads."""
    check_tensor("x", x, 4)
    batch, heads, seq, head_dim = x.shape
    # (B, T, H * D/H)
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head causal self-attention (Chapter 4), with Hugging Face's names
    for the projections.

        q, k, v = x W_Q^T, x W_K^T, x W_V^T    q_proj (H*hd, d),
                                               k_proj/v_proj (H_kv*hd, d)
        split into H heads, attend (causal mask), merge the heads,
        out = o_proj(...)                      o_proj (d, H*hd)

    Each query head has its own key/value head (n_kv_heads = n_heads) until
    Chapter 9.
    """

    def __init__(self, config: LlamaConfig, backend: str = "explicit",
                 device=None, dtype=None):
        super().__init__()
        self.backend = check_one_of("backend", backend, BACKENDS)
        self.n_heads, self.n_kv_heads, self.head_dim = (
            config.n_heads, config.n_kv_heads, config.head_dim)
        d, hd = config.d_model, config.head_dim
        self.q_proj = Linear(d, self.n_heads * hd,
                             bias=False, device=device, dtype=dtype)
        self.k_proj = Linear(d, self.n_kv_heads * hd,
                             bias=False, device=device, dtype=dtype)
        self.v_proj = Linear(d, self.n_kv_heads * hd,
                             bias=False, device=device, dtype=dtype)
        self.o_proj = Linear(self.n_heads * hd, d,
                             bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). ``mask``: boolean, broadcastable to
        (B, H, T, T); None means causal."""
        q, k, v = self.project(x)                      # (B, H, T, hd) each
        if mask is None:
            mask = causal_mask(x.shape[1], device=x.device)          # (T, T)
        # (B, H, T, hd)
        out = scaled_dot_product_attention(q, k, v, mask, self.backend)
        return self.o_proj(merge_heads(out))           # (B, T, d)

    def project(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values, split into heads: (B, H, T, hd),
        (B, H_kv, T, hd) twice."""
        q = split_heads(self.q_proj(x), self.n_heads)      # (B, H, T, hd)
        k = split_heads(self.k_proj(x), self.n_kv_heads)   # (B, H_kv, T, hd)
        v = split_heads(self.v_proj(x), self.n_kv_heads)   # (B, H_kv, T, hd)
        return q, k, v
