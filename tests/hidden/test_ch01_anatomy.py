"""Hidden tests for Chapter 1 (instructor edition and Gradescope only).

Oracle: torch's own count of real layers built on the meta device.
"""

import pytest
import torch
from graded.test_ch01_anatomy import SMALL as PUBLIC_SMALL
from torch import nn

from llama_course import LlamaConfig

COUNT = "Exercise 1.2 count_parameters"


def _torch_count(config: LlamaConfig) -> int:
    """Build every weight of the model as real torch layers on the meta device and count them."""
    d, hd, V = config.d_model, config.head_dim, config.vocab_size
    with torch.device("meta"):
        parts = [nn.Embedding(V, d), nn.RMSNorm(d)]
        if not config.tie_embeddings:
            parts.append(nn.Linear(d, V, bias=False))
        for _ in range(config.n_layers):
            parts += [nn.RMSNorm(d), nn.RMSNorm(d),
                      nn.Linear(d, config.n_heads * hd, bias=False),
                      nn.Linear(d, config.n_kv_heads * hd, bias=False),
                      nn.Linear(d, config.n_kv_heads * hd, bias=False),
                      nn.Linear(config.n_heads * hd, d, bias=False)]
            if config.qk_norm:
                parts += [nn.RMSNorm(hd), nn.RMSNorm(hd)]
            if config.n_experts > 1:
                parts.append(nn.Linear(d, config.n_experts, bias=False))
            for _ in range(config.n_experts):
                parts += [nn.Linear(d, config.d_ff, bias=False), nn.Linear(d, config.d_ff, bias=False),
                          nn.Linear(config.d_ff, d, bias=False)]
    return sum(p.numel() for part in parts for p in part.parameters())


SMALL = [   # the public tests' small configs, and one more with QK-norm and a wider head
    *PUBLIC_SMALL,
    LlamaConfig(vocab_size=80, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=96,
                qk_norm=True, tie_embeddings=True),
]


@pytest.mark.graded(COUNT, weight=1)
@pytest.mark.parametrize("config", SMALL, ids=["mha", "gqa", "mqa-tied", "moe", "qwen3-like"])
def test_count_parameters_matches_real_layers(impl, config):
    got, real = impl.count_parameters(config)["total"], _torch_count(config)
    assert got == real, f"{config}: total {got:,}, but the real layers hold {real:,} parameters"




@pytest.mark.graded(COUNT, weight=1)
def test_count_parameters_active_drops_only_the_unused_experts(impl):
    config = SMALL[3]
    with torch.device("meta"):
        expert = sum(nn.Linear(*shape, bias=False).weight.numel()
                     for shape in ((48, 80), (48, 80), (80, 48)))
    c = impl.count_parameters(config)
    expected = _torch_count(config) - config.n_layers * (4 - 2) * expert
    assert c["active"] == expected, \
        f"active = {c['active']:,}, expected {expected:,}: every parameter except the experts a token skips " \
        f"(embedding, head, router and norms all count)"
