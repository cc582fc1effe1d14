"""DeepSeekMoE (Chapter 12; DeepSeek-V3): many small routed experts, a few shared ones.

    s       = sigmoid(x W_r^T)                       (N, E) each expert's affinity, float32
    s'      = s + b                                  b: the balancing bias, used to *choose* only
    group   = sum of the 2 largest s' in each of G groups            (N, G)
    keep the topk_group best groups; experts of other groups cannot be chosen
    e       = top-k of s' among the kept experts     (N, k)
    w       = s_e / sum_j s_e_j * routed_scaling_factor              weights from s, never from s'
    y       = Shared(x) + sum_j w_j Expert_{e_j}(x)  every token also passes the shared experts

The first ``first_k_dense_replace`` blocks keep a dense SwiGLU. Auxiliary-loss-free balancing
(DeepSeek-AI 2024, Sec. 2.1.2): after each step, b_e -= gamma for an overloaded expert and
b_e += gamma for an underloaded one; no loss term pulls on the router.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig
from .ffn import SwiGLU


def group_limited_topk(scores: torch.Tensor, top_k: int, n_group: int = 1, topk_group: int = 1) -> torch.Tensor:
    """Indices (N, k) of the top-k of ``scores`` (N, E) among the experts of the ``topk_group`` groups
    whose two best scores sum highest (E experts in ``n_group`` equal groups)."""
    n, n_experts = scores.shape
    if n_experts % n_group or not 1 <= topk_group <= n_group or not 1 <= top_k <= topk_group * n_experts // n_group:
        raise ValueError(f"need n_group | E, 1 <= topk_group <= n_group, 1 <= top_k <= allowed experts; got "
                         f"E={n_experts}, n_group={n_group}, topk_group={topk_group}, top_k={top_k}")
    grouped = scores.view(n, n_group, n_experts // n_group)                   # (N, G, E/G)
    group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)  # (N, G)
    best_groups = group_score.topk(topk_group, dim=-1).indices                # (N, topk_group)
    allowed = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, best_groups, True)  # (N, G)
    allowed = allowed[:, :, None].expand_as(grouped).reshape(n, n_experts)   # (N, E)
    return scores.masked_fill(~allowed, float("-inf")).topk(top_k, dim=-1).indices  # (N, k)


def route_deepseek(router_logits: torch.Tensor, top_k: int, bias: torch.Tensor | None = None,
                   n_group: int = 1, topk_group: int = 1, normalize: bool = True,
                   scaling: float = 1.0, score: str = "sigmoid") -> tuple[torch.Tensor, torch.Tensor]:
    """Weights (N, k) in (at least) float32 and experts (N, k) from router logits (N, E), DeepSeek-V3's rule."""
    if score not in ("sigmoid", "softmax"):
        raise ValueError(f"score must be 'sigmoid' or 'softmax', got {score!r}")
    logits = router_logits.to(torch.promote_types(router_logits.dtype, torch.float32))  # at least float32
    s = logits.sigmoid() if score == "sigmoid" else logits.softmax(dim=-1)   # (N, E) affinities
    choice = s if bias is None else s + bias.to(s.dtype)                        # (N, E) the bias only selects
    experts = group_limited_topk(choice, top_k, n_group, topk_group)          # (N, k)
    weights = s.gather(1, experts)                                            # (N, k) unbiased scores
    if normalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)       # the k weights sum to 1
    return weights * scaling, experts


def update_balancing_bias(bias: torch.Tensor, experts: torch.Tensor, rate: float = 1e-3) -> torch.Tensor:
    """One step of auxiliary-loss-free balancing: b_e - rate * sign(load_e - mean load).

    ``experts`` (N, k) are the choices of the last batch; ``bias`` (E,). Returns the new bias."""
    load = torch.bincount(experts.reshape(-1), minlength=bias.shape[0]).to(bias.dtype)  # (E,) tokens per expert
    return bias - rate * torch.sign(load - load.mean())                       # (E,)


class Router(nn.Linear):
    """The gate: nn.Linear(d_model, E) without bias, plus the buffer ``e_score_correction_bias`` (E,)."""

    def __init__(self, d_model: int, n_experts: int, device=None, dtype=None):
        super().__init__(d_model, n_experts, bias=False, device=device, dtype=dtype)
        self.register_buffer("e_score_correction_bias", torch.zeros(n_experts, device=device, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)
        return F.linear(x.to(dtype), self.weight.to(dtype))                  # (N, E) logits, at least float32


class DeepSeekMoE(nn.Module):
    """Shared experts plus routed experts, transformers' DeepseekV3MoE names:
    gate (Router), experts.N.{gate,up,down}_proj, shared_experts.{gate,up,down}_proj."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None):
        super().__init__()
        c = config
        width = c.moe_d_ff or c.d_ff
        self.top_k, self.n_group, self.topk_group = c.n_experts_per_token, c.n_group, c.topk_group
        self.normalize, self.scaling, self.score = c.moe_norm_topk, c.routed_scaling_factor, c.moe_router
        self.gate = Router(c.d_model, c.n_experts, device=device, dtype=dtype)
        self.experts = nn.ModuleList(SwiGLU(c.d_model, width, device=device, dtype=dtype) for _ in range(c.n_experts))
        self.shared_experts = SwiGLU(c.d_model, width * c.n_shared_experts, device=device, dtype=dtype) \
            if c.n_shared_experts else None
        self.router_logits: torch.Tensor | None = None
        self.chosen: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                           # (N, d)
        self.router_logits = logits = self.gate(x)                             # (N, E) float32
        weights, experts = route_deepseek(logits, self.top_k, self.gate.e_score_correction_bias, self.n_group,
                                          self.topk_group, self.normalize, self.scaling, self.score)
        self.chosen = experts                                                  # (N, k) for balancing
        out = torch.zeros_like(x)                                              # (N, d)
        token = torch.arange(x.shape[0], device=x.device)[:, None].expand_as(experts)  # (N, k)
        for e in experts.unique().tolist():                                    # only the experts in use
            rows, slot = (experts == e).nonzero(as_tuple=True)                 # tokens sent to e
            y = self.experts[e](x[rows]) * weights[rows, slot, None]           # (n_e, d)
            out.index_add_(0, token[rows, slot], y.to(x.dtype))
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)                                 # every token, no weight
        return out.reshape(shape)


def count_parameters_deepseek(config: LlamaConfig) -> dict[str, int]:
    """count_parameters for models whose blocks differ (MLA, shared experts, dense first layers,
    expert width moe_d_ff); the keys of config.count_parameters, per-block ones for an MoE block.

        attention   = mla_parameters  (or the LLaMA/GQA formula)
        norms       = 2 d (+ r_q + r with MLA, + 2 head_dim with qk_norm)
        ffn (MoE)   = (E + n_shared) * 3 d moe_d_ff,  router = d E
        dense FFN   = 3 d d_ff  in the first first_k_dense_replace blocks
        active      = total - (MoE blocks) * (E - k) * 3 d moe_d_ff
    """
    from .mla import mla_parameters

    c, d = config, config.d_model
    if c.kv_lora_rank is not None:
        attention = mla_parameters(c)
        norms = 2 * d + (c.q_lora_rank or 0) + c.kv_lora_rank
    else:
        attention = d * c.n_heads * c.head_dim * 2 + 2 * d * c.n_kv_heads * c.head_dim
        norms = 2 * d + (2 * c.head_dim if c.qk_norm else 0)
    expert = 3 * d * (c.moe_d_ff or c.d_ff)
    sparse = c.is_moe
    n_moe = c.n_layers - min(c.first_k_dense_replace, c.n_layers) if sparse else 0
    counts = {"embedding": c.vocab_size * d, "attention": attention,
              "ffn": (c.n_experts + c.n_shared_experts) * expert if sparse else 3 * d * c.d_ff,
              "router": d * c.n_experts if sparse else 0, "norms": norms}
    counts["per_block"] = attention + counts["ffn"] + counts["router"] + norms
    counts["dense_ffn"] = 3 * d * c.d_ff
    counts["blocks"] = n_moe * counts["per_block"] + (c.n_layers - n_moe) * (attention + norms + counts["dense_ffn"])
    counts["final_norm"] = d
    counts["lm_head"] = 0 if c.tie_embeddings else c.vocab_size * d
    counts["total"] = counts["embedding"] + counts["blocks"] + counts["final_norm"] + counts["lm_head"]
    counts["active"] = counts["total"] - n_moe * (c.n_experts - c.n_experts_per_token) * expert
    return counts
