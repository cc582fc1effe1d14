"""Hidden tests for Chapter 13 (instructor edition and Gradescope only).

Oracles: a slot-by-slot simulation of the GPipe schedule (who is busy in each time slot), checked
against the published value of Huang et al. 2019 / Narayanan et al. 2021 ((p-1)/(m+p-1)) on
examples; a per-token loop over routed experts for the all-to-all counts.
"""

import pytest
import torch

BUBBLE = "Homework 13.A pipeline_bubble_fraction"
A2A = "Homework 13.B all_to_all_counts"


def simulated_bubble(stages: int, micro: int) -> float:
    """Run the GPipe schedule: a stage starts a task as soon as its input is ready and it is free."""
    free = [0] * stages                      # the next slot each stage is free
    done_fwd = {}                            # (stage, microbatch) -> slot its forward ends
    for m in range(micro):
        for s in range(stages):
            start = max(free[s], done_fwd.get((s - 1, m), 0))
            done_fwd[(s, m)] = free[s] = start + 1
    flush = max(free)                        # GPipe: all forwards, then all backwards
    free = [flush] * stages
    done_bwd = {}
    for m in range(micro):
        for s in reversed(range(stages)):
            ready = done_bwd.get((s + 1, m), done_fwd[(stages - 1, m)] if s == stages - 1 else 0)
            start = max(free[s], ready, flush)
            done_bwd[(s, m)] = free[s] = start + 2
    total = max(free)
    busy = stages * micro * 3
    return 1 - busy / (stages * total)


@pytest.mark.graded(BUBBLE, weight=4, kind="homework")
@pytest.mark.parametrize("stages, micro", [(1, 1), (2, 1), (4, 8), (8, 8), (8, 32), (3, 5), (16, 4)])
def test_bubble_matches_the_simulated_schedule(impl, stages, micro):
    expected = simulated_bubble(stages, micro)
    got = impl.pipeline_bubble_fraction(stages, micro)
    assert got == pytest.approx(expected, abs=1e-12), \
        f"{stages} stages, {micro} micro-batches: bubble {got}, the simulated schedule's {expected}"


@pytest.mark.graded(BUBBLE, weight=1, kind="homework")
def test_bubble_published_value_and_bad_input(impl):
    got = impl.pipeline_bubble_fraction(4, 8)                              # (p-1)/(m+p-1), GPipe Sec. 2.2
    assert got == pytest.approx(3 / 11), f"pipeline_bubble_fraction(4, 8) = {got}, GPipe's 3/11"
    for args in ((0, 4), (4, 0), (2.5, 4)):
        with pytest.raises(ValueError):
            impl.pipeline_bubble_fraction(*args)


def loop_counts(ids: torch.Tensor, n_experts: int) -> list:
    ranks = ids.shape[0]
    per_rank = n_experts // ranks
    counts = [[0] * ranks for _ in range(ranks)]
    for i in range(ranks):
        for e in ids[i].reshape(-1).tolist():
            counts[i][e // per_rank] += 1
    return counts


@pytest.mark.graded(A2A, weight=4, kind="homework")
@pytest.mark.parametrize("ranks, experts, tokens, k", [(2, 8, 16, 2), (4, 8, 5, 2), (8, 8, 32, 1), (4, 16, 7, 4)])
def test_counts_match_a_loop(impl, ranks, experts, tokens, k):
    g = torch.Generator().manual_seed(ranks * 100 + experts)
    ids = torch.stack([torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])
                       for _ in range(ranks)])                                          # (R, N, k)
    counts = impl.all_to_all_counts(ids, experts)
    assert counts.dtype == torch.int64, f"all_to_all_counts must return int64, got {counts.dtype}"
    expected = loop_counts(ids, experts)
    assert counts.tolist() == expected, f"{ranks} ranks, {experts} experts, top-{k}: counts differ from a loop's"
    assert counts.sum(1).tolist() == [tokens * k] * ranks, "every (token, expert) pair must be sent exactly once"


@pytest.mark.graded(A2A, weight=1, kind="homework")
def test_counts_bad_input(impl):
    with pytest.raises(ValueError, match="n_experts"):
        impl.all_to_all_counts(torch.zeros(3, 2, 1, dtype=torch.long), 4)      # 3 ranks, 4 experts
    with pytest.raises(ValueError, match="n_experts"):
        impl.all_to_all_counts(torch.full((2, 2, 1), 9), 4)                   # id outside [0, 4)
