"""Hidden tests for Chapter 5 (instructor edition and Gradescope only).

Oracles: Meta's complex-number formulation (torch.polar) and Hugging Face's rotate-half formula,
written here from their definitions (Exercises 5.2 and 5.4); transformers' GPT-NeoX and GPT-J
rotary code (Homework 5.A); the complex formulation per axis and the 2-D relative-position
invariant (Homework 5.B).
"""

import pytest
import torch
from graded._checks import assert_close

PACKAGE_MODULES = ["llama_course.rope"]

INTER = "Exercise 5.2 apply_rope (interleaved)"
PERM = "Exercise 5.4 interleaved_to_half"
PARTIAL = "Homework 5.A apply_partial_rope"
ROPE2D = "Homework 5.B apply_rope_2d"


def randn(*shape, seed=0, device="cpu", std=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * std).to(device)


def complex_rope(x, positions, base=10000.0):
    """Meta's formulation: pairs as complex numbers, multiplied by e^(i m w_k)."""
    d = x.shape[-1]
    inv_freq = torch.tensor([base ** (-2 * k / d) for k in range(d // 2)], dtype=torch.float64)
    angles = positions.double()[..., None].cpu() * inv_freq
    rot = torch.polar(torch.ones_like(angles), angles)                  # e^(i m w_k)
    pairs = torch.view_as_complex(x.double().cpu().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rot).reshape(x.shape).to(x.dtype).to(x.device)


def _half_rope(x, positions, base=10000.0):
    """Hugging Face's rotate-half formulation, written out here from its definition."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double().cpu()[:, None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.device, x.dtype), emb.sin().to(x.device, x.dtype)
    rotate_half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + rotate_half * sin


@pytest.mark.graded(INTER, weight=2)
def test_interleaved_matches_complex_formulation(impl, device):
    x = randn(2, 4, 9, 16, seed=1, device=device, std=0.5)
    positions = torch.tensor([0, 1, 2, 3, 5, 8, 13, 100, 4095], device=device)
    # float32 angles near position 4100 carry about 4100 * 2^-24 = 2.4e-4 rad of rounding (the
    # oracle is float64), hence atol 2e-4 here; a wrong pairing is off by O(0.1)
    assert_close(impl.apply_rope(x, positions, layout="interleaved"), complex_rope(x, positions),
                 "interleaved RoPE vs the complex-number formulation", rtol=0, atol=2e-4)
    batch_positions = torch.stack([positions, positions + 7])                 # (batch, seq)
    out = impl.apply_rope(x, batch_positions, base=500000.0, layout="interleaved")
    assert_close(out[1], complex_rope(x[1], positions + 7, 500000.0),
                 "interleaved RoPE with (batch, seq) positions, row 1, base 5e5", rtol=0, atol=2e-4)
    assert_close(out[0], complex_rope(x[0], positions, 500000.0),
                 "interleaved RoPE with (batch, seq) positions, row 0, base 5e5", rtol=0, atol=2e-4)


@pytest.mark.graded(PERM, weight=2)
def test_permutation_gives_identical_attention_scores(impl, device):
    n_heads, head_dim, d = 4, 16, 64
    w_q = randn(n_heads * head_dim, d, seed=6, device=device, std=0.2)
    w_k = randn(n_heads * head_dim, d, seed=7, device=device, std=0.2)
    x = randn(1, 10, d, seed=8, device=device)
    positions = torch.arange(10, device=device)

    def scores(wq, wk, layout):
        rope = complex_rope if layout == "interleaved" else _half_rope
        q = rope((x @ wq.T).view(1, 10, n_heads, head_dim).transpose(1, 2), positions)
        k = rope((x @ wk.T).view(1, 10, n_heads, head_dim).transpose(1, 2), positions)
        return q @ k.transpose(-2, -1)

    reference = scores(w_q, w_k, "interleaved")
    converted = scores(impl.interleaved_to_half(w_q, n_heads), impl.interleaved_to_half(w_k, n_heads), "half")
    assert_close(converted, reference, "attention scores of the converted weights (half layout) vs the original "
                 "(interleaved layout)", rtol=1e-4, atol=1e-4)


def neox_oracle(x, positions, rotary_dim, base):
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_neox import modeling_gpt_neox as neox
    head_dim = x.shape[-1]
    config = transformers.GPTNeoXConfig(hidden_size=4 * head_dim, num_attention_heads=4, rope_parameters={
        "rope_type": "default", "rope_theta": base, "partial_rotary_factor": rotary_dim / head_dim})
    cos, sin = neox.GPTNeoXRotaryEmbedding(config).to(x.device)(x, positions)
    return neox.apply_rotary_pos_emb(x, x, cos, sin)[0]


@pytest.mark.graded(PARTIAL, weight=2, kind="homework")
@pytest.mark.parametrize("rotary_dim", [8, 16, 32], ids=["quarter", "half", "full"])
def test_partial_rope_matches_gpt_neox(impl, device, rotary_dim):
    x = randn(2, 3, 6, 32, seed=1, device=device, std=0.5)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 30, 31, 32, 100, 511]], device=device)
    expected = neox_oracle(x, positions, rotary_dim, 10000.0)
    got = impl.apply_partial_rope(x, positions, rotary_dim)
    assert got.shape == x.shape and got.device.type == device.type, \
        f"shape {tuple(got.shape)} on {got.device}, expected {tuple(x.shape)} on {device}"
    assert_close(got, expected, f"apply_partial_rope(rotary_dim={rotary_dim}, half) vs GPT-NeoX", rtol=1e-5, atol=1e-5)
    if rotary_dim < 32:
        assert_close(got[..., rotary_dim:], x[..., rotary_dim:], "features after rotary_dim must pass unchanged",
                     rtol=0, atol=0)
    base = neox_oracle(x, positions[:1].expand(2, 6), rotary_dim, 500.0)
    assert_close(impl.apply_partial_rope(x, positions[0], rotary_dim, base=500.0), base,
                 "(seq,) positions and base 500 vs GPT-NeoX (speeds base^(-2k/rotary_dim))", rtol=1e-5, atol=1e-5)


@pytest.mark.graded(PARTIAL, weight=2, kind="homework")
def test_partial_rope_matches_gpt_j(impl):
    gptj = pytest.importorskip("transformers.models.gptj.modeling_gptj")
    x = randn(2, 4, 7, 24, seed=2, std=0.5)                                 # (B, H, T, d)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [9, 10, 11, 12, 13, 14, 15]])
    sincos = gptj.create_sinusoidal_positions(64, 16)[positions]             # (B, T, 16): sin | cos
    sin, cos = sincos[..., :8], sincos[..., 8:]
    t = x.transpose(1, 2)                                                    # GPT-J's (B, T, H, d)
    rot = gptj.apply_rotary_pos_emb(t[..., :16], sin, cos)
    expected = torch.cat([rot, t[..., 16:]], dim=-1).transpose(1, 2)
    assert_close(impl.apply_partial_rope(x, positions, 16, layout="interleaved"), expected,
                 "apply_partial_rope(rotary_dim=16, interleaved) vs GPT-J", rtol=1e-5, atol=1e-5)


@pytest.mark.graded(PARTIAL, weight=1, kind="homework")
def test_partial_rope_dtype_and_errors(impl):
    x = randn(1, 2, 5, 16, seed=3, std=0.5).to(torch.bfloat16)
    out = impl.apply_partial_rope(x, torch.arange(5), 8)
    assert out.dtype == torch.bfloat16, f"bf16 input must give bf16 output, got {out.dtype}"
    assert_close(out.float(), neox_oracle(x.float(), torch.arange(5)[None], 8, 10000.0),
                 "bf16 partial RoPE vs GPT-NeoX in float32", rtol=2e-2, atol=2e-2)
    for bad in (0, 3, 18, -2):
        with pytest.raises(ValueError, match="rotary_dim"):
            impl.apply_partial_rope(x, torch.arange(5), bad)
    with pytest.raises(ValueError, match="layout"):
        impl.apply_partial_rope(x, torch.arange(5), 8, layout="neox")


@pytest.mark.graded(ROPE2D, weight=4, kind="homework")
def test_rope_2d_is_two_complex_ropes(impl, device):
    x = randn(2, 3, 12, 32, seed=4, device=device, std=0.5)
    rows = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 9, 40], device=device)
    cols = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 7, 3, 40], device=device)
    got = impl.apply_rope_2d(x, rows, cols, base=100.0)
    assert got.shape == x.shape and got.device.type == device.type, "apply_rope_2d must keep x's shape and device"
    assert_close(got[..., :16], complex_rope(x[..., :16], rows, 100.0), "first half (rows) vs the complex formulation",
                 rtol=0, atol=1e-5)
    assert_close(got[..., 16:], complex_rope(x[..., 16:], cols, 100.0),
                 "second half (columns) vs the complex formulation", rtol=0, atol=1e-5)


@pytest.mark.graded(ROPE2D, weight=3, kind="homework")
def test_rope_2d_scores_depend_on_offsets_only(impl):
    q, k = randn(1, 16, seed=5, std=0.5), randn(1, 16, seed=6, std=0.5)

    def score(r1, c1, r2, c2):
        a = impl.apply_rope_2d(q, torch.tensor([r1]), torch.tensor([c1]), base=50.0)
        b = impl.apply_rope_2d(k, torch.tensor([r2]), torch.tensor([c2]), base=50.0)
        return (a * b).sum()

    for (r1, c1), (dr, dc) in (((0, 0), (2, 3)), ((5, 1), (2, 3)), ((9, 9), (-4, 1)), ((20, 3), (-4, 1))):
        assert_close(score(r1, c1, r1 + dr, c1 + dc), score(0, 0, dr, dc),
                     f"the score from ({r1}, {c1}) to ({r1 + dr}, {c1 + dc}) must equal that from (0, 0) to "
                     f"({dr}, {dc})", rtol=1e-4, atol=1e-5)
    assert not torch.allclose(score(0, 0, 2, 3), score(0, 0, 3, 2), atol=1e-3), \
        "swapping the row and column offsets must change the score (rows and columns are separate axes)"
    x = randn(1, 5, 8, seed=7)
    assert impl.apply_rope_2d(x.to(torch.bfloat16), torch.arange(5), torch.arange(5)).dtype == torch.bfloat16, \
        "apply_rope_2d must return x's dtype"
    with pytest.raises(ValueError, match="head_dim"):
        impl.apply_rope_2d(randn(1, 5, 6), torch.arange(5), torch.arange(5))
    with pytest.raises(ValueError, match="cols"):
        impl.apply_rope_2d(x, torch.arange(5), torch.arange(4))
