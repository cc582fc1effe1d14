# Exercise stub, generated from the course's key (solutions/ch10_moe.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 10 exercises: routing, dispatching and balancing a mixture of experts.

Read Chapter 10 ("Mixture of Experts") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 10
"""

import torch

from llama_course.ffn import swiglu


def route_topk(router_logits: torch.Tensor, top_k: int, normalize: bool = True):
    """From router logits (N, E) of any float dtype: softmax in float32, take the top_k experts of
    every token (largest first), and (if normalize) divide their weights by their sum. Return
    (weights (N, k) float32 -- whatever the logits' dtype --, indices (N, k) int64), on the logits'
    device. Raise ValueError naming top_k if it is not in [1, E]."""
    raise NotImplementedError('Exercise 10.1 route_topk (Chapter 10, section 10.2 "The router"): not implemented yet')


def moe_forward(x: torch.Tensor, gate_weight: torch.Tensor, experts: list, top_k: int) -> torch.Tensor:
    """A Mixtral MoE layer: x (N, d); gate_weight (E, d), so the router logits are x @ gate_weight.T;
    experts a list of E tuples (w_gate, w_up, w_down) of SwiGLU weights in nn.Linear's layout,
    w_gate and w_up (d_ff, d), w_down (d, d_ff), as in Exercise 6.2. Route with route_topk
    (normalised), then run each expert ONCE on the tokens routed to it (no Python loop over
    tokens), multiply by the routing weights and add the results back (index_add_). Return (N, d)
    in x's dtype."""
    raise NotImplementedError(
        'Exercise 10.2 moe_forward (Chapter 10, section 10.3 "Dispatch and combine")'
        ': not implemented yet'
    )


def load_balancing_loss(router_logits, n_experts: int, top_k: int) -> torch.Tensor:
    """The Switch/Mixtral auxiliary loss over one (N, E) tensor or a tuple of them (one per layer,
    all tokens pooled):  E * sum_e f_e * P_e, where f_e = (top-k assignments to expert e) / N
    (so sum_e f_e = k) and P_e = the mean softmax probability of expert e."""
    raise NotImplementedError(
        'Exercise 10.3 load_balancing_loss (Chapter 10, section 10.5 "Load balancing")'
        ': not implemented yet'
    )


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def expert_choice_moe(x: torch.Tensor, gate_weight: torch.Tensor, experts: list, capacity: int) -> torch.Tensor:
    """Expert-choice routing (Zhou et al. 2022): the EXPERTS pick their tokens.

    x (N, d); gate_weight (E, d); experts a list of E tuples (w_gate, w_up, w_down) of SwiGLU
    weights in the layout of Exercise 10.2. Let P = softmax over experts of x gate_weight^T, in
    float32 (N, E). Expert e takes the ``capacity`` tokens with the largest P[:, e] (ties: the lower
    token index), runs once on them, and adds P[n, e] * expert_e(x[n]) to token n's output. A token
    may be chosen by several experts or by none (its output row is then zero). Return (N, d) in x's
    dtype. capacity not in [1, N] -> ValueError naming capacity.

    Example: N = 3 tokens, E = 2 experts, capacity 1, P = [[.5, .5], [.9, .1], [.8, .2]]: expert 0
    takes token 1 (.9), expert 1 takes token 0 (.5), and token 2 gets a zero output row.
    """
    raise NotImplementedError(
        'Homework 10.A expert_choice_moe (Chapter 10, beyond section 10.3 "Dispatch and combine")'
        ': not implemented yet'
    )


def priority_dispatch(weights: torch.Tensor, indices: torch.Tensor, n_experts: int, capacity: int):
    """Capacity-limited dispatch, a per-assignment variant of V-MoE's "batch prioritized routing"
    (Riquelme et al. 2021): when an expert's buffer of ``capacity`` slots is too small, the
    assignments with the largest routing weights get in, not the first tokens. Unlike V-MoE, which
    orders whole tokens by their top weight and serves every token's first choice before any
    token's second choice, this variant ranks each (token, expert) assignment by its own weight,
    so a second choice can take a slot before another token's first choice.

    weights (N, k) float and indices (N, k) integers are the output of route_topk. Serve the N*k
    assignments in order of decreasing weight (ties: the lower token index first, then the lower
    column j); each gets the next free slot 0, 1, ... of its expert, or is dropped once the expert
    has ``capacity`` of them. Return (slots, dropped): slots (N, k) int64 on indices' device,
    the slot of each assignment or -1 when dropped, and dropped, a Python int counting them.
    ValueError naming capacity if capacity < 0.

    Example: weights [[0.6, 0.4], [0.9, 0.1]], indices [[0, 1], [0, 1]], 2 experts, capacity 1:
    expert 0 serves token 1 first (0.9 > 0.6) and expert 1 serves token 0 (0.4 > 0.1), so
    slots == [[-1, 0], [0, -1]] and dropped == 2. (V-MoE's own rule would give [[-1, -1], [0, 0]]:
    token 1's first choice takes expert 0, token 0's first choice finds it full, then token 1's
    second choice takes expert 1 before token 0's second choice can.)
    """
    raise NotImplementedError(
        'Homework 10.B priority_dispatch (Chapter 10, beyond section 10.7 "Beyond Mixtral")'
        ': not implemented yet'
    )
# generated stub, sha256 1218ac5bff2f029890ef32619a5cac6f40e05b294fb83f1447df5ac7d213736c
