"""DeepSeekMoE and DeepSeek-V3 (Chapter 12): routing by hand-worked examples, whole models equal to
transformers (DeepSeek-V3 and Qwen3-MoE), exact parameter counts."""

import math

import pytest
import torch
from safetensors.torch import save_file

from llama_course import PRESETS, KVCache, LlamaConfig, count_parameters, generate
from llama_course.checkpoint import load_hf
from llama_course.deepseek_moe import DeepSeekMoE, group_limited_topk, update_balancing_bias
from llama_course.grade.testing import realistic_weights_
from llama_course.mla import MultiHeadLatentAttention
from llama_course.model import Llama
from llama_course.moe import MoE, route_topk

transformers = pytest.importorskip("transformers")


def test_group_limited_topk_by_hand():
    # 8 experts in 4 groups of 2. Group scores (sum of the two): 0.9+0.1=1.0, 0.5+0.45=0.95,
    # 0.3+0.2=0.5, 0.85+0.0=0.85. Best 2 groups: 0 and 1 -> the top-2 expert among {0,1,2,3} are
    # 0 (0.9) and 2 (0.5); expert 6 (0.85) is better but its group lost.
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.45, 0.3, 0.2, 0.85, 0.0]])
    assert sorted(group_limited_topk(scores, 2, n_group=4, topk_group=2)[0].tolist()) == [0, 2]
    assert sorted(group_limited_topk(scores, 2)[0].tolist()) == [0, 6]          # one group: plain top-k
    with pytest.raises(ValueError, match="n_group"):
        group_limited_topk(scores, 5, n_group=4, topk_group=2)                 # only 4 experts allowed


def test_bias_selects_but_does_not_weight():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 1.0])                                  # favour expert 3
    weights, experts = route_topk(logits, 2, True, "sigmoid", bias=bias, scaling=2.5)
    s = torch.sigmoid(logits[0])
    assert experts[0].tolist() == [3, 0]                                        # 0.27 + 1 beats 0.88
    expected = torch.stack([s[3], s[0]]) / (s[3] + s[0]) * 2.5                 # from s, not s + b
    torch.testing.assert_close(weights[0], expected)
    plain_w, plain_e = route_topk(logits, 2, False, "sigmoid")
    assert plain_e[0].tolist() == [0, 1]
    torch.testing.assert_close(plain_w[0], s[:2])


def test_balancing_bias_moves_load_toward_even():
    torch.manual_seed(0)
    n_experts, top_k = 8, 2
    skew = torch.linspace(1.5, -1.5, n_experts)                                 # expert 0 favoured
    bias = torch.zeros(n_experts)
    for _ in range(300):
        logits = torch.randn(256, n_experts) + skew
        _, experts = route_topk(logits, top_k, score="sigmoid", bias=bias)
        bias = update_balancing_bias(bias, experts, rate=0.01)
    logits = torch.randn(4096, n_experts) + skew
    before = torch.bincount(route_topk(logits, top_k, score="sigmoid")[1].reshape(-1), minlength=n_experts)
    after = torch.bincount(route_topk(logits, top_k, score="sigmoid", bias=bias)[1].reshape(-1), minlength=n_experts)
    assert before.max() / before.float().mean() > 2.5                          # skewed without the bias
    assert after.max() / after.float().mean() < 1.3                           # near even with it
    assert bias[0] < 0 < bias[-1]                                               # favoured expert pushed down


def _hf_v3_config(**extra):
    sizes = dict(vocab_size=101, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                 num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                 kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8,
                 n_shared_experts=1, n_group=4, topk_group=2, num_experts_per_tok=3, first_k_dense_replace=1,
                 routed_scaling_factor=2.5, max_position_embeddings=64, attn_implementation="eager",
                 pad_token_id=0)
    return transformers.DeepseekV3Config(**{**sizes, **extra})


@pytest.fixture
def deepseek_v3(tmp_path):
    """transformers' DeepseekV3ForCausalLM, tiny (MLA, groups, shared experts, one dense layer), realistic
    weights and a random balancing bias, saved; and the course's Llama loaded from it."""
    torch.manual_seed(0)
    hf = transformers.DeepseekV3ForCausalLM(_hf_v3_config()).eval()
    realistic_weights_(hf, std=0.2)
    with torch.no_grad():
        for name, b in hf.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn_like(b))
    hf.generation_config.eos_token_id = None
    hf.save_pretrained(tmp_path)
    return hf, load_hf(tmp_path)


def test_deepseek_v3_structure(deepseek_v3):
    hf, ours = deepseek_v3
    assert isinstance(ours.layers[0].self_attn, MultiHeadLatentAttention)
    assert not isinstance(ours.layers[0].mlp, DeepSeekMoE) and isinstance(ours.layers[2].mlp, DeepSeekMoE)
    bias = ours.layers[1].mlp.gate.e_score_correction_bias
    assert torch.equal(bias, hf.model.layers[1].mlp.gate.e_score_correction_bias) and bias.abs().sum() > 0
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters()) \
        == count_parameters(ours.config)["total"]


def test_deepseek_v3_prefill_and_cached_decode_match_transformers(deepseek_v3):
    hf, ours = deepseek_v3
    ids = torch.randint(1, 101, (2, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        got = ours(ids, attention_mask=mask)
        cache = KVCache(ours.config, 2, 11)
        steps = [ours(ids[:, :5], cache=cache, attention_mask=mask[:, :5])]
        for t in range(5, 11):
            steps.append(ours(ids[:, t:t + 1], cache=cache, attention_mask=mask[:, :t + 1]))
    real = mask.bool()
    assert (got - expected)[real].abs().max() <= 1e-5
    assert (torch.cat(steps, 1) - expected)[real].abs().max() <= 1e-5


def test_deepseek_v3_greedy_generation_token_for_token(deepseek_v3):
    hf, ours = deepseek_v3
    prompt = torch.randint(1, 101, (1, 4), generator=torch.Generator().manual_seed(2))
    expected = hf.generate(prompt, max_new_tokens=10, do_sample=False)
    assert torch.equal(generate(ours, prompt, 10), expected)


def test_fused_3d_expert_tensors_load(deepseek_v3, tmp_path):
    # transformers keeps experts as (E, 2F, d) gate_up_proj and (E, d, F) down_proj in memory:
    # a file written straight from its state_dict loads too
    hf, _ = deepseek_v3
    fused = tmp_path / "fused"
    fused.mkdir()
    (fused / "config.json").write_text((tmp_path / "config.json").read_text())
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    assert state["model.layers.1.mlp.experts.gate_up_proj"].dim() == 3
    save_file(state, str(fused / "model.safetensors"))
    ours = load_hf(fused)
    ids = torch.randint(1, 101, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, rtol=0, atol=1e-5)


def test_an_expert_stored_both_fused_and_one_by_one_is_refused(deepseek_v3, tmp_path):
    from safetensors.torch import load_file

    from llama_course.checkpoint import CheckpointError

    hf, _ = deepseek_v3
    both = tmp_path / "both"
    both.mkdir()
    (both / "config.json").write_text((tmp_path / "config.json").read_text())
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}                  # fused, 3-D
    per_expert = load_file(str(tmp_path / "model.safetensors"))                      # one matrix per expert
    name = "model.layers.1.mlp.experts.0.gate_proj.weight"
    state[name] = 2 * per_expert[name]                                              # and expert 0 again
    save_file(state, str(both / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model.layers.1.mlp.experts.(0.gate_proj.weight|gate_up_proj) and "
                                              r"model.layers.1.mlp.experts.(gate_up_proj|0.gate_proj.weight) both "
                                              r"map to the parameter layers.1.mlp.experts.0.gate_proj.weight"):
        load_hf(both)


def test_deepseek_v3_preset_counts_equal_transformers_on_meta():
    """transformers' DeepSeek-V3 (its default config is the released one) counted one decoder layer
    of each kind at a time: the whole model on meta is ~47,000 expert modules, most of a minute.
    Its layers are built from the config and the layer's index alone (dense below
    first_k_dense_replace), so a 4-layer model (3 dense, 1 MoE) gives each kind's count, and the
    full count is what lies outside the layers plus each layer's kind's count."""
    config = PRESETS["deepseek-v3"]
    counts = count_parameters(config)
    assert counts["total"] == 671_026_404_352 and counts["active"] == 37_552_282_624   # the published 671B, 37B
    released = transformers.DeepseekV3Config()
    assert (released.num_hidden_layers, released.first_k_dense_replace) == (61, 3)
    with torch.device("meta"):
        reference = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(num_hidden_layers=4))
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in reference.model.layers]
    assert per_layer[0] == per_layer[1] == per_layer[2] != per_layer[3]
    outside = sum(p.numel() for p in reference.parameters()) - sum(per_layer)
    assert sum(p.numel() for p in reference.parameters()) == count_parameters(config.replace(n_layers=4))["total"]
    assert outside + 3 * per_layer[0] + 58 * per_layer[3] == counts["total"]


def test_mistral_preset_counts_equal_transformers_on_meta():
    config = PRESETS["mistral-7b"]
    with torch.device("meta"):
        reference = transformers.MistralForCausalLM(transformers.MistralConfig(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, sliding_window=4096))
    assert count_parameters(config)["total"] == sum(p.numel() for p in reference.parameters()) == 7_241_732_096


def test_qwen3_moe_with_norm_topk_prob_matches_transformers(tmp_path):
    config = transformers.Qwen3MoeConfig(vocab_size=101, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
                                         max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(4)
    hf = transformers.Qwen3MoeForCausalLM(config).eval()
    realistic_weights_(hf, std=0.2)
    hf.save_pretrained(tmp_path)
    ours = load_hf(tmp_path)
    assert isinstance(ours.layers[0].mlp, MoE) and ours.layers[0].mlp.normalize_topk
    assert ours.config.moe_d_ff == 32 and ours.config.qk_norm
    ids = torch.randint(0, 101, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf(ids).logits
        torch.testing.assert_close(ours(ids), expected, rtol=0, atol=1e-5)
        cache = KVCache(ours.config, 2, 9)
        steps = [ours(ids[:, :4], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-5)
    # the flag matters: without renormalising the weights the logits differ
    unnormalised = Llama(ours.config.replace(moe_norm_topk=False))
    unnormalised.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (unnormalised(ids) - expected).abs().max() > 1e-2
    assert count_parameters(ours.config)["total"] == sum(p.numel() for p in hf.parameters())


def test_config_checks_moe_fields():
    base = dict(vocab_size=10, d_model=16, n_layers=2, n_heads=2, n_experts=8, n_experts_per_token=2)
    with pytest.raises(ValueError, match="n_group"):
        LlamaConfig(**base, n_group=3)
    with pytest.raises(ValueError, match="moe_router"):
        LlamaConfig(**base, moe_router="relu")
    with pytest.raises(ValueError, match="first_k_dense_replace"):
        LlamaConfig(**base, first_k_dense_replace=-1)


def test_routing_keeps_float64_and_runs_on_the_inputs_device(device):
    logits = torch.randn(5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    bias = torch.zeros(8, device=device)
    weights, experts = route_topk(logits, 2, score="sigmoid", bias=bias, n_group=4, topk_group=2)
    assert weights.dtype == torch.float64 and weights.device.type == device.type == experts.device.type
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, dtype=torch.float64, device=device))


# ---------------------------------------------------------------- legal degenerate MoE checkpoints
def _save_and_compare(hf, tmp_path, expected_model=None):
    """Save ``hf``, load it with the course and compare logits (prefill and cached decode) with
    ``expected_model`` (default: ``hf`` itself) at the parity tolerance."""
    hf.save_pretrained(tmp_path)
    ours = load_hf(tmp_path)
    ids = torch.randint(1, 101, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = (expected_model or hf)(ids).logits
        torch.testing.assert_close(ours(ids), expected, rtol=0, atol=1e-5)
        cache = KVCache(ours.config, 2, 9)
        steps = [ours(ids[:, :4], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-5)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters()) \
        == count_parameters(ours.config)["total"]
    return ours


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_one_routed_expert_loads_and_matches_transformers(family, tmp_path):
    """transformers builds a router over a single expert (its softmax weight is 1); the course keeps
    the MoE layer (config.single_expert_moe) instead of refusing the router and the expert."""
    sizes = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
    if family == "mixtral":
        hf = transformers.MixtralForCausalLM(transformers.MixtralConfig(**sizes, num_local_experts=1,
                                                                       num_experts_per_tok=1))
    else:
        hf = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
            **sizes, head_dim=16, moe_intermediate_size=32, num_experts=1, num_experts_per_tok=1))
    torch.manual_seed(6)
    realistic_weights_(hf.eval(), std=0.2)
    ours = _save_and_compare(hf, tmp_path)
    assert ours.config.single_expert_moe and isinstance(ours.layers[1].mlp, MoE)
    assert ours.layers[1].mlp.gate.weight.shape == (1, 64)


@pytest.mark.parametrize("normalize", [True, False])
def test_deepseek_v3_with_one_routed_expert_matches_transformers_with_an_unused_second(normalize, tmp_path):
    """One routed expert per MoE layer. transformers' own forward cannot run it (its group score takes
    topk(2) inside groups of one expert), so the oracle is transformers with two experts whose second
    is never chosen (balancing bias -1e9, top-1): the same weights, routing and scaling. The checkpoint
    loaded is transformers' one-expert model holding expert 0 of the two."""
    two = transformers.DeepseekV3ForCausalLM(_hf_v3_config(n_routed_experts=2, n_group=1, topk_group=1,
                                                           num_experts_per_tok=1, norm_topk_prob=normalize)).eval()
    one = transformers.DeepseekV3ForCausalLM(_hf_v3_config(n_routed_experts=1, n_group=1, topk_group=1,
                                                           num_experts_per_tok=1, norm_topk_prob=normalize)).eval()
    torch.manual_seed(7)
    realistic_weights_(two, std=0.2)
    with torch.no_grad():
        for name, b in two.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.tensor([0.3, -1e9]))                     # expert 1 is never chosen
        state = {k: v[:1] if k.endswith(("mlp.gate.weight", "e_score_correction_bias")) else v
                 for k, v in two.state_dict().items() if ".experts.1." not in k}
        state = {k: v[:1] if v.dim() == 3 and ".mlp.experts." in k else v for k, v in state.items()}  # fused (E, ., .)
        one.load_state_dict(state)
    ours = _save_and_compare(one, tmp_path, expected_model=two)
    assert ours.config.single_expert_moe and isinstance(ours.layers[2].mlp, DeepSeekMoE)


def test_deepseek_v3_with_zero_shared_experts_matches_transformers(tmp_path):
    """n_shared_experts = 0: transformers still builds shared_experts, of width 0 (empty matrices that
    add zero); the course builds none and skips the empty tensors."""
    torch.manual_seed(8)
    hf = transformers.DeepseekV3ForCausalLM(_hf_v3_config(n_shared_experts=0)).eval()
    realistic_weights_(hf, std=0.2)
    assert hf.model.layers[1].mlp.shared_experts.gate_proj.weight.shape == (0, 64)
    ours = _save_and_compare(hf, tmp_path)
    assert ours.layers[1].mlp.shared_experts is None


def test_single_expert_moe_is_for_one_expert():
    assert not LlamaConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2).is_moe
    assert LlamaConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, single_expert_moe=True).is_moe
    with pytest.raises(ValueError, match="single_expert_moe is for n_experts == 1"):
        LlamaConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_experts=2, single_expert_moe=True)


@pytest.mark.parametrize("rope", [{"rope_type": "linear", "factor": 4.0, "mscale_all_dim": 1.0},
                                  {"rope_type": "dynamic", "factor": 2.0, "mscale_all_dim": 0.707,
                                   "original_max_position_embeddings": 32}])
def test_deepseek_v3_mscale_all_dim_outside_yarn_rescales_attention_as_transformers(rope, tmp_path):
    """transformers' DeepseekV3Attention multiplies its softmax scale by mscale^2, mscale = 0.1 *
    mscale_all_dim * ln(factor) + 1, whenever rope_type is not "default" (not only for YaRN)."""
    torch.manual_seed(9)
    hf = transformers.DeepseekV3ForCausalLM(_hf_v3_config(rope_parameters={**rope, "rope_theta": 10000.0})).eval()
    realistic_weights_(hf, std=0.2)
    expected_scale = (16 + 8) ** -0.5 * (0.1 * rope["mscale_all_dim"] * math.log(rope["factor"]) + 1) ** 2
    assert hf.model.layers[0].self_attn.scaling == pytest.approx(expected_scale)
    ours = _save_and_compare(hf, tmp_path)
    assert ours.layers[0].self_attn.scale == pytest.approx(expected_scale)


def test_transformers_bf16_deepseek_save_with_its_float32_router_loads_exactly(deepseek_v3, tmp_path):
    """transformers keeps DeepSeek-V3's router (gate.weight, e_score_correction_bias) in float32 in a
    bfloat16 model (_keep_in_fp32_modules_strict) and saves it so: the course loads that file as it
    is (it was refused as "mixes dtypes"), and dtype=bfloat16 does not round the router either."""
    from safetensors.torch import load_file

    bf16 = transformers.DeepseekV3ForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert bf16.model.layers[1].mlp.gate.weight.dtype == torch.float32
    bf16.save_pretrained(tmp_path / "bf16")
    ids = torch.randint(1, 101, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = bf16(ids).logits.float()
    for dtype in (None, torch.bfloat16):
        ours = load_hf(tmp_path / "bf16", dtype=dtype)
        theirs = load_file(str(tmp_path / "bf16" / "model.safetensors"))       # transformers' file
        for name, p in ours.named_parameters():
            reference = theirs["model." + name if "model." + name in theirs else name]
            assert p.dtype == reference.dtype and torch.equal(p, reference), name   # router float32, rest bf16
        with torch.no_grad():
            logits = ours(ids).float()
        # both compute in bfloat16 (8 mantissa bits), the routers in float32
        torch.testing.assert_close(logits, expected, rtol=0, atol=0.05 * expected.abs().max().item())


# ------------------------------------------------- one router and one dispatch for Mixtral and DeepSeek
@pytest.mark.parametrize("normalize", [True, False])
def test_route_topk_with_deepseeks_arguments_is_transformers_router(normalize):
    # Chapter 10's router, given DeepSeek-V3's arguments, is DeepseekV3TopkRouter (the oracle):
    # sigmoid scores, a bias that chooses, group-limited top-k, the routed scaling factor.
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    for n_experts, n_group, topk_group, top_k, seed in [(16, 4, 2, 4, 0), (8, 4, 3, 2, 1), (12, 3, 1, 3, 2)]:
        config = transformers.DeepseekV3Config(hidden_size=24, n_routed_experts=n_experts, n_group=n_group,
                                               topk_group=topk_group, num_experts_per_tok=top_k,
                                               norm_topk_prob=normalize, routed_scaling_factor=2.5)
        router = DeepseekV3TopkRouter(config)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            router.weight.copy_(torch.randn(n_experts, 24, generator=g))
            router.e_score_correction_bias.copy_(0.3 * torch.randn(n_experts, generator=g))
        x = torch.randn(64, 24, generator=g)
        with torch.no_grad():
            logits, expected_w, expected_e = router(x)
        weights, experts = route_topk(logits, top_k, normalize, "sigmoid", router.e_score_correction_bias,
                                      n_group, topk_group, 2.5)
        order, expected_order = experts.argsort(-1), expected_e.argsort(-1)
        assert torch.equal(experts.gather(-1, order), expected_e.gather(-1, expected_order))
        torch.testing.assert_close(weights.gather(-1, order), expected_w.gather(-1, expected_order))


def test_deepseek_moe_is_chapter_10s_moe_with_its_dispatch():
    # one dispatch: DeepSeekMoE inherits MoE.forward's (sort, bincount, index_add_) and has none of
    # its own, so Chapter 10's capacity factor works for it too; the shared expert is added outside.
    import inspect

    import llama_course.deepseek_moe as deepseek_moe

    assert "index_add_" not in inspect.getsource(deepseek_moe)
    config = LlamaConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_experts=8, n_experts_per_token=2,
                         moe_d_ff=8, n_shared_experts=1, n_group=4, topk_group=2, moe_router="sigmoid",
                         routed_scaling_factor=2.5, ffn="deepseek_moe")
    torch.manual_seed(0)
    moe = DeepSeekMoE(config)
    assert isinstance(moe, MoE)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        y = moe(x)
        weights, experts = route_topk(
            moe.gate(x.reshape(10, 16)), 2, True, "sigmoid", moe.gate.e_score_correction_bias, 4, 2, 2.5)
        expected = moe.shared_experts(x).reshape(10, 16)
        for n in range(10):                                  # a token-by-token oracle
            for w, e in zip(weights[n], experts[n]):
                expected[n] += w * moe.experts[int(e)](x.reshape(10, 16)[n])
    torch.testing.assert_close(y.reshape(10, 16), expected, atol=1e-6, rtol=1e-5)
    assert torch.equal(moe.chosen, experts)
    moe.capacity_factor = 0.5                                # capacity ceil(0.5 * 10 * 2 / 8) = 2
    with torch.no_grad():
        moe(x)
    assert moe.dropped == sum(max(0, c - 2) for c in torch.bincount(experts.flatten(), minlength=8).tolist())


def test_route_topk_names_its_bad_deepseek_arguments():
    logits = torch.randn(3, 8)
    with pytest.raises(ValueError, match="score"):
        route_topk(logits, 2, score="relu")
    with pytest.raises(ValueError, match="n_group"):
        route_topk(logits, 2, n_group=3)                        # 8 experts do not split in 3
    with pytest.raises(ValueError, match="topk_group"):
        route_topk(logits, 2, n_group=4, topk_group=5)
    with pytest.raises(ValueError, match="top_k"):
        route_topk(logits, 5, n_group=4, topk_group=2)          # only 4 experts allowed
    with pytest.raises(ValueError, match="bias"):
        route_topk(logits, 2, bias=torch.zeros(7))
    with pytest.raises(TypeError, match="bias"):
        route_topk(logits, 2, bias=torch.zeros(8, dtype=torch.long))
