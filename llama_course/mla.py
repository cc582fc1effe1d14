"""Multi-head Latent Attention, MLA (Chapter 12; DeepSeek-V2 and V3).

A LLaMA block caches every head's key and value. MLA caches one small latent
per token instead, and rebuilds the heads' keys and values from it:

    c_q           = RMSNorm(x W_DQ^T)         (T, r_q)
                                              q_a_proj, q_a_layernorm
    [q_nope|q_pe] = c_q W_UQ^T, per head      (H, T, d_n + d_r)   q_b_proj
    [c_kv | k_pe] = x W_DKV^T                 (T, r + d_r)
                                              kv_a_proj_with_mqa
    c_kv          = RMSNorm(c_kv)             (T, r)    kv_a_layernorm
                                              <- cached
    k_pe          = RoPE(k_pe)                (T, d_r)  one key for all heads
                                              <- cached
    [k_nope | v]  = c_kv W_UKV^T, per head    (H, T, d_n), (H, T, d_v)
                                              kv_b_proj
    score         = (q_nope . k_nope + RoPE(q_pe) . k_pe) / sqrt(d_n + d_r)
    out           = o_proj( softmax(score) v , heads merged )

softmax(score) v is Chapter 4's scaled_dot_product_attention, given this
scale.

Absorption. With W_UK_h (d_n, r) and W_UV_h (d_v, r) the rows of kv_b_proj
for head h,

    q_nope . k_nope = q_nope . (W_UK_h c) = (W_UK_h^T q_nope) . c
                                              fold W_UK into the query
    sum_j a_j v_j   = sum_j a_j W_UV_h c_j = W_UV_h (sum_j a_j c_j)
                                              fold W_UV into the output

so a decode step scores the new query against the cached latents themselves:
no per-head key or value is ever made. RoPE cannot be folded the same way:
R_m sits between q and W_UK, so the product W_UK^T R_m would differ for every
position m. That is why the rotated part is a separate, decoupled d_r-wide
key, shared by all heads and cached as it is.

Cache per token and layer: r + d_r numbers (kv_cache.py keeps c_kv and k_pe
as a latent layer's keys and values). DeepSeek-V3: (512 + 64) * 61 layers *
2 bytes = 70,272 B.

A RoPE scaling with ``mscale_all_dim`` (DeepSeek's long-context configs)
sharpens the softmax as transformers' DeepseekV3Attention does, whatever the
rope_type except "default":

    scale  = mscale^2 / sqrt(d_n + d_r),
    mscale = 0.1 * mscale_all_dim * ln(factor) + 1     (1 if factor <= 1)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import causal_mask, merge_heads, scaled_dot_product_attention
from .checks import check_number
from .config import LlamaConfig
from .linear import Linear
from .norm import RMSNorm

# transformers' DeepseekV3RMSNorm default, used on both latents
LATENT_NORM_EPS = 1e-6
FORMS = ("auto", "naive", "absorbed")


def mla_scale(config: LlamaConfig) -> float:
    """The softmax scale 1 / sqrt(d_n + d_r), times mscale^2 when
    rope_scaling has mscale_all_dim."""
    scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    scaling = config.rope_scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type != "default" and scaling.get("mscale_all_dim"):
        factor = scaling.get("factor", 1.0)
        all_dim = check_number("rope_scaling['mscale_all_dim']",
                               scaling["mscale_all_dim"], low=0)
        mscale = 0.1 * all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0
        scale *= mscale * mscale
    return scale


class MultiHeadLatentAttention(nn.Module):
    """MLA with transformers' DeepseekV3Attention names (q_a_proj ...
    o_proj), no biases.

    ``form``: "naive" expands keys and values per head; "absorbed" attends in
    the latent space; "auto" (default) uses naive for a prefill and absorbed
    for a one-token decode step.
    """

    def __init__(self, config: LlamaConfig, position_hook=None, device=None,
                 dtype=None):
        super().__init__()
        c = config
        self.n_heads, self.kv_lora_rank = c.n_heads, c.kv_lora_rank
        self.nope_dim, self.rope_dim, self.v_dim = (
            c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim)
        # 1 / sqrt(d_n + d_r) (times mscale^2, see above)
        self.scale = mla_scale(c)
        self.position_hook, self.form, self.backend = (
            position_hook, "auto", "explicit")
        kw = dict(bias=False, device=device, dtype=dtype)
        q_out = c.n_heads * (self.nope_dim + self.rope_dim)
        if c.q_lora_rank is None:
            self.q_proj = Linear(c.d_model, q_out, **kw)
        else:
            self.q_a_proj = Linear(c.d_model, c.q_lora_rank, **kw)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, LATENT_NORM_EPS,
                                         device=device, dtype=dtype)
            self.q_b_proj = Linear(c.q_lora_rank, q_out, **kw)
        self.kv_a_proj_with_mqa = Linear(c.d_model,
                                         c.kv_lora_rank + self.rope_dim, **kw)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, LATENT_NORM_EPS,
                                      device=device, dtype=dtype)
        self.kv_b_proj = Linear(c.kv_lora_rank,
                                c.n_heads * (self.nope_dim + self.v_dim), **kw)
        self.o_proj = Linear(c.n_heads * self.v_dim, c.d_model, **kw)

    def queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> q_nope (B, H, T, d_n), q_pe (B, H, T, d_r), before
        RoPE."""
        batch, seq, _ = x.shape
        q = (self.q_proj(x) if hasattr(self, "q_proj")
             else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))))
        # (B, H, T, d_n + d_r)
        q = q.view(batch, seq, self.n_heads, -1).transpose(1, 2)
        return q.split([self.nope_dim, self.rope_dim], dim=-1)

    def latents(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> c_kv (B, 1, T, r) normalised, k_pe (B, 1, T, d_r)
        before RoPE: what is cached."""
        latent = self.kv_a_proj_with_mqa(x)                  # (B, T, r + d_r)
        # (B, T, r), (B, T, d_r)
        c_kv, k_pe = latent.split([self.kv_lora_rank, self.rope_dim], dim=-1)
        # (B, 1, T, r), (B, 1, T, d_r)
        return self.kv_a_layernorm(c_kv)[:, None], k_pe[:, None]

    def up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK (H, d_n, r) and W_UV (H, d_v, r): kv_b_proj's rows, head by
        head."""
        w = self.kv_b_proj.weight.view(
            self.n_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        # (H, d_n, r), (H, d_v, r)
        return w.split([self.nope_dim, self.v_dim], dim=1)

    def naive(self, q_nope, q_pe, c_kv, k_pe, mask=None) -> torch.Tensor:
        """Expand every head's key and value from the latents, then attend.
        Returns (B, H, T, d_v)."""
        batch, _, seq, _ = c_kv.shape
        # (B, H, S, d_n + d_v)
        kv = self.kv_b_proj(c_kv[:, 0]).view(
            batch, seq, self.n_heads, -1).transpose(1, 2)
        # (B, H, S, d_n), (B, H, S, d_v)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k_pe = k_pe.expand(-1, self.n_heads, -1, -1)  # (B, H, S, d_r) shared
        k = torch.cat([k_nope, k_pe], dim=-1)         # (B, H, S, d_n + d_r)
        q = torch.cat([q_nope, q_pe], dim=-1)         # (B, H, T, d_n + d_r)
        return scaled_dot_product_attention(
            q, k, v, mask, scale=self.scale)          # (B, H, T, d_v)

    def absorbed(self, q_nope, q_pe, c_kv, k_pe, mask=None) -> torch.Tensor:
        """Attend in the latent space: W_UK folded into the query, W_UV
        applied after. (B, H, T, d_v)."""
        w_uk, w_uv = self.up_weights()           # (H, d_n, r), (H, d_v, r)
        q_latent = torch.einsum("bhtn,hnr->bhtr",
                                q_nope, w_uk)    # (B, H, T, r)
        q = torch.cat([q_latent, q_pe], dim=-1)  # (B, H, T, r + d_r)
        k = torch.cat([c_kv, k_pe], dim=-1)      # (B, 1, S, r + d_r) all heads
        out_latent = scaled_dot_product_attention(
            q, k, c_kv, mask, scale=self.scale)  # (B, H, T, r) v = c_kv
        return torch.einsum("bhtr,hvr->bhtv",
                            out_latent, w_uv)    # (B, H, T, d_v)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, cache=None,
                layer_idx: int = 0) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); ``mask``, ``positions``, ``cache`` as in
        Attention.forward."""
        seq = x.shape[1]
        q_nope, q_pe = self.queries(x)      # (B, H, T, d_n), (B, H, T, d_r)
        c_kv, k_pe = self.latents(x)        # (B, 1, T, r), (B, 1, T, d_r)
        if self.position_hook is not None:
            if positions is None:
                start = cache.length if cache is not None else 0
                positions = torch.arange(start, start + seq,
                                         device=x.device)  # (T,)
            # only the decoupled part turns
            q_pe, k_pe = self.position_hook(q_pe, k_pe, positions)
        if cache is not None:
            # (B, 1, S, r), (B, 1, S, d_r)
            c_kv, k_pe = cache.update(layer_idx, c_kv, k_pe)
        if mask is None and seq > 1:
            mask = causal_mask(seq, c_kv.shape[-2], device=x.device)  # (T, S)
        form = self.form if self.form != "auto" else (
            "absorbed" if seq == 1 else "naive")
        out = (self.absorbed if form == "absorbed" else self.naive)(
            q_nope, q_pe, c_kv, k_pe, mask)
        return self.o_proj(merge_heads(out))            # (B, T, d)
