# Exercise stub, generated from the course's key (solutions/ch04_attention.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 4 exercises: softmax, masks, scaled dot-product attention and multi-head attention.

Read Chapter 4 ("Attention") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 4

Masks are boolean and True means "may attend". Create every tensor on the device of the inputs.
"""

import math

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``: exp(x - max) / sum(exp(x - max)).

    Must not overflow for inputs of magnitude 1e4, and a row that is entirely -inf must give
    zeros (not NaN). Return x's dtype.
    """
    raise NotImplementedError('Exercise 4.1 softmax (Chapter 4, section 4.3 "Softmax"): not implemented yet')


def causal_mask(q_len: int, kv_len: int = None, device=None) -> torch.Tensor:
    """Boolean (q_len, kv_len) mask: True where query i may attend to key j.

    kv_len defaults to q_len. When kv_len > q_len, the queries are the LAST q_len positions:
    query i sits at position kv_len - q_len + i and may see keys 0 .. kv_len - q_len + i.
    """
    raise NotImplementedError(
        'Exercise 4.2 causal_mask (Chapter 4, section 4.4 "The causal mask")'
        ': not implemented yet'
    )


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) with masked scores set to -inf) v.

    q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v); works for 3-D and 4-D inputs. ``mask`` is
    boolean and broadcasts to (..., L_q, L_k). A query whose keys are all masked returns zeros.
    """
    raise NotImplementedError(
        'Exercise 4.3 scaled_dot_product_attention (Chapter 4, section 4.2 "Scaled dot-product attention")'
        ': not implemented yet'
    )


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D / H). Head h gets features h*D/H ... (h+1)*D/H - 1."""
    raise NotImplementedError(
        'Exercise 4.4 split_heads (Chapter 4, section 4.6 "Multi-head attention")'
        ': not implemented yet'
    )


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D / H) -> (B, T, D), the inverse of split_heads."""
    raise NotImplementedError(
        'Exercise 4.5 merge_heads (Chapter 4, section 4.6 "Multi-head attention")'
        ': not implemented yet'
    )


def multi_head_attention(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                         w_o: torch.Tensor, n_heads: int, mask: torch.Tensor = None) -> torch.Tensor:
    """Multi-head self-attention from weight matrices (nn.Linear layout, no biases).

    x (B, T, D); w_q, w_k, w_v, w_o (D, D). Project, split into n_heads, attend with ``mask``
    (None means causal), merge, and apply w_o. Returns (B, T, D).
    """
    raise NotImplementedError(
        'Exercise 4.6 multi_head_attention (Chapter 4, section 4.6 "Multi-head attention")'
        ': not implemented yet'
    )
# generated stub, sha256 b6bf45d48cb6c65c6c8e3156ca2a64622eacdc624a12230b951c024fbf90781a
