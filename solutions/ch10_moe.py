"""Chapter 10 exercises: routing, dispatching and balancing a mixture of experts.

Read Chapter 10 ("Mixture of Experts") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 10
"""

import torch

from llama_course.ffn import swiglu


def route_topk(router_logits: torch.Tensor, top_k: int, normalize: bool = True):
    """From router logits (N, E): softmax in float32, take the top_k experts of every token, and
    (if normalize) divide their weights by their sum. Return (weights (N, k) float32, indices (N, k)).
    Raise ValueError naming top_k if it is not in [1, E]."""
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
    """A Mixtral MoE layer: x (N, d); gate_weight (E, d); experts a list of E tuples
    (w_gate, w_up, w_down) of SwiGLU weights. Route with route_topk (normalised), then run each
    expert ONCE on the tokens routed to it (no Python loop over tokens), multiply by the routing
    weights and add the results back (index_add_). Return (N, d)."""
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
