"""Hidden tests for Chapter 10 (instructor edition and Gradescope only).

Oracles: slow references written here one token or one expert at a time from the definitions
(Exercise 10.2, Homework 10.A), invariants (an expert takes exactly `capacity` tokens; a token no
expert picks passes through as zero), and a Python loop that serves the assignments one by one in
priority order (Homework 10.B).
"""

import pytest
import torch
import torch.nn.functional as F
from graded._checks import assert_close

PACKAGE_MODULES = ["llama_course.moe"]

MOE = "Exercise 10.2 moe_forward"
CHOICE = "Homework 10.A expert_choice_moe"
DISPATCH = "Homework 10.B priority_dispatch"


@pytest.mark.graded(MOE, weight=2, depends=("Exercise 10.1",))
def test_moe_forward_per_token_reference(impl):
    g = torch.Generator().manual_seed(4)
    E, d, f = 5, 8, 12
    gate = torch.randn(E, d, generator=g)
    experts = [(torch.randn(f, d, generator=g) * 0.3, torch.randn(f, d, generator=g) * 0.3,
                torch.randn(d, f, generator=g) * 0.3) for _ in range(E)]
    x = torch.randn(6, d, generator=g)
    expected = torch.zeros(6, d)
    for n in range(6):  # one token at a time, from the definition
        p = torch.softmax(x[n] @ gate.T, -1)
        w, idx = p.topk(3)
        w = w / w.sum()
        for weight, e in zip(w, idx):
            wg, wu, wd = experts[int(e)]
            expected[n] += weight * ((F.silu(x[n] @ wg.T) * (x[n] @ wu.T)) @ wd.T)
    assert_close(impl.moe_forward(x, gate, experts, 3), expected, "moe_forward (top-3 of 5) vs one token at a time")


def swiglu_ref(x, w):
    w_gate, w_up, w_down = w
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def experts_and_gate(E, d, f, seed, std=0.3):
    g = torch.Generator().manual_seed(seed)
    experts = [tuple(torch.randn(*s, generator=g) * std for s in ((f, d), (f, d), (d, f))) for _ in range(E)]
    return experts, torch.randn(E, d, generator=g)


def expert_choice_reference(x, gate, experts, capacity):
    probs = torch.softmax((x @ gate.T).double(), dim=-1)                   # (N, E)
    out = torch.zeros(x.shape, dtype=torch.float64)
    picks = []
    for e, w in enumerate(experts):
        tokens = sorted(range(x.shape[0]), key=lambda n: (-probs[n, e].item(), n))[:capacity]
        picks.append(tokens)
        for n in tokens:
            out[n] += probs[n, e] * swiglu_ref(x[n].double(), [t.double() for t in w])
    return out, picks


@pytest.mark.graded(CHOICE, weight=1, kind="homework")
@pytest.mark.parametrize("capacity", [1, 3, 8, 10])
def test_expert_choice_matches_the_definition(impl, capacity):
    experts, gate = experts_and_gate(4, 8, 12, seed=1)
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(2))
    expected, picks = expert_choice_reference(x, gate, experts, capacity)
    got = impl.expert_choice_moe(x, gate, experts, capacity)
    assert got.shape == x.shape and got.dtype == x.dtype, f"shape {tuple(got.shape)} {got.dtype}, expected x's"
    unchosen = sorted(set(range(10)) - set().union(*picks))
    assert_close(got, expected.to(x.dtype), f"expert_choice_moe (capacity {capacity}; experts pick tokens {picks}; "
                 f"tokens {unchosen} unchosen) vs one expert at a time", rtol=1e-4, atol=1e-5)


@pytest.mark.graded(CHOICE, weight=4, kind="homework")
def test_expert_choice_ties_dtype_and_errors(impl):
    experts, gate = experts_and_gate(3, 4, 6, seed=3)
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    x[3] = x[1]
    x[5] = x[1]                                                            # tokens 1, 3, 5 tie for every expert
    expected, picks = expert_choice_reference(x, gate, experts, 2)
    assert_close(impl.expert_choice_moe(x, gate, experts, 2), expected.to(x.dtype),
                 f"tied tokens: each expert takes the lower token index first (picks {picks})", rtol=1e-4, atol=1e-5)
    half = impl.expert_choice_moe(x.to(torch.bfloat16), gate.to(torch.bfloat16),
                                  [tuple(t.to(torch.bfloat16) for t in w) for w in experts], 2)
    assert half.dtype == torch.bfloat16, f"bf16 input must give a bf16 output, got {half.dtype}"
    for bad in (0, 7):
        with pytest.raises(ValueError, match="capacity"):
            impl.expert_choice_moe(x, gate, experts, bad)


def dispatch_reference(weights, indices, n_experts, capacity):
    N, k = weights.shape
    order = sorted(((n, j) for n in range(N) for j in range(k)), key=lambda a: (-weights[a].item(), a[0], a[1]))
    used, slots = [0] * n_experts, [[-1] * k for _ in range(N)]
    for n, j in order:
        e = int(indices[n, j])
        if used[e] < capacity:
            slots[n][j], used[e] = used[e], used[e] + 1
    return slots


@pytest.mark.graded(DISPATCH, weight=1, kind="homework")
@pytest.mark.parametrize("capacity", [0, 1, 3, 5, 40])
def test_priority_dispatch_matches_one_by_one(impl, capacity):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(20, 6, generator=g) * 2
    logits[:, 0] += 1.5                                                     # expert 0 is popular: it overflows
    probs = logits.softmax(-1)
    weights, indices = probs.topk(2, dim=-1)
    expected = dispatch_reference(weights, indices, 6, capacity)
    slots, dropped = impl.priority_dispatch(weights, indices, 6, capacity)
    assert slots.dtype == torch.int64, f"slots must be int64, got {slots.dtype}"
    first = next(((n, j) for n in range(20) for j in range(2) if slots[n, j].item() != expected[n][j]), None)
    assert first is None, (f"capacity {capacity}: assignment (token {first[0]}, choice {first[1]}) to expert "
                           f"{indices[first].item()} with weight {weights[first].item():.3f} got slot "
                           f"{slots[first].item()}, expected {expected[first[0]][first[1]]} (serve the largest "
                           f"weights first)") if first else ""
    n_dropped = sum(s == -1 for row in expected for s in row)
    assert dropped == n_dropped and type(dropped) is int, f"dropped = {dropped!r}, expected the int {n_dropped}"


@pytest.mark.graded(DISPATCH, weight=3, kind="homework")
def test_priority_dispatch_ties_and_errors(impl):
    weights = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.7, 0.3]])
    indices = torch.tensor([[0, 1], [1, 0], [1, 0]])
    slots, dropped = impl.priority_dispatch(weights, indices, 2, 2)
    expected = dispatch_reference(weights, indices, 2, 2)
    assert slots.tolist() == expected, \
        f"equal weights: the lower token first, then the lower column; got {slots.tolist()}, expected {expected}"
    assert dropped == 2, f"dropped = {dropped}, expected 2"
    with pytest.raises(ValueError, match="capacity"):
        impl.priority_dispatch(weights, indices, 2, -1)
