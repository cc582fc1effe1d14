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
    # BEGIN SOLUTION Exercise 9.1 repeat_kv (Chapter 9, section 9.2 "MHA, MQA and GQA")
    return x.repeat_interleave(n_rep, dim=1)
    # END SOLUTION


def gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor = None) -> torch.Tensor:
    """Grouped-query attention WITHOUT materialising repeated keys and values.

    q (B, H, T, d); k, v (B, H_kv, S, d); mask boolean, broadcastable to (T, S) or (B, 1, T, S)
    (True = may attend). View the queries as (B, H_kv, n_rep, T, d) so that each group shares
    its K and V by broadcasting; softmax(q k^T / sqrt(d)) v; return (B, H, T, d).
    Do not call repeat_kv, repeat_interleave or expand + reshape on k or v.
    """
    # BEGIN SOLUTION Exercise 9.2 gqa_attention (Chapter 9, section 9.3 "Grouped-query attention without copies")
    B, H, T, d = q.shape
    H_kv = k.shape[1]
    q = q.view(B, H_kv, H // H_kv, T, d)
    scores = q @ k.unsqueeze(2).transpose(-2, -1) / math.sqrt(d)      # (B, H_kv, n_rep, T, S)
    if mask is not None:
        if mask.dim() == 4:
            mask = mask.unsqueeze(2)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return (weights @ v.unsqueeze(2)).reshape(B, H, T, d)
    # END SOLUTION


def mha_to_gqa(weights: dict, n_heads: int, n_kv_heads: int) -> dict:
    """Turn multi-head attention weights into grouped-query ones by mean-pooling each group's
    key heads and value heads (Ainslie et al. 2023).

    ``weights`` has "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" in
    nn.Linear layout; k and v are (n_heads * head_dim, d). Return a new dict where k and v are
    (n_kv_heads * head_dim, d) -- KV head j is the mean of old heads j*n_rep .. (j+1)*n_rep - 1 --
    and every other entry is unchanged.
    """
    # BEGIN SOLUTION Exercise 9.3 mha_to_gqa (Chapter 9, section 9.6 "Converting MHA to GQA")
    out = dict(weights)
    n_rep = n_heads // n_kv_heads
    for name in ("k_proj.weight", "v_proj.weight"):
        w = weights[name]
        head_dim = w.shape[0] // n_heads
        heads = w.view(n_heads, head_dim, w.shape[1])
        out[name] = torch.stack([heads[j * n_rep:(j + 1) * n_rep].mean(0) for j in range(n_kv_heads)]).reshape(
            n_kv_heads * head_dim, w.shape[1])
    return out
    # END SOLUTION
