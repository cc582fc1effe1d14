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
    # BEGIN SOLUTION Exercise 10.1 route_topk (Chapter 10, section 10.2 "The router")
    n_experts = router_logits.shape[-1]
    if not 1 <= top_k <= n_experts:
        raise ValueError(f"top_k must be in [1, {n_experts}], got {top_k}")
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, indices = probs.topk(top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, indices
    # END SOLUTION


def moe_forward(x: torch.Tensor, gate_weight: torch.Tensor, experts: list, top_k: int) -> torch.Tensor:
    """A Mixtral MoE layer: x (N, d); gate_weight (E, d), so the router logits are x @ gate_weight.T;
    experts a list of E tuples (w_gate, w_up, w_down) of SwiGLU weights in nn.Linear's layout,
    w_gate and w_up (d_ff, d), w_down (d, d_ff), as in Exercise 6.2. Route with route_topk
    (normalised), then run each expert ONCE on the tokens routed to it (no Python loop over
    tokens), multiply by the routing weights and add the results back (index_add_). Return (N, d)
    in x's dtype."""
    # BEGIN SOLUTION Exercise 10.2 moe_forward (Chapter 10, section 10.3 "Dispatch and combine")
    weights, indices = route_topk(x @ gate_weight.T, top_k)
    out = torch.zeros_like(x)
    for e, (w_gate, w_up, w_down) in enumerate(experts):
        token, slot = torch.where(indices == e)
        if token.numel() == 0:
            continue
        y = swiglu(x[token], w_gate, w_up, w_down) * weights[token, slot, None]
        out.index_add_(0, token, y.to(x.dtype))
    return out
    # END SOLUTION


def load_balancing_loss(router_logits, n_experts: int, top_k: int) -> torch.Tensor:
    """The Switch/Mixtral auxiliary loss over one (N, E) tensor or a tuple of them (one per layer,
    all tokens pooled):  E * sum_e f_e * P_e, where f_e = (top-k assignments to expert e) / N
    (so sum_e f_e = k) and P_e = the mean softmax probability of expert e."""
    # BEGIN SOLUTION Exercise 10.3 load_balancing_loss (Chapter 10, section 10.5 "Load balancing")
    if not isinstance(router_logits, (tuple, list)):
        router_logits = (router_logits,)
    logits = torch.cat([l.reshape(-1, n_experts) for l in router_logits]).float()
    probs = torch.softmax(logits, dim=-1)
    chosen = probs.topk(top_k, dim=-1).indices
    f = torch.zeros(n_experts, device=probs.device, dtype=probs.dtype).scatter_add(
        0, chosen.reshape(-1), torch.ones(chosen.numel(), device=probs.device, dtype=probs.dtype)) / probs.shape[0]
    return n_experts * torch.sum(f * probs.mean(dim=0))
    # END SOLUTION


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
    # BEGIN SOLUTION Homework 10.A expert_choice_moe (Chapter 10, beyond section 10.3 "Dispatch and combine")
    N = x.shape[0]
    if not 1 <= capacity <= N:
        raise ValueError(f"capacity must be in [1, {N}], got {capacity}")
    probs = torch.softmax((x @ gate_weight.T).float(), dim=-1)                   # (N, E)
    order = probs.T.sort(dim=-1, descending=True, stable=True).indices           # (E, N) per expert
    chosen = order[:, :capacity]                                                 # (E, C)
    out = torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    for e, (w_gate, w_up, w_down) in enumerate(experts):
        tokens = chosen[e]                                                       # (C,)
        y = swiglu(x[tokens], w_gate, w_up, w_down).float() * probs[tokens, e, None]   # (C, d)
        out.index_add_(0, tokens, y)
    return out.to(x.dtype)
    # END SOLUTION


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
    # BEGIN SOLUTION Homework 10.B priority_dispatch (Chapter 10, beyond section 10.7 "Beyond Mixtral")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    flat_w, flat_e = weights.reshape(-1), indices.reshape(-1).long()          # (N*k,) token-major
    order = torch.sort(-flat_w.float(), stable=True).indices                  # priority order
    experts_in_order = flat_e[order]                                          # (N*k,)
    one_hot = torch.nn.functional.one_hot(experts_in_order, n_experts)        # (N*k, E)
    rank = (one_hot.cumsum(dim=0) - 1).gather(1, experts_in_order[:, None]).squeeze(1)
    slots_in_order = torch.where(rank < capacity, rank, torch.full_like(rank, -1))
    slots = torch.empty_like(slots_in_order).scatter_(0, order, slots_in_order)
    return slots.view(indices.shape).to(indices.device), int((slots < 0).sum())
    # END SOLUTION
