"""Grouped-query attention (Chapter 9): several query heads share one key/value head.

    H query heads, H_kv key/value heads, n_rep = H / H_kv:  query head h reads K/V head h // n_rep
    MHA: H_kv = H          GQA: 1 < H_kv < H          MQA: H_kv = 1

The KV cache shrinks by n_rep. ``repeat_kv`` makes the sharing explicit by copying each K/V head
n_rep times; ``gqa_attention`` computes the same result without the copy; ``mha_to_gqa`` turns a
multi-head checkpoint into a grouped one by mean-pooling each group's key and value heads
(Ainslie et al. 2023).
"""

from __future__ import annotations

import torch

from .attention import (
    check_attention_inputs,
    fused_attention,
    scaled_dot_product_attention,
)
from .checks import check_positive_int, check_tensor


def _check_repeat(x, n_rep) -> None:
    check_tensor("x", x, 4)
    check_positive_int("n_rep", n_rep)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H_kv, T, d) -> (B, H_kv * n_rep, T, d): KV head j serves query
    heads j*n_rep .. (j+1)*n_rep - 1."""
    _check_repeat(x, n_rep)
    if n_rep == 1:
        return x
    batch, kv_heads, seq, head_dim = x.shape
    x = x[:, :, None].expand(batch, kv_heads, n_rep, seq, head_dim)
    #                                    (B, H_kv, n_rep, T, d) no copy yet
    return x.reshape(batch, kv_heads * n_rep, seq, head_dim)  # (B, H, T, d)


def _check_gqa(q, k, v, mask, backend) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, 4)
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q's {q.shape[1]} heads must be a multiple of k's {k.shape[1]} heads")
    check_attention_inputs(q, k, v, mask, backend, kv_groups=q.shape[1] // k.shape[1])


def gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  mask: torch.Tensor | None = None,
                  backend: str = "explicit") -> torch.Tensor:
    """Grouped-query attention without materialising repeated keys and
    values.

    q (B, H, T, d); k, v (B, H_kv, S, d) with H = H_kv * n_rep. Query head
    h reads KV head h // n_rep (repeat_kv's convention). The n_rep query
    heads of a group are stacked as extra query rows, (B, H_kv, n_rep * T,
    d), so one plain (B, H_kv) batch of products against the group's K and
    V does the work: no (B, H, S, d) tensor is ever made (a broadcast
    matmul would quietly make one). ``mask`` broadcasts to (B, H, T, S) as
    for scaled_dot_product_attention. Returns (B, H, T, d_v).
    """
    _check_gqa(q, k, v, mask, backend)
    batch, n_heads, seq, head_dim = q.shape
    kv_heads = k.shape[1]
    n_rep = n_heads // kv_heads
    if backend == "sdpa":        # torch's kernels share KV heads themselves
        return fused_attention(q, k, v, mask, enable_gqa=True)
    rows = q.reshape(batch, kv_heads, n_rep * seq, head_dim)
    #                            (B, H_kv, n_rep*T, d) a group's queries
    if mask is not None:
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)      # (b, h, T, S) with h in {1, H}
        b, h, S = *mask.shape[:2], mask.shape[-1]
        if h == 1:                        # the same rows for every head
            mask = mask.unsqueeze(2).expand(b, 1, n_rep, seq, S)
            mask = mask.reshape(b, 1, n_rep * seq, S)
        else:                             # per-head masks, grouped like q
            mask = mask.reshape(b, kv_heads, n_rep * seq, S)
    out = scaled_dot_product_attention(rows, k, v, mask)
    #                                     (B, H_kv, n_rep*T, d)
    return out.reshape(batch, n_heads, seq, v.shape[-1])     # (B, H, T, d)


def _check_pooling(weights, n_heads, n_kv_heads) -> None:
    if check_positive_int("n_heads", n_heads) % check_positive_int("n_kv_heads", n_kv_heads):
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads})")
    for name in ("k_proj.weight", "v_proj.weight"):
        if name not in weights:
            raise ValueError(f"weights must hold {name!r}, got keys {sorted(weights)}")
        check_tensor(f"weights[{name!r}]", weights[name], 2)
        if weights[name].shape[0] % n_heads:
            raise ValueError(f"{name} has {weights[name].shape[0]} rows, not a multiple of n_heads ({n_heads})")


def mha_to_gqa(weights: dict[str, torch.Tensor], n_heads: int,
               n_kv_heads: int) -> dict[str, torch.Tensor]:
    """Convert multi-head attention weights to grouped-query attention by
    mean-pooling the key and value heads of each group (Ainslie et al.
    2023): KV head j becomes the mean of heads j*n_rep .. (j+1)*n_rep - 1,
    the query heads that will share it.

    ``weights`` holds "q_proj.weight", "k_proj.weight", "v_proj.weight",
    "o_proj.weight" (other keys are copied); k/v go from
    (n_heads * hd, d) to (n_kv_heads * hd, d).
    """
    _check_pooling(weights, n_heads, n_kv_heads)
    out = dict(weights)
    n_rep = n_heads // n_kv_heads
    for name in ("k_proj.weight", "v_proj.weight"):
        rows, d_in = weights[name].shape
        head_dim = rows // n_heads
        grouped = weights[name].view(n_kv_heads, n_rep, head_dim, d_in)
        #                                             (H_kv, n_rep, hd, d)
        pooled = grouped.mean(dim=1)                  # (H_kv, hd, d)
        out[name] = pooled.reshape(n_kv_heads * head_dim, d_in)
        #                                             (H_kv * hd, d)
    return out
