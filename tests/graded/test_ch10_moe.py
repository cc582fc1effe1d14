"""Graded tests for Chapter 10 (exercises/ch10_moe.py).

Oracles: transformers' Mixtral router, sparse MoE block and load_balancing_loss_func on the same
weights, and invariants (normalised weights sum to 1). (tests/hidden adds a slow per-token
reference.) Homework 10.A and 10.B: public checks only (the docstrings' examples).
"""

import pytest
import torch

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.moe"]

ROUTE = "Exercise 10.1 route_topk"
MOE = "Exercise 10.2 moe_forward"
LOSS = "Exercise 10.3 load_balancing_loss"
CHOICE = "Homework 10.A expert_choice_moe"
DISPATCH = "Homework 10.B priority_dispatch"

transformers = pytest.importorskip("transformers")
modeling_mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")


def mixtral_block(seed=0, experts=4, top_k=2):
    config = transformers.MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=experts,
                                        num_experts_per_tok=top_k)
    torch.manual_seed(seed)
    block = modeling_mixtral.MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3)
    return block


@pytest.mark.graded(ROUTE, weight=2)
def test_route_topk_matches_mixtral_router(impl):
    block = mixtral_block()
    x = torch.randn(7, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, expected_w, expected_i = block.gate(x)
    weights, indices = impl.route_topk(logits, 2)
    assert_equal(indices, expected_i, "the chosen experts vs Mixtral's router (largest probability first)")
    assert_close(weights, expected_w, "the routing weights vs Mixtral's router")
    assert_close(weights.sum(-1), torch.ones(7), "normalised routing weights must sum to 1 for every token")


@pytest.mark.graded(ROUTE, weight=1)
def test_route_topk_unnormalised_and_bad_k(impl):
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    weights, indices = impl.route_topk(logits, 2, normalize=False)
    probs = torch.softmax(logits, -1)[0]
    assert indices.tolist() == [[1, 2]], f"top-2 of logits [1, 3, 2, 0] must be experts [1, 2], got {indices.tolist()}"
    assert_close(weights[0], probs[[1, 2]], "normalize=False: the weights are the softmax probabilities themselves")
    with pytest.raises(ValueError, match="top_k"):
        impl.route_topk(logits, 5)
    with pytest.raises(ValueError, match="top_k"):
        impl.route_topk(logits, 0)


@pytest.mark.graded(ROUTE, weight=1)
def test_route_topk_returns_float32_and_int64(impl):
    logits = torch.randn(5, 8, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    weights, indices = impl.route_topk(logits, 3)
    assert weights.dtype == torch.float32, f"bf16 router logits: the weights must be float32, got {weights.dtype}"
    assert indices.dtype == torch.int64, f"the indices must be int64, got {indices.dtype}"
    assert_close(weights, torch.softmax(logits.float(), -1).topk(3).values.div_(
        torch.softmax(logits.float(), -1).topk(3).values.sum(-1, keepdim=True)),
        "bf16 logits: weights from a float32 softmax", rtol=1e-6, atol=1e-7)


def expert_weights(block):
    out = []
    for e in range(block.experts.num_experts):
        gate, up = block.experts.gate_up_proj[e].detach().chunk(2, dim=0)
        out.append((gate.clone(), up.clone(), block.experts.down_proj[e].detach().clone()))
    return out


@pytest.mark.graded(MOE, weight=3, depends=("Exercise 10.1",))
def test_moe_forward_matches_mixtral_block(impl):
    block = mixtral_block(seed=2)
    x = torch.randn(9, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = block(x[None])[0]
    out = impl.moe_forward(x, block.gate.weight.detach().clone(), expert_weights(block), 2)
    assert_close(out, expected, "moe_forward vs transformers' MixtralSparseMoeBlock")


@pytest.mark.graded(LOSS, weight=3)
def test_load_balancing_loss_matches_transformers(impl):
    g = torch.Generator().manual_seed(5)
    layers = tuple(torch.randn(12, 8, generator=g) * 2 for _ in range(3))
    for top_k in (1, 2):
        expected = modeling_mixtral.load_balancing_loss_func(layers, 8, top_k)
        assert_close(impl.load_balancing_loss(layers, 8, top_k), expected,
                     f"load_balancing_loss over 3 layers (top_k={top_k}) vs transformers' load_balancing_loss_func")
    collapsed = torch.tensor([[50.0, 0, 0, 0]] * 8)
    got = impl.load_balancing_loss(collapsed, 4, 1).item()
    assert got == pytest.approx(4.0), f"every token on one expert of 4 must give E * 1 * 1 = 4, got {got}"


@pytest.mark.graded(CHOICE, weight=1, kind="homework")
def test_expert_choice_worked_example(impl):
    d, f = 2, 6
    g = torch.Generator().manual_seed(10)
    experts = [tuple(torch.randn(*s, generator=g) for s in ((f, d), (f, d), (d, f))) for _ in range(2)]
    x = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.8, 0.2]]).log()       # with gate = I, P = softmax(log p) = p
    out = impl.expert_choice_moe(x, torch.eye(2), experts, 1)
    assert out.shape == (3, 2), f"expert_choice_moe returned shape {tuple(out.shape)}, expected (3, 2)"
    assert_close(out[2], torch.zeros(2), "token 2 is chosen by no expert: its output must be zero", rtol=0, atol=0)
    w_gate, w_up, w_down = experts[0]
    h = x[1] @ w_gate.T
    expected = 0.9 * ((h * torch.sigmoid(h) * (x[1] @ w_up.T)) @ w_down.T)
    assert_close(out[1], expected, "token 1 = 0.9 * expert 0(x[1]) (expert 0 takes token 1 only)")


@pytest.mark.graded(DISPATCH, weight=1, kind="homework")
def test_priority_dispatch_worked_example(impl):
    weights, indices = torch.tensor([[0.6, 0.4], [0.9, 0.1]]), torch.tensor([[0, 1], [0, 1]])
    slots, dropped = impl.priority_dispatch(weights, indices, 2, 1)
    assert slots.tolist() == [[-1, 0], [0, -1]] and dropped == 2, \
        f"the docstring's example: got slots {slots.tolist()}, dropped {dropped}; expected [[-1, 0], [0, -1]], 2"
