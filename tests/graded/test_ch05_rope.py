"""Graded tests for Chapter 5 (exercises/ch05_rope.py).

Oracles: the worked example of the chapter (head_dim 8, base 10000, q at position 1),
transformers' rotary embedding and apply_rotary_pos_emb, and the invariants: norms preserved, and
<R_m q, R_n k> = <q, R_(n-m) k>. Random inputs have std >= 0.2 so a wrong layout cannot pass.
(tests/hidden adds Meta's complex-number formulation.) Homework 5.A and 5.B: public checks only.
"""

import math

import pytest
import torch

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.rope"]

FREQ = "Exercise 5.1 rope_inv_freq"
INTER = "Exercise 5.2 apply_rope (interleaved)"
HALF = "Exercise 5.3 apply_rope (half)"
PERM = "Exercise 5.4 interleaved_to_half"
PARTIAL = "Homework 5.A apply_partial_rope"
ROPE2D = "Homework 5.B apply_rope_2d"

Q = [0.5, 0.3, -0.2, 0.4, 0.1, -0.3, 0.6, 0.2]


def randn(*shape, seed=0, device="cpu", std=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * std).to(device)


@pytest.mark.graded(FREQ, weight=1)
def test_inv_freq_worked_example(impl):
    assert_close(impl.rope_inv_freq(8), torch.tensor([1.0, 0.1, 0.01, 0.001]), "rope_inv_freq(8)")


@pytest.mark.graded(FREQ, weight=1)
def test_inv_freq_matches_transformers(impl):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig
    for base, head_dim in ((10000.0, 128), (500000.0, 64)):
        hf_config = HFConfig(hidden_size=4 * head_dim, num_attention_heads=4, rope_theta=base)
        expected, _ = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config=hf_config)
        assert_close(impl.rope_inv_freq(head_dim, base), expected,
                     f"rope_inv_freq({head_dim}, base={base:g}) vs transformers", rtol=1e-6, atol=0)


@pytest.mark.graded(INTER, weight=2)
def test_interleaved_worked_example(impl):
    out = impl.apply_rope(torch.tensor([Q]), torch.tensor([1]), layout="interleaved")
    expected = [0.018, 0.583, -0.239, 0.378, 0.103, -0.299, 0.600, 0.201]  # the chapter's table
    got = [round(v, 3) for v in out[0].tolist()]
    assert got == expected, f"the chapter's worked example (q at position 1): got {got}, expected {expected}"
    at_zero = impl.apply_rope(torch.tensor([Q]), torch.tensor([0]), layout="interleaved")
    assert_equal(at_zero, torch.tensor([Q]), "position 0 must not be rotated")


@pytest.mark.graded(INTER, weight=2)
def test_norm_and_relative_position(impl, device):
    q, k = randn(1, 64, seed=2, device=device, std=0.5), randn(1, 64, seed=3, device=device, std=0.5)
    rot = impl.apply_rope(q, torch.tensor([37], device=device), layout="interleaved")
    assert_close(rot.norm(), q.norm(), "a rotation must keep the vector's norm")
    for m, n in ((3, 10), (7, 100), (2000, 2031)):
        qm = impl.apply_rope(q, torch.tensor([m], device=device), layout="interleaved")
        kn = impl.apply_rope(k, torch.tensor([n], device=device), layout="interleaved")
        k_rel = impl.apply_rope(k, torch.tensor([n - m], device=device), layout="interleaved")
        assert_close((qm * kn).sum(), (q * k_rel).sum(), f"<R_{m} q, R_{n} k> must equal <q, R_{n - m} k>",
                     rtol=1e-4, atol=1e-4)


@pytest.mark.graded(HALF, weight=2)
def test_half_matches_transformers(impl, device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig

    hf_config = HFConfig(hidden_size=128, num_attention_heads=4, rope_theta=10000.0, max_position_embeddings=512)
    rotary = modeling_llama.LlamaRotaryEmbedding(hf_config).to(device)
    q, k = randn(2, 4, 6, 32, seed=4, device=device, std=0.3), randn(2, 4, 6, 32, seed=5, device=device, std=0.3)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]], device=device)
    cos, sin = rotary(q, positions)
    expected_q, expected_k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    assert_close(impl.apply_rope(q, positions, layout="half"), expected_q,
                 "apply_rope(q, layout='half') vs transformers' apply_rotary_pos_emb")
    assert_close(impl.apply_rope(k, positions, layout="half"), expected_k,
                 "apply_rope(k, layout='half') vs transformers' apply_rotary_pos_emb")


@pytest.mark.graded(PERM, weight=1)
def test_permutation_small_example(impl):
    w = torch.arange(8, dtype=torch.float32)[:, None].expand(8, 3)  # row i holds the number i
    got = impl.interleaved_to_half(w, n_heads=2)[:, 0].tolist()
    assert got == [0, 2, 1, 3, 4, 6, 5, 7], \
        f"rows after interleaved_to_half(2 heads of 4): {got}, expected [0, 2, 1, 3, 4, 6, 5, 7] (per head)"


@pytest.mark.graded(PARTIAL, weight=1, kind="homework")
def test_partial_rope_worked_example(impl):
    x = torch.tensor([[1.0, 0.0, 5.0, 6.0]])
    expected = torch.tensor([[math.cos(1), math.sin(1), 5.0, 6.0]])
    for layout in ("half", "interleaved"):
        out = impl.apply_partial_rope(x, torch.tensor([1]), 2, layout=layout)
        assert_close(out, expected, f"the docstring's example (layout={layout!r})")
    # what the statement states: pair k turns by position * base^(-2k / rotary_dim), the speeds from
    # rotary_dim, not head_dim. head_dim 8, rotary_dim 4, base 100, position 3: pair 1 turns by
    # 3 * 100^(-2/4) = 0.3 rad; in the half layout pair 1 is (x_1, x_3), interleaved (x_2, x_3)
    c, s_ = math.cos(0.3), math.sin(0.3)
    for layout, x, expected in (("half", [0.0, 1, 0, 0, 7, 8, 9, 10], [0.0, c, 0, s_, 7, 8, 9, 10]),
                                ("interleaved", [0.0, 0, 1, 0, 7, 8, 9, 10], [0.0, 0, c, s_, 7, 8, 9, 10])):
        x, expected = torch.tensor([x]), torch.tensor([expected])
        copy = x.clone()
        out = impl.apply_partial_rope(x, torch.tensor([3]), 4, base=100.0, layout=layout)
        assert_close(out, expected, f"head_dim 8, rotary_dim 4, base 100, position 3 (layout={layout!r}): pair 1 "
                                    f"turns by 3 * 100^(-2/4) = 0.3 rad (speeds from rotary_dim, not head_dim)")
        assert_equal(x, copy, "x after apply_partial_rope (it must not be changed in place)")
    half = impl.apply_partial_rope(torch.tensor([[1.0, 0.0, 5.0, 6.0]]).bfloat16(), torch.tensor([1]), 2)
    assert half.dtype == torch.bfloat16, f"apply_partial_rope of bf16 x must return bf16 (x's dtype), got {half.dtype}"


@pytest.mark.graded(ROPE2D, weight=1, kind="homework")
def test_rope_2d_worked_example(impl):
    out = impl.apply_rope_2d(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), torch.tensor([1]), torch.tensor([2]))
    expected = torch.tensor([[math.cos(1), math.sin(1), math.cos(2), math.sin(2)]])
    assert_close(out, expected, "the docstring's example (row 1 rotates features 0-1, column 2 features 2-3)")
