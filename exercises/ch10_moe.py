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
    """From router logits (N, E): softmax in float32, take the top_k experts of every token, and
    (if normalize) divide their weights by their sum. Return (weights (N, k) float32, indices (N, k)).
    Raise ValueError naming top_k if it is not in [1, E]."""
    raise NotImplementedError('Exercise 10.1 route_topk (Chapter 10, section 10.2 "The router"): not implemented yet')


def moe_forward(x: torch.Tensor, gate_weight: torch.Tensor, experts: list, top_k: int) -> torch.Tensor:
    """A Mixtral MoE layer: x (N, d); gate_weight (E, d); experts a list of E tuples
    (w_gate, w_up, w_down) of SwiGLU weights. Route with route_topk (normalised), then run each
    expert ONCE on the tokens routed to it (no Python loop over tokens), multiply by the routing
    weights and add the results back (index_add_). Return (N, d)."""
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
# generated stub, sha256 639988143ead2d641f47d238fd87f008974a7e0969822b180869ee39ef53c719
