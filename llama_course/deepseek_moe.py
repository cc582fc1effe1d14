"""DeepSeekMoE (Chapter 12; DeepSeek-V3): Chapter 10's MoE plus these changes.

    s     = sigmoid(x W_r^T)                (N, E) each expert's affinity,
                                            float32
    s'    = s + b                           b: the balancing bias, used to
                                            *choose* only
    group = sum of the 2 largest s' in each of G groups    (N, G)
    keep the topk_group best groups; experts of other groups cannot be chosen
    e     = top-k of s' among the kept experts             (N, k)
    w     = s_e / sum_j s_e_j * routed_scaling_factor
                                            weights from s, never from s'
    y     = Shared(x) + sum_j w_j Expert_{e_j}(x)
                                            every token also passes the
                                            shared experts

The routing is moe.route_topk with DeepSeek's arguments (score="sigmoid",
the bias, the groups, the scaling); the dispatch is MoE.forward's, unchanged.
The first ``first_k_dense_replace`` blocks keep a dense SwiGLU.
Auxiliary-loss-free balancing (DeepSeek-AI 2024, Sec. 2.1.2): after each step,
b_e -= gamma for an overloaded expert and b_e += gamma for an underloaded one;
no loss term pulls on the router.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig
from .ffn import SwiGLU
from .moe import MoE, best_groups_only, route_topk


def group_limited_topk(scores: torch.Tensor, top_k: int, n_group: int = 1,
                       topk_group: int = 1) -> torch.Tensor:
    """Indices (N, k) of the top-k of ``scores`` (N, E) among the experts of
    the ``topk_group`` groups whose two best scores sum highest (E experts in
    ``n_group`` equal groups): route_topk's choice, on given scores."""
    n_experts = scores.shape[-1]
    if n_group < 1 or n_experts % n_group or not 1 <= topk_group <= n_group \
            or not 1 <= top_k <= n_experts // n_group * topk_group:
        raise ValueError(
            "need n_group | E, 1 <= topk_group <= n_group and 1 <= top_k <= "
            f"E / n_group * topk_group; got E={n_experts}, n_group={n_group}, "
            f"topk_group={topk_group}, top_k={top_k}")
    kept = best_groups_only(scores, n_group, topk_group)  # (N, E)
    return kept.topk(top_k, dim=-1).indices                # (N, k)


def update_balancing_bias(bias: torch.Tensor, experts: torch.Tensor,
                          rate: float = 1e-3) -> torch.Tensor:
    """One step of auxiliary-loss-free balancing:
    b_e - rate * sign(load_e - mean load).

    ``experts`` (N, k) are the choices of the last batch; ``bias`` (E,).
    Returns the new bias."""
    # (E,) tokens per expert
    load = torch.bincount(experts.reshape(-1),
                          minlength=bias.shape[0]).to(bias.dtype)
    return bias - rate * torch.sign(load - load.mean())       # (E,)


class Router(nn.Linear):
    """The gate: nn.Linear(d_model, E) without bias, plus the buffer
    ``e_score_correction_bias`` (E,)."""

    def __init__(self, d_model: int, n_experts: int, device=None, dtype=None):
        super().__init__(d_model, n_experts, bias=False, device=device,
                         dtype=dtype)
        self.register_buffer(
            "e_score_correction_bias",
            torch.zeros(n_experts, device=device, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)
        # (N, E) logits, at least float32
        return F.linear(x.to(dtype), self.weight.to(dtype))


class DeepSeekMoE(MoE):
    """Chapter 10's MoE (its dispatch, unchanged) with DeepSeek-V3's router and
    shared experts; transformers' DeepseekV3MoE names: gate (Router),
    experts.N.{gate,up,down}_proj, shared_experts.{gate,up,down}_proj."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None):
        c, kw = config, dict(device=device, dtype=dtype)
        width = c.moe_d_ff or c.d_ff
        gate = Router(c.d_model, c.n_experts, **kw)   # float32, with the bias
        super().__init__(c.d_model, width, c.n_experts, c.n_experts_per_token,
                         normalize_topk=c.moe_norm_topk, gate=gate, **kw)
        self.score, self.scaling = c.moe_router, c.routed_scaling_factor
        self.n_group, self.topk_group = c.n_group, c.topk_group
        shared = width * c.n_shared_experts
        self.shared_experts = (SwiGLU(c.d_model, shared, **kw) if shared
                               else None)
        self.chosen: torch.Tensor | None = None

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Chapter 10's route_topk with DeepSeek-V3's arguments: sigmoid
        scores, the balancing bias (it chooses, it does not weigh), the
        group-limited top-k and the routed scaling factor. Keeps the choice
        (``chosen``) for update_balancing_bias."""
        weights, self.chosen = route_topk(
            logits, self.top_k, self.normalize_topk, score=self.score,
            bias=self.gate.e_score_correction_bias, n_group=self.n_group,
            topk_group=self.topk_group, scaling=self.scaling)  # (N, k) twice
        return weights, self.chosen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = Shared(x) + sum_j w_j Expert_{e_j}(x); (..., d) -> (..., d)."""
        y = super().forward(x)                 # (..., d) routed: MoE.forward
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)     # (..., d) every token, no w
        return y
