"""Mixture of Experts (Chapter 10): many SwiGLU FFNs per layer, a router picks
k for each token.

    p    = softmax(x W_router^T)         (N, E) in float32 (at least): how
                                         each expert fits
    w, e = top-k of p                    the k best experts of every token
    w    = w / sum(w)                    renormalised (Mixtral; Qwen3-MoE's
                                         default skips it)
    y    = sum_j w_j * Expert_{e_j}(x)   only k of the E experts run for a
                                         token

Tokens are grouped by expert (a sort), each expert runs once on its group,
and the results are added back with index_add_: the work is k / E of running
every expert on every token.

Auxiliary losses: load balancing (Switch Transformer / Mixtral, as in
transformers) and the router z-loss (ST-MoE). Optional capacity factor (None:
no limit): each expert takes at most ceil(capacity_factor * N * k / E)
assignments; the rest are dropped (in token order).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import (
    check_int,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_tensor,
)
from .ffn import SwiGLU


def _layers(router_logits,
            n_experts: int | None = None) -> tuple[torch.Tensor, ...]:
    """One (N, E) tensor or a tuple/list of them (one per layer) -> a
    non-empty tuple of floating tensors with E = n_experts (when given) and
    at least one token."""
    layers = (tuple(router_logits)
              if isinstance(router_logits, (tuple, list))
              else (router_logits,))
    if not layers:
        raise ValueError("router_logits must be an (N, n_experts) tensor or "
                         "a non-empty tuple of them")
    for i, logits in enumerate(layers):
        check_tensor(f"router_logits[{i}]", logits, min_ndim=1, floating=True,
                     like=layers[0], like_name="router_logits[0]")
        if n_experts is not None and logits.shape[-1] != n_experts:
            raise ValueError(f"router logits have {logits.shape[-1]} experts "
                             "in their last dimension, "
                             f"expected n_experts={n_experts}")
        if logits.numel() == 0:
            raise ValueError(f"router_logits[{i}] of shape "
                             f"{tuple(logits.shape)} hold no tokens: "
                             "the loss is undefined")
    return layers


SCORES = ("softmax", "sigmoid")


def route_topk(router_logits: torch.Tensor, top_k: int, normalize: bool = True,
               score: str = "softmax", bias: torch.Tensor | None = None,
               n_group: int = 1, topk_group: int = 1,
               scaling: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Routing weights (N, k) in float32 (at least) and expert indices (N, k)
    from router logits h (N, E). Mixtral: the defaults. DeepSeek-V3
    (Chapter 12) changes the arguments after ``normalize``:

        p = softmax(h), or sigmoid(h) when score="sigmoid"      (N, E)
        e = top-k of p + bias, within the topk_group best of n_group groups
        w = p_e / sum_j p_e_j (if normalize) * scaling          (N, k)

    The bias only chooses: the weights come from p.
    """
    _check_route(router_logits, top_k, score, bias, n_group, topk_group)
    h = router_logits.to(torch.promote_types(router_logits.dtype,
                                             torch.float32))  # (N, E) float32+
    if score == "softmax":
        p = torch.softmax(h, dim=-1)               # (N, E) Mixtral: sums to 1
    else:
        p = torch.sigmoid(h)                       # (N, E) DeepSeek-V3
    choice = p if bias is None else p + bias.to(p.dtype)  # (N, E)
    if n_group > 1:
        choice = best_groups_only(choice, n_group, topk_group)  # (N, E)
    experts = choice.topk(top_k, dim=-1).indices   # (N, k) the k best
    weights = p.gather(-1, experts)                # (N, k) from p, not bias
    if normalize:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)  # sum to 1
    return weights * scaling, experts


def _check_route(router_logits, top_k, score, bias, n_group, topk_group):
    """route_topk's arguments. Metadata only: reads no values."""
    check_tensor("router_logits", router_logits, min_ndim=1, floating=True)
    n_experts = router_logits.shape[-1]
    check_one_of("score", score, SCORES)
    check_positive_int("n_group", n_group)
    check_int("topk_group", topk_group, 1, n_group)
    if n_experts % n_group:
        raise ValueError(f"n_group ({n_group}) must divide the {n_experts} "
                         "experts into equal groups")
    allowed = n_experts // n_group * topk_group   # experts a token may use
    check_int("top_k", top_k, 1, allowed)
    if bias is not None:
        check_tensor("bias", bias, 1, floating=True, like=router_logits,
                     like_name="router_logits")
        if bias.shape[0] != n_experts:
            raise ValueError(f"bias must have one entry per expert "
                             f"({n_experts}), got {tuple(bias.shape)}")


def best_groups_only(scores: torch.Tensor, n_group: int,
                     topk_group: int) -> torch.Tensor:
    """DeepSeek-V3's group limit (Chapter 12): ``scores`` (N, E) of E experts
    in n_group equal groups, with -inf outside the topk_group groups whose two
    best scores sum highest, so that no top-k can choose there."""
    n, n_experts = scores.shape
    grouped = scores.view(n, n_group, n_experts // n_group)      # (N, G, E/G)
    best2 = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values  # (N, G, 2)
    group_score = best2.sum(-1)                                  # (N, G)
    best = group_score.topk(topk_group, dim=-1).indices          # (N, k_g)
    keep = torch.zeros_like(group_score, dtype=torch.bool)       # (N, G)
    keep = keep.scatter_(1, best, True)                          # (N, G)
    keep = keep[:, :, None].expand_as(grouped).reshape(n, n_experts)  # (N, E)
    return scores.masked_fill(~keep, float("-inf"))              # (N, E)


class MoE(nn.Module):
    """A sparse mixture-of-experts FFN with Mixtral's shapes.

    gate     nn.Linear(d_model, n_experts), no bias: the router (or the
             ``gate`` given: DeepSeekMoE gives its own)
    experts  n_experts SwiGLU FFNs of width d_ff
    After each forward, ``router_logits`` (N, E) and ``dropped`` (assignments
    over capacity) are kept.
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, top_k: int,
                 normalize_topk: bool = True,
                 capacity_factor: float | None = None, device=None,
                 dtype=None, gate: nn.Module | None = None):
        super().__init__()
        check_int("top_k", top_k, 1,
                  check_positive_int("n_experts", n_experts))
        if capacity_factor is not None:   # None: no limit
            check_positive_number("capacity_factor", capacity_factor)
        self.n_experts, self.top_k = n_experts, top_k
        self.normalize_topk, self.capacity_factor = (normalize_topk,
                                                     capacity_factor)
        if gate is None:
            gate = nn.Linear(d_model, n_experts, bias=False, device=device,
                             dtype=dtype)
        self.gate = gate
        self.experts = nn.ModuleList(
            SwiGLU(d_model, d_ff, device=device, dtype=dtype)
            for _ in range(n_experts))
        self.router_logits: torch.Tensor | None = None
        self.dropped = 0

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixtral's routing: weights and experts (N, k) from logits (N, E)."""
        return route_topk(logits, self.top_k, self.normalize_topk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, min_ndim=1, floating=True, like=self.gate.weight,
                     like_name="the router's weight")
        shape = x.shape
        x = x.reshape(-1, shape[-1])                 # (N, d) every token
        logits = self.gate(x)                        # (N, E)
        weights, experts = self.route(logits)        # (N, k), (N, k)
        self.router_logits = logits

        # one row per assignment
        flat_expert = experts.reshape(-1)                        # (N*k,)
        flat_token = (torch.arange(x.shape[0], device=x.device)
                      .repeat_interleave(self.top_k))            # (N*k,)
        flat_weight = weights.reshape(-1)                        # (N*k,)
        # assignments grouped by expert
        order = flat_expert.argsort(stable=True)
        counts = torch.bincount(flat_expert, minlength=self.n_experts).tolist()
        capacity = (math.ceil(self.capacity_factor * x.shape[0] * self.top_k
                              / self.n_experts)
                    if self.capacity_factor is not None else None)

        out = torch.zeros_like(x)                    # (N, d)
        start, dropped = 0, 0
        for e, count in enumerate(counts):  # a loop over experts, not tokens
            # this expert's assignments, token order
            chosen = order[start:start + count]
            start += count
            if capacity is not None and count > capacity:
                dropped += count - capacity
                chosen = chosen[:capacity]       # over capacity: dropped
            if chosen.numel() == 0:
                continue
            tokens = flat_token[chosen]                  # (n_e,)
            # (n_e, d) weighted in float32
            y = self.experts[e](x[tokens]) * flat_weight[chosen, None]
            # combine: sum over the k experts
            out.index_add_(0, tokens, y.to(x.dtype))
        self.dropped = dropped
        return out.reshape(shape)


def load_balancing_loss(
        router_logits, n_experts: int, top_k: int,
        attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Switch/Mixtral auxiliary loss, as transformers computes it:

        f_e = (top-k assignments to expert e) / tokens    (sums to k)
        P_e = mean router probability of expert e
        loss = E * sum_e f_e * P_e        (= k when perfectly balanced)

    ``router_logits``: one (N, E) tensor or a tuple of them (one per layer,
    pooled). ``attention_mask`` (batch, seq) of 0/1 leaves padding out.
    """
    layers = _check_balancing(router_logits, n_experts, top_k, attention_mask)
    # at least float32
    device, dtype = (layers[0].device,
                     torch.promote_types(layers[0].dtype, torch.float32))
    # top-k assignments per expert, router probability per expert
    assigned = torch.zeros(n_experts, device=device, dtype=dtype)
    probability = torch.zeros(n_experts, device=device, dtype=dtype)
    rows = torch.zeros((), device=device, dtype=dtype)  # tokens counted
    for logits in layers:
        probs = torch.softmax(logits.to(dtype).reshape(-1, n_experts),
                              dim=-1)                             # (N, E)
        chosen = probs.topk(top_k, dim=-1).indices                # (N, k)
        # (N,) 1 = a real token
        keep = probs.new_ones(probs.shape[0]) if attention_mask is None else \
            attention_mask.reshape(-1).to(device=device, dtype=dtype)
        assigned = assigned.scatter_add(0, chosen.reshape(-1),
                                        keep.repeat_interleave(top_k))
        probability = probability + (probs * keep[:, None]).sum(dim=0)
        rows = rows + keep.sum()
    rows = rows.clamp(min=1)                     # every token masked: loss 0
    return n_experts * torch.sum((assigned / rows) * (probability / rows))


def _check_balancing(router_logits, n_experts, top_k,
                     attention_mask) -> tuple[torch.Tensor, ...]:
    check_int("top_k", top_k, 1, check_positive_int("n_experts", n_experts))
    layers = _layers(router_logits, n_experts)
    if attention_mask is not None:
        check_tensor("attention_mask", attention_mask, like=layers[0],
                     like_name="router_logits")
        for logits in layers:
            if attention_mask.numel() != logits.numel() // n_experts:
                raise ValueError(
                    f"attention_mask {tuple(attention_mask.shape)} must have "
                    "one entry per token of the router logits "
                    f"{tuple(logits.shape)}")
    return layers


def router_z_loss(router_logits) -> torch.Tensor:
    """ST-MoE's z-loss: mean over tokens of logsumexp(router logits)^2; keeps
    the logits small."""
    layers = _layers(router_logits)
    # at least float32
    dtype = torch.promote_types(layers[0].dtype, torch.float32)
    z = torch.cat([torch.logsumexp(l.to(dtype).reshape(-1, l.shape[-1]),
                                   dim=-1)
                   for l in layers])                        # (all N,)
    return z.pow(2).mean()
