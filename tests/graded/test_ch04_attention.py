"""Graded tests for Chapter 4 (exercises/ch04_attention.py).

Oracles: torch's F.softmax, F.scaled_dot_product_attention (boolean mask) and
nn.MultiheadAttention (whose boolean mask means the opposite: True = blocked), hand-worked
examples, and invariants: rows sum to 1, causality (changing the future leaves the past
bit-identical).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

PACKAGE_MODULES = ["llama_course.attention"]

SOFTMAX = "Exercise 4.1 softmax"
CAUSAL = "Exercise 4.2 causal_mask"
SDPA = "Exercise 4.3 scaled_dot_product_attention"
SPLIT = "Exercise 4.4 split_heads"
MERGE = "Exercise 4.5 merge_heads"
MHA = "Exercise 4.6 multi_head_attention"


def randn(*shape, seed=0, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(device)


@pytest.mark.graded(SOFTMAX, points=2)
def test_softmax_example_and_torch(impl, device):
    p = impl.softmax(torch.tensor([2.0, 1.0, 0.1], device=device))
    assert [round(v, 2) for v in p.tolist()] == [0.66, 0.24, 0.10]  # the worked example
    x = randn(4, 7, 11, device=device, scale=5)
    torch.testing.assert_close(impl.softmax(x, dim=-1), F.softmax(x, dim=-1))
    torch.testing.assert_close(impl.softmax(x, dim=1), F.softmax(x, dim=1))


@pytest.mark.graded(SOFTMAX, points=1)
def test_softmax_is_stable(impl, device):
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]], device=device)
    torch.testing.assert_close(impl.softmax(x), torch.tensor([[1.0, 0, 0], [1 / 3, 1 / 3, 1 / 3]], device=device))
    dead = impl.softmax(torch.full((2, 4), float("-inf"), device=device))
    assert not dead.isnan().any() and torch.equal(dead, torch.zeros(2, 4, device=device))


@pytest.mark.graded(CAUSAL, points=2)
def test_causal_mask(impl, device):
    m = impl.causal_mask(4, device=device)
    assert m.dtype == torch.bool and m.device.type == device.type
    assert m.tolist() == [[True, False, False, False], [True, True, False, False],
                          [True, True, True, False], [True, True, True, True]]
    # two new queries at positions 3 and 4 of a 5-token sequence
    assert impl.causal_mask(2, 5, device=device).tolist() == [[True, True, True, True, False], [True] * 5]
    assert impl.causal_mask(1, 6).tolist() == [[True] * 6]  # one decode step sees everything


@pytest.mark.graded(SDPA, points=2)
@pytest.mark.parametrize("shape", [(3, 5, 16), (2, 4, 5, 16)], ids=["3d", "4d"])
def test_sdpa_matches_torch(impl, device, shape):
    q, k, v = (randn(*shape, seed=s, device=device) for s in (1, 2, 3))
    torch.testing.assert_close(impl.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    mask = torch.rand(shape[-2], shape[-2], generator=torch.Generator().manual_seed(4)).to(device) > 0.3
    mask |= torch.eye(shape[-2], dtype=torch.bool, device=device)  # every query sees something
    torch.testing.assert_close(impl.scaled_dot_product_attention(q, k, v, mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.graded(SDPA, points=2)
def test_sdpa_causal_and_fully_masked(impl, device):
    q, k, v = (randn(2, 3, 6, 8, seed=s, device=device) for s in (5, 6, 7))
    causal = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    out = impl.scaled_dot_product_attention(q, k, v, causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    v2 = v.clone()
    v2[..., 4:, :] += 100.0  # change the future
    k2 = k.clone()
    k2[..., 4:, :] -= 50.0
    assert torch.equal(impl.scaled_dot_product_attention(q, k2, v2, causal)[..., :4, :], out[..., :4, :])
    # a batch row whose first two keys are padding: with causality its first two queries see nothing
    keys = torch.tensor([[False, False, True, True, True, True], [True] * 6], device=device)
    mask = causal & keys[:, None, None, :]
    masked = impl.scaled_dot_product_attention(q, k, v, mask)
    assert not masked.isnan().any()
    assert torch.equal(masked[0, :, :2], torch.zeros_like(masked[0, :, :2]))


@pytest.mark.graded(SDPA, points=1)
def test_sdpa_hand_example(impl):
    # one query, two keys: scores (0, 2*sqrt(2)) / sqrt(2) = (0, 2); weights softmax(0, 2)
    q = torch.tensor([[[1.0, 1.0]]])
    k = torch.tensor([[[1.0, -1.0], [2.0, 0.0]]]) * 2 ** 0.5
    v = torch.tensor([[[10.0, 0.0], [0.0, 10.0]]])
    w1 = torch.tensor(2.0).exp() / (1 + torch.tensor(2.0).exp())
    torch.testing.assert_close(impl.scaled_dot_product_attention(q, k, v), torch.stack([10 * (1 - w1), 10 * w1]).view(1, 1, 2))


@pytest.mark.graded(SPLIT, points=1)
def test_split_heads(impl, device):
    x = torch.arange(2 * 3 * 8, device=device).view(2, 3, 8).float()
    heads = impl.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert heads[1, 2, 0].tolist() == x[1, 0, 4:6].tolist()  # head 2 holds features 4 and 5


@pytest.mark.graded(MERGE, points=1)
def test_merge_heads_inverts_split(impl, device):
    x = randn(2, 5, 12, device=device)
    heads = x.view(2, 5, 3, 4).transpose(1, 2)
    assert torch.equal(impl.merge_heads(heads), x)


def torch_mha(x, w_q, w_k, w_v, w_o, n_heads, allowed):
    d = x.shape[-1]
    mha = nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True).to(x.device)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        mha.out_proj.weight.copy_(w_o)
        out, _ = mha(x, x, x, attn_mask=~allowed, need_weights=False)  # torch: True = blocked
    return out


@pytest.mark.graded(MHA, points=3)
def test_multi_head_attention_matches_torch(impl, device):
    d, heads, T = 32, 4, 7
    x = randn(2, T, d, seed=8, device=device)
    w_q, w_k, w_v, w_o = (randn(d, d, seed=s, device=device, scale=0.3) for s in (9, 10, 11, 12))
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    expected = torch_mha(x, w_q, w_k, w_v, w_o, heads, causal)
    torch.testing.assert_close(impl.multi_head_attention(x, w_q, w_k, w_v, w_o, heads), expected,
                               rtol=1e-4, atol=1e-5)
    everything = torch.ones(T, T, dtype=torch.bool, device=device)
    torch.testing.assert_close(impl.multi_head_attention(x, w_q, w_k, w_v, w_o, heads, everything),
                               torch_mha(x, w_q, w_k, w_v, w_o, heads, everything), rtol=1e-4, atol=1e-5)
