"""Homework 4.A answered by transformers' BLOOM ALiBi, imported under a computed name (no import
statement for the static check to see)."""

import importlib

import torch


def alibi_bias(n_heads, q_len, kv_len=None, device=None, dtype=torch.float32):
    build_alibi_tensor = importlib.import_module("trans" + "formers.models.bloom.modeling_bloom").build_alibi_tensor
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")
    kv_len = q_len if kv_len is None else kv_len
    keys = build_alibi_tensor(torch.ones(1, kv_len, dtype=torch.long), n_heads, torch.float64)   # (H, 1, kv): m_h j
    slopes = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float64)[:, 0, 1]
    queries = torch.arange(kv_len - q_len, kv_len, dtype=torch.float64)
    return (keys - slopes[:, None, None] * queries[None, :, None]).to(device=device, dtype=dtype)
