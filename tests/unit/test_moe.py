"""Mixture of experts against transformers' Mixtral (model, sparse block, auxiliary loss), a slow
per-token reference, capacity dropping, and bad input."""

import pytest
import torch

from llama_course import LlamaConfig, count_parameters
from llama_course.checkpoint import load_hf
from llama_course.grade.testing import realistic_weights_
from llama_course.moe import MoE, load_balancing_loss, route_topk, router_z_loss

transformers = pytest.importorskip("transformers")
modeling_mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")


def mixtral(seed=0, layers=2):
    config = transformers.MixtralConfig(vocab_size=67, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=64,
                                        attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.MixtralForCausalLM(config).eval()
    realistic_weights_(model, std=0.2)
    return model


def test_mixtral_logits_and_aux_loss_match(tmp_path, device):
    reference = mixtral()
    reference.save_pretrained(tmp_path)
    ours = load_hf(tmp_path, device=device)
    assert (ours.config.n_experts, ours.config.n_experts_per_token) == (4, 2)
    assert sum(p.numel() for p in ours.parameters()) == count_parameters(ours.config)["total"] == \
        sum(p.numel() for p in reference.parameters())
    ids = torch.randint(0, 67, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :2] = 0
    with torch.no_grad():
        expected = reference(ids, output_router_logits=True)
        logits = ours(ids.to(device))
    torch.testing.assert_close(logits.cpu(), expected.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(load_balancing_loss(ours.router_logits(), 4, 2).cpu(),
                               modeling_mixtral.load_balancing_loss_func(expected.router_logits, 4, 2))
    torch.testing.assert_close(load_balancing_loss(ours.router_logits(), 4, 2, mask.to(device)).cpu(),
                               modeling_mixtral.load_balancing_loss_func(expected.router_logits, 4, 2, mask))


def test_moe_block_matches_transformers_sparse_block():
    reference = mixtral(seed=2, layers=1)
    block = reference.model.layers[0].mlp
    ours = MoE(32, 48, 4, 2)
    with torch.no_grad():
        ours.gate.weight.copy_(block.gate.weight)
        for e, expert in enumerate(ours.experts):
            gate, up = block.experts.gate_up_proj[e].chunk(2, dim=0)
            expert.gate_proj.weight.copy_(gate)
            expert.up_proj.weight.copy_(up)
            expert.down_proj.weight.copy_(block.experts.down_proj[e])
        x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(ours(x), block(x), rtol=1e-5, atol=1e-5)


def slow_moe(moe, x, normalize=True):
    """One token at a time, straight from the definition."""
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        probs = torch.softmax(moe.gate(x[n]).float(), -1)
        w, e = probs.topk(moe.top_k)
        if normalize:
            w = w / w.sum()
        for weight, expert in zip(w, e):
            out[n] += weight * moe.experts[int(expert)](x[n][None])[0]
    return out


@pytest.mark.parametrize("normalize", [True, False])
def test_dispatch_equals_per_token_reference(device, normalize):
    torch.manual_seed(4)
    moe = MoE(16, 24, 6, 3, normalize_topk=normalize, device=device)
    x = torch.randn(11, 16, device=device)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), slow_moe(moe, x, normalize), rtol=1e-5, atol=1e-5)


def test_each_expert_sees_only_its_tokens():
    torch.manual_seed(5)
    moe = MoE(8, 16, 4, 1)
    seen = {}
    for e, expert in enumerate(moe.experts):
        expert.register_forward_hook(lambda module, inputs, output, e=e: seen.__setitem__(e, inputs[0].shape[0]))
    x = torch.randn(20, 8)
    with torch.no_grad():
        moe(x)
    chosen = moe.router_logits.argmax(-1)
    assert seen == {e: int((chosen == e).sum()) for e in range(4) if (chosen == e).any()}
    assert sum(seen.values()) == 20  # k/E of the dense work: 20 token-expert pairs, not 80


def test_capacity_factor_drops_in_token_order():
    torch.manual_seed(6)
    moe = MoE(8, 16, 2, 1, capacity_factor=0.5)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0, 0] = 10.0  # every token with x0 > 0 goes to expert 0
        x = torch.randn(12, 8).abs()   # all go to expert 0; capacity ceil(0.5 * 12 / 2) = 3
        y = moe(x)
    assert moe.dropped == 9
    assert not torch.equal(y[:3], torch.zeros_like(y[:3])) and torch.equal(y[3:], torch.zeros_like(y[3:]))


def test_route_topk_and_losses():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    w, e = route_topk(logits, 2)
    torch.testing.assert_close(w.sum(-1), torch.ones(2))
    assert e[0].tolist() == [0, 1]
    p = torch.softmax(logits[0], -1)
    torch.testing.assert_close(route_topk(logits, 2, normalize=False)[0][0], p[:2])
    # a uniform router: ties send every token to expert 0, f = (1, 0, 0, 0), P = 1/4 each: 4 * 1/4 = 1
    assert load_balancing_loss(torch.zeros(8, 4), 4, 1).item() == pytest.approx(1.0)
    # perfectly balanced and confident: f = 1/4 and P = 1/4 for every expert: 4 * 4 * 1/16 = 1
    confident = torch.eye(4).repeat(2, 1) * 50
    assert load_balancing_loss(confident, 4, 1).item() == pytest.approx(1.0)
    # collapsed onto one expert: f = (1, 0, 0, 0), P = (1, 0, 0, 0): 4, the maximum
    assert load_balancing_loss(torch.tensor([[50.0, 0, 0, 0]] * 8), 4, 1).item() == pytest.approx(4.0)
    assert router_z_loss(torch.zeros(3, 4)).item() == pytest.approx(torch.log(torch.tensor(4.0)).item() ** 2)


def test_bad_input():
    with pytest.raises(ValueError, match="top_k"):
        route_topk(torch.zeros(2, 4), 5)
    with pytest.raises(ValueError, match="top_k"):
        MoE(8, 16, 4, 0)
    with pytest.raises(ValueError, match="n_experts=4"):
        load_balancing_loss(torch.zeros(3, 5), 4, 2)
    with pytest.raises(ValueError, match="n_experts_per_token"):
        LlamaConfig(vocab_size=10, d_model=8, n_layers=1, n_heads=2, n_experts=2, n_experts_per_token=3)


def test_forward_hooks_fire_on_the_router_and_every_expert_projection():
    moe = MoE(8, 16, n_experts=4, top_k=4)              # top_k = n_experts: every expert gets every token
    fired = []
    for name, module in moe.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out, name=name: fired.append(name))
    moe(torch.randn(2, 3, 8))
    linears = [name for name, module in moe.named_modules() if isinstance(module, torch.nn.Linear)]
    assert len(linears) == 1 + 4 * 3 and sorted(fired) == sorted(linears)


def test_empty_inputs_infinite_capacity_and_mixed_devices():
    with pytest.raises(ValueError, match="no tokens"):
        load_balancing_loss(torch.zeros(0, 4), 4, 2)
    with pytest.raises(ValueError, match="no tokens"):
        router_z_loss(torch.zeros(0, 4))
    with pytest.raises(ValueError, match="capacity_factor must be a finite number > 0"):
        MoE(8, 16, 4, 2, capacity_factor=float("inf"))
    with pytest.raises(TypeError, match="router_logits must be a floating-point tensor"):
        route_topk(torch.zeros(3, 4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="one device"):
        MoE(8, 16, 4, 2)(torch.randn(3, 8, device="meta"))
    loss = load_balancing_loss(torch.randn(2, 3, 4), 4, 2, attention_mask=torch.zeros(2, 3, dtype=torch.long))
    assert loss.item() == 0.0                           # every token masked: nothing to balance


def test_router_statistics_stay_float64():
    logits = torch.randn(5, 4, dtype=torch.float64)
    weights, _ = route_topk(logits, 2)
    assert weights.dtype == torch.float64
    assert load_balancing_loss(logits, 4, 2).dtype == router_z_loss(logits).dtype == torch.float64
    expected = torch.softmax(logits, -1).topk(2).values
    torch.testing.assert_close(weights, expected / expected.sum(-1, keepdim=True), rtol=0, atol=1e-15)
