"""Graded tests for Chapter 4 (exercises/ch04_attention.py).

Oracles: torch's F.softmax and F.scaled_dot_product_attention (boolean mask), hand-worked
examples, and invariants: rows sum to 1, causality (changing the future leaves the past
bit-identical), uniform attention when queries or keys are zero. (tests/hidden compares
multi-head attention with nn.MultiheadAttention.) Homework 4.A and 4.B: public checks only.
"""

import pytest
import torch
import torch.nn.functional as F

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.attention"]

SOFTMAX = "Exercise 4.1 softmax"
CAUSAL = "Exercise 4.2 causal_mask"
SDPA = "Exercise 4.3 scaled_dot_product_attention"
SPLIT = "Exercise 4.4 split_heads"
MERGE = "Exercise 4.5 merge_heads"
MHA = "Exercise 4.6 multi_head_attention"
ALIBI = "Homework 4.A alibi_bias"
PREFIX = "Homework 4.B prefix_lm_mask"


def randn(*shape, seed=0, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(device)


@pytest.mark.graded(SOFTMAX, weight=2)
def test_softmax_example_and_torch(impl, device):
    p = impl.softmax(torch.tensor([2.0, 1.0, 0.1], device=device))
    got = [round(v, 2) for v in p.tolist()]
    assert got == [0.66, 0.24, 0.10], f"softmax([2, 1, 0.1]) = {got}, expected [0.66, 0.24, 0.10]"
    x = randn(4, 7, 11, device=device, scale=5)
    assert_close(impl.softmax(x, dim=-1), F.softmax(x, dim=-1), "softmax(x, dim=-1) vs F.softmax")
    assert_close(impl.softmax(x, dim=1), F.softmax(x, dim=1), "softmax(x, dim=1) vs F.softmax (use the dim argument)")


@pytest.mark.graded(SOFTMAX, weight=1)
def test_softmax_is_stable(impl, device):
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]], device=device)
    assert_close(impl.softmax(x), torch.tensor([[1.0, 0, 0], [1 / 3, 1 / 3, 1 / 3]], device=device),
                 "softmax of logits of size 1e4 (subtract the row maximum before exp)")
    dead = impl.softmax(torch.full((2, 4), float("-inf"), device=device))
    assert not dead.isnan().any(), "a row that is entirely -inf gave NaN; it must give zeros"
    assert_equal(dead, torch.zeros(2, 4, device=device), "softmax of an all -inf row")


@pytest.mark.graded(CAUSAL, weight=2)
def test_causal_mask(impl, device):
    m = impl.causal_mask(4, device=device)
    assert m.dtype == torch.bool, f"the mask must be boolean, got {m.dtype}"
    assert m.device.type == device.type, f"causal_mask(..., device={device}) returned a mask on {m.device}"
    expected = [[True, False, False, False], [True, True, False, False],
                [True, True, True, False], [True, True, True, True]]
    assert m.tolist() == expected, f"causal_mask(4) = {m.int().tolist()}, expected {expected} as 0/1"
    # two new queries at positions 3 and 4 of a 5-token sequence
    got = impl.causal_mask(2, 5, device=device).tolist()
    assert got == [[True, True, True, True, False], [True] * 5], \
        f"causal_mask(2, 5) = {got}: the 2 queries are the LAST two positions (3 and 4)"
    one = impl.causal_mask(1, 6).tolist()
    assert one == [[True] * 6], f"causal_mask(1, 6) = {one}: one decode step sees every key"


@pytest.mark.graded(SDPA, weight=2, depends=("Exercise 4.1",))
@pytest.mark.parametrize("shape", [(3, 5, 16), (2, 4, 5, 16)], ids=["3d", "4d"])
def test_sdpa_matches_torch(impl, device, shape):
    q, k, v = (randn(*shape, seed=s, device=device) for s in (1, 2, 3))
    assert_close(impl.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v),
                 "attention without a mask vs F.scaled_dot_product_attention")
    mask = torch.rand(shape[-2], shape[-2], generator=torch.Generator().manual_seed(4)).to(device) > 0.3
    mask |= torch.eye(shape[-2], dtype=torch.bool, device=device)  # every query sees something
    assert_close(impl.scaled_dot_product_attention(q, k, v, mask),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 "attention with a boolean mask (True = may attend) vs F.scaled_dot_product_attention")


@pytest.mark.graded(SDPA, weight=2, depends=("Exercise 4.1",))
def test_sdpa_causal_and_fully_masked(impl, device):
    q, k, v = (randn(2, 3, 6, 8, seed=s, device=device) for s in (5, 6, 7))
    causal = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    out = impl.scaled_dot_product_attention(q, k, v, causal)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 "causal attention vs F.scaled_dot_product_attention(is_causal=True)")
    v2 = v.clone()
    v2[..., 4:, :] += 100.0  # change the future
    k2 = k.clone()
    k2[..., 4:, :] -= 50.0
    assert_equal(impl.scaled_dot_product_attention(q, k2, v2, causal)[..., :4, :], out[..., :4, :],
                 "with a causal mask, changing keys/values 4 and 5 changed the outputs of queries 0-3")
    # a batch row whose first two keys are padding: with causality its first two queries see nothing
    keys = torch.tensor([[False, False, True, True, True, True], [True] * 6], device=device)
    mask = causal & keys[:, None, None, :]
    masked = impl.scaled_dot_product_attention(q, k, v, mask)
    assert not masked.isnan().any(), "a query whose keys are all masked gave NaN; it must return zeros"
    assert_equal(masked[0, :, :2], torch.zeros_like(masked[0, :, :2]),
                 "queries whose keys are all masked must return zeros")


@pytest.mark.graded(SDPA, weight=1, depends=("Exercise 4.1",))
def test_sdpa_hand_example(impl):
    # one query, two keys: scores (0, 2*sqrt(2)) / sqrt(2) = (0, 2); weights softmax(0, 2)
    q = torch.tensor([[[1.0, 1.0]]])
    k = torch.tensor([[[1.0, -1.0], [2.0, 0.0]]]) * 2 ** 0.5
    v = torch.tensor([[[10.0, 0.0], [0.0, 10.0]]])
    w1 = torch.tensor(2.0).exp() / (1 + torch.tensor(2.0).exp())
    assert_close(impl.scaled_dot_product_attention(q, k, v), torch.stack([10 * (1 - w1), 10 * w1]).view(1, 1, 2),
                 "the hand example (scores divided by sqrt(d) = sqrt(2), then softmax)")


@pytest.mark.graded(SDPA, weight=1, depends=("Exercise 4.1",))
def test_sdpa_returns_q_dtype(impl, device):
    q, k, v = (randn(2, 4, 5, 16, seed=s, device=device).to(torch.bfloat16) for s in (8, 9, 10))
    out = impl.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.bfloat16, f"bf16 inputs: attention must return bf16 (q's dtype), got {out.dtype}"
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert_close(out.float(), expected, "bf16 attention vs float32 F.scaled_dot_product_attention",
                 rtol=2e-2, atol=2e-2)


@pytest.mark.graded(SPLIT, weight=1)
def test_split_heads(impl, device):
    x = torch.arange(2 * 3 * 8, device=device).view(2, 3, 8).float()
    heads = impl.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2), \
        f"split_heads((2, 3, 8), 4) has shape {tuple(heads.shape)}, expected (2, 4, 3, 2)"
    got = heads[1, 2, 0].tolist()
    assert got == x[1, 0, 4:6].tolist(), \
        f"head 2 of token 0 holds features {got}, expected features 4 and 5 ({x[1, 0, 4:6].tolist()})"


@pytest.mark.graded(MERGE, weight=1)
def test_merge_heads_inverts_split(impl, device):
    x = randn(2, 5, 12, device=device)
    heads = x.view(2, 5, 3, 4).transpose(1, 2)
    assert_equal(impl.merge_heads(heads), x, "merge_heads(split_heads(x)) != x")


@pytest.mark.graded(MHA, weight=2, depends=("Exercise 4.2", "Exercise 4.3", "Exercise 4.4", "Exercise 4.5"))
def test_multi_head_attention_uniform_when_queries_are_zero(impl, device):
    # W_Q = 0 makes every score 0, so causal attention averages the values of positions 0..t
    d, heads, T = 32, 4, 7
    x = randn(2, T, d, seed=8, device=device)
    w_v, w_o = randn(d, d, seed=11, device=device, scale=0.3), randn(d, d, seed=12, device=device, scale=0.3)
    zero = torch.zeros(d, d, device=device)
    values = x @ w_v.T                                                          # (B, T, D)
    running_mean = values.cumsum(dim=1) / torch.arange(1, T + 1, device=device)[None, :, None]
    out = impl.multi_head_attention(x, zero, randn(d, d, seed=10, device=device), w_v, w_o, heads)
    assert out.shape == (2, T, d), f"multi_head_attention returned shape {tuple(out.shape)}, expected (2, {T}, {d})"
    assert_close(out, running_mean @ w_o.T,
                 "with W_Q = 0 (all scores equal) causal attention must average the values of positions 0..t",
                 rtol=1e-4, atol=1e-5)


@pytest.mark.graded(ALIBI, weight=1, kind="homework")
def test_alibi_worked_example(impl):
    bias = impl.alibi_bias(1, 3)
    assert bias.shape == (1, 3, 3), f"alibi_bias(1, 3) has shape {tuple(bias.shape)}, expected (1, 3, 3)"
    assert_close(bias[0] * 256, torch.tensor([[0.0, 1, 2], [-1, 0, 1], [-2, -1, 0]]), "alibi_bias(1, 3)[0] * 2^8")
    slopes = -impl.alibi_bias(8, 2)[:, 1, 0]
    assert_close(slopes, torch.tensor([2.0 ** -(h + 1) for h in range(8)]), "the slopes of 8 heads (1/2 ... 1/256)")


@pytest.mark.graded(PREFIX, weight=1, kind="homework")
def test_prefix_lm_mask_worked_example(impl):
    m = impl.prefix_lm_mask(torch.tensor([2]), torch.tensor([4]), 4)
    assert m.dtype == torch.bool and m.shape == (1, 4, 4), \
        f"prefix_lm_mask returned {m.dtype} of shape {tuple(m.shape)}, expected bool (1, 4, 4)"
    expected = [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert m[0].int().tolist() == expected, f"the docstring's example: got {m[0].int().tolist()}, expected {expected}"
