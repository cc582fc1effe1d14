"""Chapter 12 exercises: sliding windows, latent attention and DeepSeek's routing.

Read Chapter 12 ("After LLaMA") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 12
"""

import torch


def banded_mask(q_len: int, window: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """The boolean (q_len, kv_len) mask of sliding-window attention, True where query i may attend
    to key j. As in causal_mask, the queries are the LAST q_len of kv_len positions (kv_len defaults
    to q_len), so query i sits at position p = kv_len - q_len + i and sees keys p - window < j <= p.
    Create it on ``device``. ValueError naming window unless window >= 1."""
    # BEGIN SOLUTION Exercise 12.1 banded_mask (Chapter 12, section 12.2 "Sliding windows")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    kv_len = q_len if kv_len is None else kv_len
    query = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]   # (q_len, 1) positions
    key = torch.arange(kv_len, device=device)[None, :]                      # (1, kv_len)
    return (key <= query) & (key > query - window)
    # END SOLUTION


def mla_absorbed_attention(q_nope: torch.Tensor, q_pe: torch.Tensor, c_kv: torch.Tensor, k_pe: torch.Tensor,
                           w_uk: torch.Tensor, w_uv: torch.Tensor, scale: float, mask: torch.Tensor = None):
    """Multi-head Latent Attention in its absorbed form, never building a per-head key or value.

    q_nope (B, H, T, d_n) and q_pe (B, H, T, d_r): the queries (q_pe already rotated);
    c_kv (B, S, r): the cached latents; k_pe (B, S, d_r): the cached rotated key shared by all heads;
    w_uk (H, d_n, r) and w_uv (H, d_v, r): each head's up-projections (k_nope = w_uk c, v = w_uv c).
    score = (q_nope . (w_uk c) + q_pe . k_pe) * scale, masked (True = may attend; broadcast to
    (B, H, T, S)), softmax over the keys, then the weighted values. Fold w_uk into the query and apply
    w_uv after summing the latents. Return (B, H, T, d_v)."""
    # BEGIN SOLUTION Exercise 12.2 mla_absorbed_attention (Chapter 12, section 12.3 "Latent attention")
    q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)                    # (B, H, T, r)
    scores = q_latent @ c_kv[:, None].transpose(-2, -1)                        # (B, H, T, S)
    scores = (scores + q_pe @ k_pe[:, None].transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q_nope.dtype)
    out_latent = weights @ c_kv[:, None]                                       # (B, H, T, r)
    return torch.einsum("bhtr,hvr->bhtv", out_latent, w_uv)                    # (B, H, T, d_v)
    # END SOLUTION


def group_limited_topk(scores: torch.Tensor, top_k: int, n_group: int, topk_group: int) -> torch.Tensor:
    """DeepSeek-V3's group-limited routing. scores (N, E): the E experts form n_group equal groups
    of consecutive experts; a group's score is the sum of its two largest scores (of its only score
    if a group has one expert). Keep the topk_group best groups of each token and return the indices
    (N, top_k) of the top_k best experts among the kept groups' experts (any order)."""
    # BEGIN SOLUTION Exercise 12.3 group_limited_topk (Chapter 12, section 12.4 "DeepSeekMoE")
    n, n_experts = scores.shape
    grouped = scores.view(n, n_group, n_experts // n_group)
    group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)   # (N, G)
    keep = torch.zeros_like(group_score, dtype=torch.bool)
    keep.scatter_(1, group_score.topk(topk_group, dim=-1).indices, True)
    keep = keep[:, :, None].expand_as(grouped).reshape(n, n_experts)
    return scores.masked_fill(~keep, float("-inf")).topk(top_k, dim=-1).indices
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def attention_sink_mask(q_len: int, window: int, n_sink: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """StreamingLLM's mask (Xiao et al. 2024, "attention sinks"): a sliding window that also keeps
    the first n_sink positions of the text visible to every later query.

    (q_len, kv_len) boolean, True where query i may attend to key j; the queries are the last q_len
    of kv_len positions (kv_len defaults to q_len), query i at position p = kv_len - q_len + i. Query
    p sees key j when j <= p and (p - window < j or j < n_sink). Never a key after the query.
    Create it on ``device``. ValueError naming window unless window >= 1, naming n_sink unless n_sink >= 0.

    Example: attention_sink_mask(5, 2, 1) ==
        [[T, F, F, F, F],
         [T, T, F, F, F],
         [T, T, T, F, F],
         [T, F, T, T, F],
         [T, F, F, T, T]]
    """
    # BEGIN SOLUTION Homework 12.A attention_sink_mask (Chapter 12, beyond section 12.2 "Sliding windows")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if n_sink < 0:
        raise ValueError(f"n_sink must be >= 0, got {n_sink}")
    kv_len = q_len if kv_len is None else kv_len
    query = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
    key = torch.arange(kv_len, device=device)[None, :]
    return (key <= query) & ((key > query - window) | (key < n_sink))
    # END SOLUTION


def sequence_balance_loss(scores: torch.Tensor, experts: torch.Tensor, n_experts: int, alpha: float) -> torch.Tensor:
    """DeepSeek-V3's complementary sequence-wise balance loss (DeepSeek-AI 2024, eqs. 17-20) for ONE
    sequence of T tokens.

    scores (T, E): the router's affinities s_{i,t} (e.g. sigmoid outputs, > 0); experts (T, K): the
    K experts each token was routed to. With N_r = n_experts,

        f_i      = N_r / (K T) * (number of tokens t whose K experts include i)
        s'_{i,t} = s_{i,t} / sum_j s_{j,t}                 (each token's scores normalised to sum 1)
        P_i      = (1 / T) * sum_t s'_{i,t}
        loss     = alpha * sum_i f_i P_i

    The indicator counts the experts each token was actually routed to, as given in ``experts`` (in
    V3 the biased, group-limited choice). Eq. 18 as printed writes 1(s_{i,t} in TopK({s_{j,t}}, K)),
    the top K of the unbiased scores; the two differ whenever the bias or the group limit changes a
    token's choice. Use ``experts``.

    Return a 0-dim float32 tensor (differentiable in scores). A perfectly even routing with
    uniform scores gives exactly alpha.

    Example: scores = [[1, 1, 2], [2, 1, 1]] (T = 2, E = 3), experts = [[2], [0]] (K = 1), alpha = 1:
    f = (1.5, 0, 1.5), P = (0.375, 0.25, 0.375), loss = 1.125.
    """
    # BEGIN SOLUTION Homework 12.B sequence_balance_loss (Chapter 12, beyond section 12.4 "DeepSeekMoE")
    T, K = experts.shape
    counts = torch.zeros(n_experts, device=scores.device, dtype=torch.float32)
    counts = counts.scatter_add(0, experts.reshape(-1), torch.ones(T * K, device=scores.device))
    f = n_experts / (K * T) * counts                                            # (E,)
    s = scores.float()
    p = (s / s.sum(dim=-1, keepdim=True)).mean(dim=0)                           # (E,)
    return alpha * (f * p).sum()
    # END SOLUTION
