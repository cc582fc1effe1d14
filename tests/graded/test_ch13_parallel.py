"""Graded tests for Chapter 13 (exercises/ch13_parallel.py).

Oracles: the ZeRO paper's published per-GPU memory (Rajbhandari et al. 2020, Figure 1: 7.5B
parameters on 64 GPUs) and its communication ratios (Section 7), ring all-reduce volumes worked by
hand, and torch's own SwiGLU on the whole matrices. Homework: only the signatures and the worked
examples of the chapter's exercise cell here; the real checks are hidden.
"""

import pytest
import torch
import torch.nn.functional as F

from ._checks import assert_close

PACKAGE_MODULES = ["llama_course.parallel.memory", "llama_course.parallel.tensor"]

MEMORY = "Exercise 13.1 memory_per_gpu"
COMM = "Exercise 13.2 communication_bytes"
TP = "Exercise 13.3 tensor_parallel_swiglu"
BUBBLE = "Homework 13.A pipeline_bubble_fraction"
A2A = "Homework 13.B all_to_all_counts"


@pytest.mark.graded(MEMORY, weight=2)
def test_memory_matches_the_zero_paper(impl):
    gb = 1e9
    published = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.88}
    for strategy, expected in published.items():
        got = impl.memory_per_gpu(7.5e9, 64, strategy) / gb
        assert got == pytest.approx(expected, abs=0.05), f"{strategy}: {got:.3f} GB per GPU, paper {expected}"


@pytest.mark.graded(MEMORY, weight=1)
def test_memory_without_mixed_precision_and_bad_input(impl):
    # float32: 4 + 4 + 8 bytes per parameter, nothing split on one GPU
    got = impl.memory_per_gpu(1000, 1, "ddp", mixed_precision=False)
    assert got == pytest.approx(16000), f"float32 DDP, 1000 parameters: {got} bytes, expected 16000 (4 + 4 + 8 each)"
    got = impl.memory_per_gpu(1000, 4, "zero1", mixed_precision=False)
    assert got == pytest.approx(1000 * (4 + 4 + 8 / 4)), \
        f"float32 ZeRO-1 on 4 GPUs: {got} bytes, expected {1000 * (4 + 4 + 8 / 4):g} (optimizer states split 4 ways)"
    one, ddp = impl.memory_per_gpu(1000, 1, "zero3"), impl.memory_per_gpu(1000, 1, "ddp")
    assert one == pytest.approx(ddp), f"on one GPU ZeRO-3 splits nothing: {one} bytes, DDP {ddp}"
    with pytest.raises(ValueError, match="strategy"):
        impl.memory_per_gpu(1000, 8, "fsdp")
    with pytest.raises(ValueError, match="n_gpus"):
        impl.memory_per_gpu(1000, 0)


@pytest.mark.graded(COMM, weight=2)
def test_communication_by_hand(impl):
    # 4 GPUs, 1000 bf16 values: a ring all-reduce sends 2 * 3/4 * 1000 * 2 bytes per rank
    cases = [((1000, 4, "ddp"), {}, 3000, "a ring all-reduce"), ((1000, 4, "zero1"), {}, 3000, "as DDP"),
             ((1000, 4, "zero2"), {}, 3000, "as DDP"), ((1000, 4, "zero3"), {}, 4500, "ZeRO Sec. 7: 1.5x DDP"),
             ((1000, 1, "ddp"), {}, 0, "alone: nothing to send"),
             ((1000, 4, "ddp"), {"bytes_per_value": 4}, 6000, "float32 values")]
    for args, kwargs, expected, why in cases:
        got = impl.communication_bytes(*args, **kwargs)
        assert got == pytest.approx(expected), \
            f"communication_bytes{args}{' ' + str(kwargs) if kwargs else ''} = {got}, expected {expected} ({why})"
    with pytest.raises(ValueError, match="strategy"):
        impl.communication_bytes(1000, 4, "zero4")


def swiglu_weights(seed=0, d=8, d_ff=12):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(3, 5, d, generator=g), torch.randn(d_ff, d, generator=g) * 0.3,
            torch.randn(d_ff, d, generator=g) * 0.3, torch.randn(d, d_ff, generator=g) * 0.3)


@pytest.mark.graded(TP, weight=2)
def test_partials_add_up_to_swiglu(impl):
    x, w_gate, w_up, w_down = swiglu_weights()
    expected = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
    for n in (1, 2, 3, 4):
        partials = impl.tensor_parallel_swiglu(x, w_gate, w_up, w_down, n)
        assert len(partials) == n, f"n={n}: {len(partials)} partial outputs, expected one per rank"
        shapes = [tuple(p.shape) for p in partials]
        assert all(shape == tuple(expected.shape) for shape in shapes), \
            f"n={n}: partial outputs of shapes {shapes}, each expected {tuple(expected.shape)} (the whole output's)"
        assert_close(sum(partials), expected, f"n={n}: the sum of the partial outputs vs SwiGLU on whole matrices")


@pytest.mark.graded(TP, weight=1)
def test_each_rank_reads_only_its_slices(impl):
    x, w_gate, w_up, w_down = swiglu_weights(1)
    before = impl.tensor_parallel_swiglu(x, w_gate, w_up, w_down, 2)
    g2, u2, d2 = w_gate.clone(), w_up.clone(), w_down.clone()
    g2[6:], u2[6:], d2[:, 6:] = 5.0, -5.0, 7.0                    # change only rank 1's slices
    after = impl.tensor_parallel_swiglu(x, g2, u2, d2, 2)
    assert_close(after[0], before[0], "rank 0's partial after changing only rank 1's slices (it must not notice)")
    assert not torch.allclose(after[1], before[1]), "rank 1's partial did not change when its own slices did"
    with pytest.raises(ValueError, match="n"):
        impl.tensor_parallel_swiglu(x, w_gate, w_up, w_down, 5)


@pytest.mark.graded(BUBBLE, weight=1, kind="homework")
def test_pipeline_bubble_worked_example(impl):
    # the chapter's example: one stage has no bubble
    one = impl.pipeline_bubble_fraction(1, 8)
    assert one == pytest.approx(0.0), f"pipeline_bubble_fraction(1, 8) = {one}: one stage has no bubble"
    four = impl.pipeline_bubble_fraction(4, 8)
    assert isinstance(four, float), f"pipeline_bubble_fraction must return a float, got {type(four).__name__}"
    # the docstring's worked example: 3 stages, 4 micro-batches, 18 slots of which 6 idle per GPU
    got = impl.pipeline_bubble_fraction(3, 4)
    assert got == pytest.approx(1 / 3), f"the docstring's example pipeline_bubble_fraction(3, 4) = {got}, expected 1/3"


@pytest.mark.graded(A2A, weight=1, kind="homework")
def test_all_to_all_worked_example(impl):
    # 2 ranks, 4 experts (rank 0: experts 0-1, rank 1: experts 2-3), 2 tokens each, top-1
    ids = torch.tensor([[[0], [3]], [[2], [2]]])
    counts = impl.all_to_all_counts(ids, 4)
    assert isinstance(counts, torch.Tensor) and counts.dtype == torch.int64, \
        f"all_to_all_counts must return an int64 tensor, got {getattr(counts, 'dtype', type(counts).__name__)}"
    assert tuple(counts.shape) == (2, 2), f"2 ranks: counts of shape {tuple(counts.shape)}, expected (2, 2)"
    assert counts.tolist() == [[1, 1], [0, 2]], f"2 ranks, top-1: counts {counts.tolist()}, expected [[1, 1], [0, 2]]"
    # the docstring's worked example: top-2, pairs kept on their own rank on the diagonal
    ids = torch.tensor([[[0, 3], [1, 2]], [[1, 2], [3, 2]]])
    got = impl.all_to_all_counts(ids, 4).tolist()
    assert got == [[2, 2], [1, 3]], f"the docstring's example (top-2): counts {got}, expected [[2, 2], [1, 3]]"
