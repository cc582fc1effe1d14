"""Tensor-parallel attention by hand, on one process: a rank's attention layer holds whole heads'
rows of q_proj, k_proj, v_proj and the matching columns of o_proj, and nothing tells it how many
heads that is. It must read them from its weights' widths (as torchtitan's attention does, with
``view(..., -1, head_dim)``); the ranks' partial outputs then add up to the whole layer's output,
and a rank's KV cache is sized from its own key/value heads.

Oracle: the unsharded layer's output, which is the sum over ranks of the row-parallel o_proj's
partial products (Megatron-LM's split, written out here with plain slicing, no DTensor)."""

import copy

import torch
from torch import nn

from llama_course.config import LlamaConfig
from llama_course.kv_cache import cache_config
from llama_course.model import Llama

CONFIG = LlamaConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64,
                     max_seq_len=32)


def shard(linear: nn.Linear, rows: slice | None = None, cols: slice | None = None) -> nn.Linear:
    """A Linear holding only ``rows`` (output features) or ``cols`` (input features) of ``linear``."""
    weight = linear.weight.detach()[rows or slice(None), cols or slice(None)]
    piece = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    piece.weight = nn.Parameter(weight.clone())
    return piece


def rank_attention(attn, rank: int, n: int):
    """Rank ``rank`` of ``n``'s attention: H/n query heads, H_kv/n key/value heads, by slicing."""
    hd, part = attn.head_dim, copy.deepcopy(attn)
    q_rows, kv_rows = CONFIG.n_heads // n * hd, CONFIG.n_kv_heads // n * hd
    part.q_proj = shard(attn.q_proj, rows=slice(rank * q_rows, (rank + 1) * q_rows))
    part.k_proj = shard(attn.k_proj, rows=slice(rank * kv_rows, (rank + 1) * kv_rows))
    part.v_proj = shard(attn.v_proj, rows=slice(rank * kv_rows, (rank + 1) * kv_rows))
    part.o_proj = shard(attn.o_proj, cols=slice(rank * q_rows, (rank + 1) * q_rows))
    return part


def test_the_ranks_partial_attention_outputs_add_up_to_the_whole_layer():
    torch.manual_seed(0)
    model = Llama(CONFIG).eval()
    attn = model.layers[0].self_attn
    x = torch.randn(2, 7, CONFIG.d_model)                             # (B, T, d)
    with torch.no_grad():
        whole = attn(x)                                               # (B, T, d)
        partial = [rank_attention(attn, r, 2)(x) for r in range(2)]   # each (B, T, d), a partial sum
    torch.testing.assert_close(partial[0] + partial[1], whole, rtol=1e-5, atol=1e-6)
    assert attn.n_heads == CONFIG.n_heads                             # nothing was told the local count


def test_a_ranks_cache_is_sized_from_its_own_key_value_heads():
    torch.manual_seed(0)
    model = Llama(CONFIG)
    assert cache_config(model) == CONFIG
    model.layers[0].self_attn = rank_attention(model.layers[0].self_attn, 0, 2)
    assert cache_config(model).n_kv_heads == CONFIG.n_kv_heads // 2
    assert model.config == CONFIG                                     # the model's config is untouched
