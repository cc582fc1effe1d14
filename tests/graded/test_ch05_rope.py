"""Graded tests for Chapter 5 (exercises/ch05_rope.py).

Oracles: the worked example of the chapter (head_dim 8, base 10000, q at position 1), an
independent complex-number formulation (torch.polar, as in Meta's reference code), transformers'
apply_rotary_pos_emb and rotary embedding, and the invariants: norms preserved, and
<R_m q, R_n k> = <q, R_(n-m) k>. Random weights have std >= 0.2 so a wrong layout cannot pass.
"""

import pytest
import torch

PACKAGE_MODULES = ["llama_course.rope"]

FREQ = "Exercise 5.1 rope_inv_freq"
INTER = "Exercise 5.2 apply_rope"
HALF = "Exercise 5.3 apply_rope"
PERM = "Exercise 5.4 interleaved_to_half"

Q = [0.5, 0.3, -0.2, 0.4, 0.1, -0.3, 0.6, 0.2]


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


@pytest.mark.graded(FREQ, points=1)
def test_inv_freq_worked_example(impl):
    torch.testing.assert_close(impl.rope_inv_freq(8), torch.tensor([1.0, 0.1, 0.01, 0.001]))


@pytest.mark.graded(FREQ, points=1)
def test_inv_freq_matches_transformers(impl):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig
    for base, head_dim in ((10000.0, 128), (500000.0, 64)):
        hf_config = HFConfig(hidden_size=4 * head_dim, num_attention_heads=4, rope_theta=base)
        expected, _ = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config=hf_config)
        torch.testing.assert_close(impl.rope_inv_freq(head_dim, base), expected, rtol=1e-6, atol=0)


@pytest.mark.graded(INTER, points=2)
def test_interleaved_worked_example(impl):
    out = impl.apply_rope(torch.tensor([Q]), torch.tensor([1]), layout="interleaved")
    expected = [0.018, 0.583, -0.239, 0.378, 0.103, -0.299, 0.600, 0.201]  # the chapter's table
    assert [round(v, 3) for v in out[0].tolist()] == expected
    at_zero = impl.apply_rope(torch.tensor([Q]), torch.tensor([0]), layout="interleaved")
    assert torch.equal(at_zero, torch.tensor([Q]))  # position 0 is not rotated


@pytest.mark.graded(INTER, points=2)
def test_interleaved_matches_complex_formulation(impl, device):
    x = randn(2, 4, 9, 16, seed=1, device=device, std=0.5)
    positions = torch.tensor([0, 1, 2, 3, 5, 8, 13, 100, 4095], device=device)
    # float32 angles near position 4100 carry about 4100 * 2^-24 = 2.4e-4 rad of rounding (the
    # oracle is float64), hence atol 2e-4 here; a wrong pairing is off by O(0.1)
    torch.testing.assert_close(impl.apply_rope(x, positions, layout="interleaved"), complex_rope(x, positions),
                               rtol=0, atol=2e-4)
    batch_positions = torch.stack([positions, positions + 7])                 # (batch, seq)
    out = impl.apply_rope(x, batch_positions, base=500000.0, layout="interleaved")
    torch.testing.assert_close(out[1], complex_rope(x[1], positions + 7, 500000.0), rtol=0, atol=2e-4)
    torch.testing.assert_close(out[0], complex_rope(x[0], positions, 500000.0), rtol=0, atol=2e-4)


@pytest.mark.graded(INTER, points=2)
def test_norm_and_relative_position(impl, device):
    q, k = randn(1, 64, seed=2, device=device, std=0.5), randn(1, 64, seed=3, device=device, std=0.5)
    rot = impl.apply_rope(q, torch.tensor([37], device=device), layout="interleaved")
    torch.testing.assert_close(rot.norm(), q.norm())
    for m, n in ((3, 10), (7, 100), (2000, 2031)):
        qm = impl.apply_rope(q, torch.tensor([m], device=device), layout="interleaved")
        kn = impl.apply_rope(k, torch.tensor([n], device=device), layout="interleaved")
        k_rel = impl.apply_rope(k, torch.tensor([n - m], device=device), layout="interleaved")
        # <R_m q, R_n k> = <q, R_(n-m) k>
        torch.testing.assert_close((qm * kn).sum(), (q * k_rel).sum(), rtol=1e-4, atol=1e-4)


@pytest.mark.graded(HALF, points=2)
def test_half_matches_transformers(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig

    hf_config = HFConfig(hidden_size=128, num_attention_heads=4, rope_theta=10000.0, max_position_embeddings=512)
    rotary = modeling_llama.LlamaRotaryEmbedding(hf_config).to(device)
    q, k = randn(2, 4, 6, 32, seed=4, device=device, std=0.3), randn(2, 4, 6, 32, seed=5, device=device, std=0.3)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]], device=device)
    cos, sin = rotary(q, positions)
    expected_q, expected_k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(impl.apply_rope(q, positions, layout="half"), expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(impl.apply_rope(k, positions, layout="half"), expected_k, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(PERM, points=1)
def test_permutation_small_example(impl):
    w = torch.arange(8, dtype=torch.float32)[:, None].expand(8, 3)  # row i holds the number i
    assert impl.interleaved_to_half(w, n_heads=2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.graded(PERM, points=2)
def test_permutation_gives_identical_attention_scores(impl, device):
    n_heads, head_dim, d = 4, 16, 64
    w_q, w_k = randn(n_heads * head_dim, d, seed=6, device=device, std=0.2), randn(n_heads * head_dim, d, seed=7,
                                                                                       device=device, std=0.2)
    x = randn(1, 10, d, seed=8, device=device)
    positions = torch.arange(10, device=device)

    def scores(wq, wk, layout):
        q = (x @ wq.T).view(1, 10, n_heads, head_dim).transpose(1, 2)
        k = (x @ wk.T).view(1, 10, n_heads, head_dim).transpose(1, 2)
        q, k = complex_rope(q, positions) if layout == "interleaved" else _half_rope(q, positions), \
            complex_rope(k, positions) if layout == "interleaved" else _half_rope(k, positions)
        return q @ k.transpose(-2, -1)

    reference = scores(w_q, w_k, "interleaved")
    converted = scores(impl.interleaved_to_half(w_q, n_heads), impl.interleaved_to_half(w_k, n_heads), "half")
    torch.testing.assert_close(converted, reference, rtol=1e-4, atol=1e-4)
    unconverted = scores(w_q, w_k, "half")  # the classic bug: right weights, wrong layout
    assert not torch.allclose(unconverted, reference, rtol=1e-2, atol=1e-2)


def _half_rope(x, positions, base=10000.0):
    """Hugging Face's rotate-half formulation, written out here from its definition."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double().cpu()[:, None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.device, x.dtype), emb.sin().to(x.device, x.dtype)
    rotate_half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + rotate_half * sin
