"""Graded tests for Chapter 10 (exercises/ch10_moe.py).

Oracles: transformers' Mixtral router, sparse MoE block and load_balancing_loss_func on the same
weights, a slow per-token reference written here, and invariants (normalised weights sum to 1,
only k experts contribute to a token).
"""

import pytest
import torch
import torch.nn.functional as F

PACKAGE_MODULES = ["llama_course.moe"]

ROUTE = "Exercise 10.1 route_topk"
MOE = "Exercise 10.2 moe_forward"
LOSS = "Exercise 10.3 load_balancing_loss"

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


@pytest.mark.graded(ROUTE, points=2)
def test_route_topk_matches_mixtral_router(impl):
    block = mixtral_block()
    x = torch.randn(7, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, expected_w, expected_i = block.gate(x)
    weights, indices = impl.route_topk(logits, 2)
    assert torch.equal(indices, expected_i)
    torch.testing.assert_close(weights, expected_w)
    torch.testing.assert_close(weights.sum(-1), torch.ones(7))


@pytest.mark.graded(ROUTE, points=1)
def test_route_topk_unnormalised_and_bad_k(impl):
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    weights, indices = impl.route_topk(logits, 2, normalize=False)
    probs = torch.softmax(logits, -1)[0]
    assert indices.tolist() == [[1, 2]]
    torch.testing.assert_close(weights[0], probs[[1, 2]])
    with pytest.raises(ValueError, match="top_k"):
        impl.route_topk(logits, 5)
    with pytest.raises(ValueError, match="top_k"):
        impl.route_topk(logits, 0)


def expert_weights(block):
    out = []
    for e in range(block.experts.num_experts):
        gate, up = block.experts.gate_up_proj[e].detach().chunk(2, dim=0)
        out.append((gate.clone(), up.clone(), block.experts.down_proj[e].detach().clone()))
    return out


@pytest.mark.graded(MOE, points=3)
def test_moe_forward_matches_mixtral_block(impl):
    block = mixtral_block(seed=2)
    x = torch.randn(9, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = block(x[None])[0]
    out = impl.moe_forward(x, block.gate.weight.detach().clone(), expert_weights(block), 2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(MOE, points=2)
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
    torch.testing.assert_close(impl.moe_forward(x, gate, experts, 3), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(LOSS, points=3)
def test_load_balancing_loss_matches_transformers(impl):
    g = torch.Generator().manual_seed(5)
    layers = tuple(torch.randn(12, 8, generator=g) * 2 for _ in range(3))
    for top_k in (1, 2):
        expected = modeling_mixtral.load_balancing_loss_func(layers, 8, top_k)
        torch.testing.assert_close(impl.load_balancing_loss(layers, 8, top_k), expected)
    collapsed = torch.tensor([[50.0, 0, 0, 0]] * 8)
    assert impl.load_balancing_loss(collapsed, 4, 1).item() == pytest.approx(4.0)  # everything on one expert
