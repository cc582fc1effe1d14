"""Hidden tests for Chapter 12 (instructor edition and Gradescope only).

Oracles: the homework definitions written out entry by entry with Python loops; transformers'
sliding-window mask function (Homework 12.A with no sinks); invariants (no key after its query,
every query sees the sinks, a balanced routing with uniform scores costs exactly alpha, the loss is
differentiable in the scores).
"""

import pytest
import torch
from graded._checks import assert_close, assert_equal

from llama_course.grade.testing import gradient_in_worker

PACKAGE_MODULES = ["llama_course.sliding_window", "llama_course.deepseek_moe"]

SINK = "Homework 12.A attention_sink_mask"
BALANCE = "Homework 12.B sequence_balance_loss"


def sink_by_loops(q_len, window, n_sink, kv_len):
    return torch.tensor([[j <= kv_len - q_len + i and (kv_len - q_len + i - window < j or j < n_sink)
                          for j in range(kv_len)] for i in range(q_len)])


@pytest.mark.graded(SINK, weight=3, kind="homework")
@pytest.mark.parametrize("q_len,window,n_sink,kv_len", [(9, 3, 2, None), (1, 4, 4, 12), (4, 2, 1, 10),
                                                        (6, 6, 0, None), (5, 1, 3, None), (3, 20, 2, 7)])
def test_attention_sink_mask_from_the_definition(impl, device, q_len, window, n_sink, kv_len):
    got = impl.attention_sink_mask(q_len, window, n_sink, kv_len, device=device)
    assert got.dtype == torch.bool, f"attention_sink_mask must return a boolean mask, got {got.dtype}"
    assert got.device.type == device.type, f"attention_sink_mask(..., device={device}) returned a mask on {got.device}"
    assert_equal(got.cpu(), sink_by_loops(q_len, window, n_sink, kv_len or q_len),
                 f"attention_sink_mask(q_len={q_len}, window={window}, n_sink={n_sink}, kv_len={kv_len}) "
                 "vs the definition")


@pytest.mark.graded(SINK, weight=1, kind="homework")
def test_attention_sink_mask_properties(impl):
    pytest.importorskip("transformers")
    from transformers.masking_utils import sliding_window_causal_mask_function
    rule = sliding_window_causal_mask_function(3)
    window_only = rule(0, 0, torch.arange(8)[:, None], torch.arange(8)[None, :])
    assert torch.equal(impl.attention_sink_mask(8, 3, 0), window_only), "n_sink=0 is a plain sliding window"
    mask = impl.attention_sink_mask(8, 3, 2)
    assert not mask.triu(diagonal=1).any(), "no query may see a later key"
    assert mask[:, 0].all() and mask[1:, 1].all(), "every query sees the sinks that precede it"
    assert_equal(impl.attention_sink_mask(6, 2, 6), torch.ones(6, 6, dtype=torch.bool).tril(),
                 "attention_sink_mask(6, 2, 6): with every key a sink the mask is plainly causal")
    with pytest.raises(ValueError, match="window"):
        impl.attention_sink_mask(4, 0, 1)
    with pytest.raises(ValueError, match="n_sink"):
        impl.attention_sink_mask(4, 2, -1)


def balance_by_loops(scores, experts, n_experts, alpha):
    T, K = experts.shape
    s = scores.double().tolist()
    total = 0.0
    for i in range(n_experts):
        f = n_experts / (K * T) * sum(1 for t in range(T) if i in experts[t].tolist())
        p = sum(s[t][i] / sum(s[t]) for t in range(T)) / T
        total += f * p
    return alpha * total


def balance_gradient(scores, experts, n_experts, alpha):
    """d loss / d s_{i,t} from the definition, entry by entry in float64 (P_i = mean_t s_{i,t} / S_t)."""
    T, K = experts.shape
    s = scores.double().tolist()
    f = [n_experts / (K * T) * sum(1 for t in range(T) if i in experts[t].tolist()) for i in range(n_experts)]
    grad = [[0.0] * n_experts for _ in range(T)]
    for t in range(T):
        total = sum(s[t])
        mixed = sum(f[j] * s[t][j] for j in range(n_experts)) / total
        for i in range(n_experts):
            grad[t][i] = alpha / T * (f[i] - mixed) / total
    return torch.tensor(grad, dtype=scores.dtype)


@pytest.mark.graded(BALANCE, weight=3, kind="homework")
@pytest.mark.parametrize("T,E,K,seed", [(16, 8, 2, 0), (5, 6, 3, 1), (32, 16, 4, 2)])
def test_sequence_balance_loss_from_the_definition(impl, T, E, K, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.sigmoid(torch.randn(T, E, generator=g) * 2)
    experts = torch.rand(T, E, generator=g).argsort(dim=-1)[:, :K]             # K distinct experts per token
    got = impl.sequence_balance_loss(scores, experts, E, 0.3)
    assert got.dim() == 0 and got.dtype == torch.float32, \
        f"the loss must be a 0-dim float32 tensor, got shape {tuple(got.shape)} and {got.dtype}"
    expected = balance_by_loops(scores, experts, E, 0.3)
    assert abs(got.item() - expected) < 1e-5, \
        f"T={T}, E={E}, K={K}: loss {got.item():.6g}, the definition's {expected:.6g}"


@pytest.mark.graded(BALANCE, weight=1, kind="homework")
def test_sequence_balance_loss_balanced_costs_alpha_and_responds_to_scores(impl):
    T, E = 8, 4
    experts = torch.tensor([[t % E, (t + 1) % E] for t in range(T)])            # each expert 4 times
    loss = impl.sequence_balance_loss(torch.full((T, E), 0.7), experts, E, 0.01)
    assert abs(loss.item() - 0.01) < 1e-7, \
        f"an even routing with uniform scores costs alpha = 0.01, got {loss.item():.6g}"
    # differentiable in the scores: the gradient, taken where your code runs, against the
    # derivative of the definition, d loss / d s_{i,t} = alpha / T * (f_i - sum_j f_j s'_{j,t}) / S_t
    g = torch.Generator().manual_seed(3)
    scores = torch.sigmoid(torch.randn(T, E, generator=g)) + 0.1
    experts = torch.rand(T, E, generator=g).argsort(dim=-1)[:, :2]               # an uneven routing
    expected = balance_gradient(scores, experts, E, 0.5)
    assert expected.abs().max() > 1e-3, "the test's own case: its gradient is too small to check"
    value, grad = gradient_in_worker(impl, "sequence_balance_loss", 0, scores, experts, E, 0.5)
    assert grad is not None, ("the loss carries no gradient back to the scores (cut off from the graph: "
                              ".item(), float(), torch.tensor(...) of a number, .detach()?)")
    assert_close(grad, expected, "d loss / d scores vs the definition's",
                 rtol=1e-4, atol=1e-6)
