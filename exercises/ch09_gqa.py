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
        'Exercise 9.2 gqa_attention (Chapter 9, section 9.3 "Grouped-query attention without copies")'
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
# generated stub, sha256 683771023cc1e10e047feb3d850553c84730b3729db9b95173bae0fba2222e64
