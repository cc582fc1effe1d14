"""Attention (Chapter 4): how tokens read from each other.

    scores  = Q K^T / sqrt(d_k)                  (..., L_q, L_k)
    scores  = -inf where the mask is False       True means "may attend" (torch's convention)
    weights = softmax(scores) over the keys      each row sums to 1 (or is all 0 if fully masked)
    out     = weights V                          (..., L_q, d_v)

Multi-head attention runs H of these side by side on slices of width d / H and mixes the heads
back with W_O. LLaMA's projections have no biases.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig
from .linear import Linear  # nn.Linear that uses every CPU core for a few rows (decode)
from .norm import RMSNorm

BACKENDS = ("explicit", "sdpa")


def _check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``, in float32 (or wider), returned in x's dtype.

    Subtracting the row maximum keeps exp() <= 1, so inputs of magnitude 1e4 are fine. A row that
    is entirely -inf (a query allowed to see nothing) gives zeros, not NaN.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    z = x.to(torch.promote_types(x.dtype, torch.float32))
    row_max = z.amax(dim=dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))  # all -inf rows
    e = torch.exp(z - row_max)
    total = e.sum(dim=dim, keepdim=True)
    return (e / torch.where(total > 0, total, torch.ones_like(total))).to(x.dtype)


def causal_mask(q_len: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """Boolean (q_len, kv_len) mask, True where query i may attend to key j.

    The queries are the LAST q_len of the kv_len positions (decode, chunked prefill), so query i
    sits at position kv_len - q_len + i and sees keys 0 .. kv_len - q_len + i.
    """
    kv_len = q_len if kv_len is None else kv_len
    for name, value in (("q_len", q_len), ("kv_len", kv_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if kv_len < q_len:
        raise ValueError(f"kv_len ({kv_len}) must be >= q_len ({q_len}): queries are the last kv positions")
    ones = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=kv_len - q_len)  # (q_len, kv_len)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """From a Hugging Face 0/1 ``attention_mask`` (batch, kv_len) to a boolean key mask
    (batch, 1, 1, kv_len): True for real tokens, False for padding. Combine with ``&``::

        mask = causal_mask(T, device=d) & padding_mask(attention_mask)   # (batch, 1, T, T)
    """
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be a (batch, seq) tensor of 0/1, got "
                         f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must hold integers or booleans 0/1, got {attention_mask.dtype}")
    return (attention_mask != 0)[:, None, None, :]  # (B, 1, 1, T): broadcasts over heads and queries


def _broadcast(*shapes) -> tuple[int, ...] | None:
    """numpy's broadcasting rule on shapes (None if they do not broadcast). Plain Python: the
    torch equivalent pulls in sympy on first use, a second of import time."""
    ndim = max(len(s) for s in shapes)
    out = []
    for dims in zip(*((1,) * (ndim - len(s)) + tuple(s) for s in shapes)):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _check_qkv(q, k, v, mask, kv_groups: int = 1) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must be (..., seq, dim), got shape {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length, got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor (True = may attend), got "
                            f"{getattr(mask, 'dtype', type(mask).__name__)}")
        kv_lead = (*k.shape[:-3], k.shape[-3] * kv_groups) if kv_groups > 1 else tuple(k.shape[:-2])
        lead = _broadcast(tuple(q.shape[:-2]), kv_lead)
        if lead is None:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} have batch/head dimensions that do not broadcast")
        scores_shape = (*lead, q.shape[-2], k.shape[-2])
        if _broadcast(tuple(mask.shape), scores_shape) != scores_shape:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                             f"{tuple(scores_shape)} of q {tuple(q.shape)} and k {tuple(k.shape)}")


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None, backend: str = "explicit") -> torch.Tensor:
    """softmax(q k^T / sqrt(d) masked) v, for q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v).

    ``mask`` is boolean and broadcasts to (..., L_q, L_k); True means "may attend". A query whose
    keys are all masked gets zeros. ``backend="explicit"`` (default) spells out every step and
    materialises the L_q x L_k score matrix; ``backend="sdpa"`` calls torch's fused
    F.scaled_dot_product_attention (Flash/memory-efficient kernels where available) with the
    same result up to rounding.
    """
    _check_backend(backend)
    _check_qkv(q, k, v, mask)
    if backend == "sdpa":
        return _zero_fully_masked(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), mask)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale                         # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))              # (..., L_q, L_k)
    weights = softmax(scores.float(), dim=-1).to(q.dtype)              # (..., L_q, L_k) rows sum to 1
    return weights @ v                                                 # (..., L_q, d_v)


def _zero_fully_masked(out: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """torch's fused kernels give NaN for a query whose keys are all masked; the course gives zeros."""
    if mask is None:
        return out
    seen = mask.any(dim=-1, keepdim=True)                              # (..., L_q, 1)
    return torch.where(seen, out, torch.zeros_like(out))


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D / H): head h takes features h*D/H .. (h+1)*D/H - 1."""
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, seq, d_model), got shape {tuple(x.shape)}")
    batch, seq, d_model = x.shape
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads <= 0 or d_model % n_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a positive int dividing d_model ({d_model})")
    return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)  # (B, H, T, D/H)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D / H) -> (B, T, D): the inverse of split_heads."""
    if x.dim() != 4:
        raise ValueError(f"x must be (batch, heads, seq, head_dim), got shape {tuple(x.shape)}")
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)  # (B, T, H * D/H)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H_kv, T, d) -> (B, H_kv * n_rep, T, d): KV head j serves query heads j*n_rep .. (j+1)*n_rep - 1."""
    if n_rep == 1:
        return x
    batch, kv_heads, seq, head_dim = x.shape
    x = x[:, :, None].expand(batch, kv_heads, n_rep, seq, head_dim)  # (B, H_kv, n_rep, T, d) no copy yet
    return x.reshape(batch, kv_heads * n_rep, seq, head_dim)          # (B, H, T, d)


def gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                  backend: str = "explicit") -> torch.Tensor:
    """Grouped-query attention without materialising repeated keys and values.

    q (B, H, T, d); k, v (B, H_kv, S, d) with H = H_kv * n_rep. Query head h reads KV head
    h // n_rep (repeat_kv's convention). The n_rep query heads of a group are stacked as extra
    query rows, (B, H_kv, n_rep * T, d), so one plain (B, H_kv) batch of products against the
    group's K and V does the work: no (B, H, S, d) tensor is ever made (a broadcast matmul would
    quietly make one). ``mask`` broadcasts to (B, H, T, S) as for scaled_dot_product_attention.
    Returns (B, H, T, d_v).
    """
    _check_backend(backend)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
    batch, n_heads, seq, head_dim = q.shape
    kv_heads = k.shape[1]
    if n_heads % kv_heads:
        raise ValueError(f"q's {n_heads} heads must be a multiple of k's {kv_heads} heads")
    n_rep = n_heads // kv_heads
    _check_qkv(q, k, v, mask, kv_groups=n_rep)
    if backend == "sdpa":                                        # torch's kernels share KV heads themselves
        return _zero_fully_masked(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), mask)
    rows = q.reshape(batch, kv_heads, n_rep * seq, head_dim)     # (B, H_kv, n_rep*T, d) a group's queries
    if mask is not None:
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)                             # (b, h, T, S) with h in {1, H}
        b, h = mask.shape[:2]
        if h == 1:                                               # the same rows for every head
            mask = mask.unsqueeze(2).expand(b, 1, n_rep, seq, mask.shape[-1])
            mask = mask.reshape(b, 1, n_rep * seq, mask.shape[-1])
        else:                                                    # per-head masks, grouped like q
            mask = mask.reshape(b, kv_heads, n_rep * seq, mask.shape[-1])
    out = scaled_dot_product_attention(rows, k, v, mask, backend=backend)  # (B, H_kv, n_rep*T, d)
    return out.reshape(batch, n_heads, seq, v.shape[-1])         # (B, H, T, d)


def mha_to_gqa(weights: dict[str, torch.Tensor], n_heads: int, n_kv_heads: int) -> dict[str, torch.Tensor]:
    """Convert multi-head attention weights to grouped-query attention by mean-pooling the key and
    value heads of each group (Ainslie et al. 2023): KV head j becomes the mean of heads
    j*n_rep .. (j+1)*n_rep - 1, the query heads that will share it.

    ``weights`` holds "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" (other
    keys are copied); k/v go from (n_heads * hd, d) to (n_kv_heads * hd, d).
    """
    for name, value in (("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads})")
    out = dict(weights)
    for name in ("k_proj.weight", "v_proj.weight"):
        w = weights[name]
        rows, d_in = w.shape
        if rows % n_heads:
            raise ValueError(f"{name} has {rows} rows, not a multiple of n_heads ({n_heads})")
        head_dim = rows // n_heads
        grouped = w.view(n_kv_heads, n_heads // n_kv_heads, head_dim, d_in)  # (H_kv, n_rep, hd, d)
        out[name] = grouped.mean(dim=1).reshape(n_kv_heads * head_dim, d_in)  # (H_kv * hd, d)
    return out


# A position hook: (q, k, positions) -> (q, k). Chapter 4 has none; Chapter 5 puts RoPE here.
PositionHook = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class Attention(nn.Module):
    """Multi-head causal self-attention with LLaMA's shapes and Hugging Face's names.

        q, k, v = x W_Q^T, x W_K^T, x W_V^T     q_proj (H*hd, d), k_proj/v_proj (H_kv*hd, d)
        split into heads, apply ``position_hook`` to q and k (RoPE, Chapter 5), attend, merge,
        out = o_proj(...)                        o_proj (d, H*hd)

    The projections are ``Linear``: nn.Linear, with a decode step's few rows spread over the CPU's
    cores (linear.py, Chapter 8).
    """

    def __init__(self, config: LlamaConfig, backend: str = "explicit",
                 position_hook: PositionHook | None = None, device=None, dtype=None):
        super().__init__()
        _check_backend(backend)
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.backend = backend
        self.position_hook = position_hook
        d, hd = config.d_model, config.head_dim
        self.q_proj = Linear(d, self.n_heads * hd, bias=False, device=device, dtype=dtype)
        self.k_proj = Linear(d, self.n_kv_heads * hd, bias=False, device=device, dtype=dtype)
        self.v_proj = Linear(d, self.n_kv_heads * hd, bias=False, device=device, dtype=dtype)
        self.o_proj = Linear(self.n_heads * hd, d, bias=False, device=device, dtype=dtype)
        if config.qk_norm:  # Qwen3: RMSNorm over each head's query and key, before RoPE
            self.q_norm = RMSNorm(hd, config.norm_eps, device=device, dtype=dtype)
            self.k_norm = RMSNorm(hd, config.norm_eps, device=device, dtype=dtype)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                cache=None, layer_idx: int = 0) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d).

        ``mask``: boolean, broadcastable to (B, H, T, T_kv); None means causal. ``positions`` (T,)
        or (B, T) for the position hook. ``cache``: a KVCache; this call's keys and values are
        appended to its layer ``layer_idx`` and the queries attend to everything cached.
        """
        batch, seq, _ = x.shape
        q = split_heads(self.q_proj(x), self.n_heads)      # (B, H, T, hd)
        k = split_heads(self.k_proj(x), self.n_kv_heads)   # (B, H_kv, T, hd)
        v = split_heads(self.v_proj(x), self.n_kv_heads)   # (B, H_kv, T, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)          # per head, over hd
        if self.position_hook is not None:
            if positions is None:
                start = cache.length if cache is not None else 0
                positions = torch.arange(start, start + seq, device=x.device)  # (T,)
            q, k = self.position_hook(q, k, positions)     # rotate q and k, never v
        if cache is not None:
            k, v = cache.update(layer_idx, k, v)           # (B, H_kv, T_kv, hd) past + new
        if mask is None and seq > 1:                           # one query may see every key: no mask
            mask = causal_mask(seq, k.shape[-2], device=x.device)  # (T, T_kv)
        out = gqa_attention(q, k, v, mask, backend=self.backend)  # (B, H, T, hd), KV heads shared
        return self.o_proj(merge_heads(out))               # (B, T, d)
