"""rope.py beyond the graded tests: scaling against transformers, the cached module, attention
with RoPE against transformers' LlamaAttention, bad input."""

import pytest
import torch

from llama_course import LlamaConfig
from llama_course.model import Attention, Llama
from llama_course.rope import (
    RotaryEmbedding,
    apply_rope,
    half_to_interleaved,
    interleaved_to_half,
    rope_cos_sin,
    rope_inv_freq,
)

rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
from transformers import LlamaConfig as HFConfig  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("scaling, seq_len", [
    ({"rope_type": "linear", "factor": 4.0}, None),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096}, 10000),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096}, 1000),
    (LLAMA3, None),
])
def test_scaling_matches_transformers(scaling, seq_len):
    hf_scaling = {k: v for k, v in scaling.items() if not (scaling["rope_type"] == "dynamic" and k.startswith("orig"))}
    max_pos = scaling.get("original_max_position_embeddings", 4096) if scaling["rope_type"] == "dynamic" else 131072
    hf_config = HFConfig(hidden_size=512, num_attention_heads=4, rope_theta=500000.0,
                         max_position_embeddings=max_pos, rope_scaling=hf_scaling)
    expected, _ = rope_utils.ROPE_INIT_FUNCTIONS[scaling["rope_type"]](hf_config, "cpu", seq_len)
    ours = rope_inv_freq(128, 500000.0, scaling, seq_len=seq_len)
    torch.testing.assert_close(ours, expected, rtol=1e-6, atol=0)


def test_static_ntk_stretches_the_base():
    d, s = 128, 4.0
    torch.testing.assert_close(rope_inv_freq(d, 10000.0, {"rope_type": "ntk", "factor": s}),
                               rope_inv_freq(d, 10000.0 * s ** (d / (d - 2))))
    slow = rope_inv_freq(d, 10000.0, {"rope_type": "ntk", "factor": s})[-1] / rope_inv_freq(d)[-1]
    assert slow.item() == pytest.approx(1 / s, rel=1e-4)  # the slowest pair is interpolated by s
    fast = rope_inv_freq(d, 10000.0, {"rope_type": "ntk", "factor": s})[0]
    assert fast.item() == 1.0                              # the fastest is untouched


def test_llama3_scaling_keeps_fast_and_divides_slow():
    plain, scaled = rope_inv_freq(128, 500000.0), rope_inv_freq(128, 500000.0, LLAMA3)
    assert torch.equal(scaled[:10], plain[:10])
    torch.testing.assert_close(scaled[-5:], plain[-5:] / 8)


def interleaved_rope_float64(x, positions, base=10000.0):
    """The definition, on the CPU in float64: pair (x_2i, x_2i+1) turned by position * base^(-2i/d)."""
    x, positions = x.cpu().double(), positions.cpu().double()
    d = x.shape[-1]
    angles = positions[..., None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if positions.dim() == 2 and x.dim() == 4:
        angles = angles[:, None]                                   # (batch, 1, seq, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).flatten(-2)


def test_rotary_module_matches_apply_rope_and_rotates_only_q_and_k(device):
    rope = RotaryEmbedding(16, max_seq_len=64, device=device)
    q, k = torch.randn(2, 3, 5, 16, device=device), torch.randn(2, 3, 5, 16, device=device)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], device=device)
    rq, rk = rope(q, k, positions)
    torch.testing.assert_close(rq, apply_rope(q, positions))
    torch.testing.assert_close(rk, apply_rope(k, positions))
    # both share the rotation code: the independent oracle is the definition in float64
    torch.testing.assert_close(rq.cpu().double(), interleaved_rope_float64(q, positions), rtol=0, atol=1e-5)
    torch.testing.assert_close(rk.cpu().double(), interleaved_rope_float64(k, positions), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="max_seq_len"):
        rope(q, k, torch.tensor([60, 61, 62, 63, 64], device=device))


def test_attention_with_rope_matches_transformers(device):
    """The Attention module + RoPE (half layout) against transformers' LlamaAttention + rotary embedding."""
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = LlamaConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, rope_theta=500000.0)
    hf_config = HFConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                         max_position_embeddings=128, attn_implementation="eager")
    torch.manual_seed(0)
    ours = Attention(config, position_hook=RotaryEmbedding(16, 128, 500000.0, layout="half", device=device),
                     device=device)
    for p in ours.parameters():
        torch.nn.init.normal_(p, std=0.2)
    reference = modeling_llama.LlamaAttention(hf_config, layer_idx=0).to(device)
    reference.load_state_dict(ours.state_dict())
    rotary = modeling_llama.LlamaRotaryEmbedding(hf_config).to(device)
    x = torch.randn(2, 7, 64, device=device)
    positions = torch.arange(3, 10, device=device)[None].expand(2, 7)
    additive = torch.full((7, 7), float("-inf"), device=device).triu(1)  # built here, not with causal_mask
    with torch.no_grad():
        expected, _ = reference(x, position_embeddings=rotary(x, positions), attention_mask=additive[None, None])
        torch.testing.assert_close(ours(x, positions=positions), expected, rtol=1e-5, atol=1e-5)


def test_interleaved_model_equals_half_model_after_permutation(device):
    config = LlamaConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=4)
    torch.manual_seed(1)
    meta_style = Attention(config, position_hook=RotaryEmbedding(16, 32, layout="interleaved"), device=device)
    for p in meta_style.parameters():
        torch.nn.init.normal_(p, std=0.2)
    hf_style = Attention(config, position_hook=RotaryEmbedding(16, 32, layout="half"), device=device)
    state = meta_style.state_dict()
    for name in ("q_proj.weight", "k_proj.weight"):
        state[name] = interleaved_to_half(state[name], 4)
    hf_style.load_state_dict(state)
    x = torch.randn(1, 9, 64, device=device)
    with torch.no_grad():
        torch.testing.assert_close(hf_style(x), meta_style(x), rtol=1e-5, atol=1e-5)
    w = torch.randn(64, 8)
    assert torch.equal(half_to_interleaved(interleaved_to_half(w, 4), 4), w)


def test_scores_depend_only_on_relative_position(device):
    g = torch.Generator().manual_seed(4)
    q, k = (torch.randn(2, 1, 1, 6, 32, generator=g) * 0.5).to(device)
    positions = torch.arange(6, device=device)
    scores = apply_rope(q, positions) @ apply_rope(k, positions).transpose(-2, -1)
    shifted = apply_rope(q, positions + 1000) @ apply_rope(k, positions + 1000).transpose(-2, -1)
    # float32 angles near position 1000 carry about 1000 * 2^-24 = 6e-5 rad of rounding; the
    # scores (|q| |k| about 8) move by a few 1e-5 (under 8e-5 over 200 seeds); a wrong rotation by O(1)
    torch.testing.assert_close(shifted, scores, rtol=0, atol=2e-4)


def test_angles_are_float32_for_bf16(device):
    cos, sin = rope_cos_sin(torch.arange(4, device=device), 8)
    assert cos.dtype == sin.dtype == torch.float32
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    assert apply_rope(x, torch.arange(4, device=device)).dtype == torch.bfloat16


def test_bad_input():
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="head_dim"):
        apply_rope(torch.randn(3, 7), torch.arange(3))
    with pytest.raises(TypeError, match="positions"):
        apply_rope(x, torch.arange(3.0))
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, torch.arange(4))
    with pytest.raises(ValueError, match="base"):
        apply_rope(x, torch.arange(3), base=-1.0)
    with pytest.raises(ValueError, match="layout"):
        apply_rope(x, torch.arange(3), layout="rotate")
    with pytest.raises(ValueError, match="rope_type"):
        rope_inv_freq(8, scaling={"rope_type": "yarn2"})
    for rope_type in ("linear", "dynamic", "llama3"):          # transformers refuses these without a factor too
        with pytest.raises(ValueError, match=f"rope_type '{rope_type}' needs factor"):
            rope_inv_freq(8, scaling={"rope_type": rope_type, "original_max_position_embeddings": 64,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0})
    with pytest.raises(ValueError, match="n_heads"):
        interleaved_to_half(torch.randn(12, 4), 5)


def test_angles_are_rows_of_the_tables_and_the_model_looks_them_up_once():
    rope = RotaryEmbedding(8, 64)
    positions = torch.tensor([[3, 4, 5, 6], [0, 1, 2, 3]])
    cos, sin = rope.angles(positions)
    expected_cos, expected_sin = rope_cos_sin(positions, 8)       # computed from the definition, no table
    assert torch.equal(cos, expected_cos) and torch.equal(sin, expected_sin)
    q, k = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8)
    by_positions, by_angles = rope(q, k, positions), rope(q, k, (cos, sin))
    assert all(torch.equal(a, b) for a, b in zip(by_positions, by_angles))
    with pytest.raises(ValueError, match="max_seq_len"):       # called with positions: their values are read
        rope(q, k, positions + 61)
    with pytest.raises(IndexError):                            # the lookup alone reads no values
        rope.angles(positions + 61)
    # Llama.forward looks the angles up once and hands the same (cos, sin) pair to every layer
    model = Llama(LlamaConfig(vocab_size=20, d_model=16, n_layers=3, n_heads=2, max_seq_len=32))
    seen = []
    for layer in model.layers:
        layer.self_attn.register_forward_pre_hook(lambda module, args: seen.append(args[2]))
    model(torch.tensor([[1, 2, 3]]))
    assert len(seen) == 3 and all(isinstance(p, tuple) and p[0] is seen[0][0] for p in seen)


def test_non_finite_parameters_zero_lengths_and_huge_positions_are_rejected():
    with pytest.raises(ValueError, match="base must be a finite number > 0"):
        rope_inv_freq(8, base=float("inf"))
    with pytest.raises(ValueError, match=r"scaling\['factor'\] must be a finite number >= 1"):
        rope_inv_freq(8, scaling={"rope_type": "linear", "factor": float("inf")})
    for key in ("original_max_position_embeddings",):
        with pytest.raises(ValueError, match=key):
            rope_inv_freq(8, scaling={"rope_type": "dynamic", "factor": 2.0, key: 0})
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    with pytest.raises(ValueError, match="low_freq_factor"):
        rope_inv_freq(8, scaling=llama3)
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        rope_inv_freq(8, scaling={**llama3, "low_freq_factor": 1.0, "original_max_position_embeddings": 0})
    x = torch.randn(1, 8)
    with pytest.raises(ValueError, match="2\\^24"):                 # 2^24 + 1 is 2^24 in float32
        apply_rope(x, torch.tensor([2**24 + 1]))
    with pytest.raises(ValueError, match="positions must be"):
        apply_rope(x, torch.tensor(0))                               # 0-d positions
    with pytest.raises(ValueError, match="head_dim"):
        apply_rope(torch.randn(1, 0), torch.tensor([0]))


def test_rope_rejects_non_float_x_and_mixed_devices():
    for bad in (torch.ones(3, 8, dtype=torch.long), torch.ones(3, 8, dtype=torch.bool),
                torch.ones(3, 8, dtype=torch.cfloat)):
        with pytest.raises(TypeError, match="x must be a floating-point tensor"):
            apply_rope(bad, torch.arange(3))
    with pytest.raises(ValueError, match="one device"):
        apply_rope(torch.randn(3, 8), torch.arange(3, device="meta"))
