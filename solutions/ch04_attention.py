"""Chapter 4 exercises: softmax, masks, scaled dot-product attention and multi-head attention.

Read Chapter 4 ("Attention") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 4

Masks are boolean and True means "may attend". Create every tensor on the device of the inputs.
"""

import math

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``: exp(x - max) / sum(exp(x - max)).

    Must not overflow for inputs of magnitude 1e4, and a row that is entirely -inf must give
    zeros (not NaN). Return x's dtype.
    """
    # BEGIN SOLUTION Exercise 4.1 softmax (Chapter 4, section 4.3 "Softmax")
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)
    # END SOLUTION


def causal_mask(q_len: int, kv_len: int | None = None, device=None) -> torch.Tensor:
    """Boolean (q_len, kv_len) mask: True where query i may attend to key j.

    kv_len defaults to q_len. When kv_len > q_len, the queries are the LAST q_len positions:
    query i sits at position kv_len - q_len + i and may see keys 0 .. kv_len - q_len + i.
    """
    # BEGIN SOLUTION Exercise 4.2 causal_mask (Chapter 4, section 4.4 "The causal mask")
    kv_len = q_len if kv_len is None else kv_len
    query_pos = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
    key_pos = torch.arange(kv_len, device=device)[None, :]
    return key_pos <= query_pos
    # END SOLUTION


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) with masked scores set to -inf) v.

    q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v); works for 3-D and 4-D inputs. ``mask`` is
    boolean and broadcasts to (..., L_q, L_k). A query whose keys are all masked returns zeros.
    Return (..., L_q, d_v) in q's dtype (run the softmax in float32 for half-precision inputs).
    """
    # BEGIN SOLUTION Exercise 4.3 scaled_dot_product_attention (Chapter 4, section 4.2 "Scaled dot-product attention")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return softmax(scores.float(), dim=-1).to(q.dtype) @ v
    # END SOLUTION


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D / H). Head h gets features h*D/H ... (h+1)*D/H - 1."""
    # BEGIN SOLUTION Exercise 4.4 split_heads (Chapter 4, section 4.6 "Multi-head attention")
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)
    # END SOLUTION


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D / H) -> (B, T, D), the inverse of split_heads."""
    # BEGIN SOLUTION Exercise 4.5 merge_heads (Chapter 4, section 4.6 "Multi-head attention")
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)
    # END SOLUTION


def multi_head_attention(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                         w_o: torch.Tensor, n_heads: int, mask: torch.Tensor = None) -> torch.Tensor:
    """Multi-head self-attention from weight matrices (nn.Linear layout, no biases).

    x (B, T, D); w_q, w_k, w_v, w_o (D, D), applied as x @ w.T. Project, split into n_heads, attend
    with ``mask`` (boolean, True = may attend, broadcastable to (B, H, T, T); None means causal),
    merge, and apply w_o. Returns (B, T, D) in x's dtype.
    """
    # BEGIN SOLUTION Exercise 4.6 multi_head_attention (Chapter 4, section 4.6 "Multi-head attention")
    q = split_heads(x @ w_q.T, n_heads)
    k = split_heads(x @ w_k.T, n_heads)
    v = split_heads(x @ w_v.T, n_heads)
    if mask is None:
        mask = causal_mask(x.shape[1], device=x.device)
    return merge_heads(scaled_dot_product_attention(q, k, v, mask)) @ w_o.T
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def alibi_bias(n_heads: int, q_len: int, kv_len: int | None = None, device=None, dtype=torch.float32) -> torch.Tensor:
    """ALiBi (Press et al. 2022): the (n_heads, q_len, kv_len) bias added to the attention scores
    instead of position embeddings, bias[h, i, j] = m_h * (j - pos_i), where pos_i = kv_len - q_len + i
    is the position of query i (as in causal_mask; kv_len defaults to q_len). It is <= 0 on the
    keys a causal query may see; do not mask the future here (the caller's causal mask does).

    The slopes m_h: for n heads with n a power of two, m_h = 2^(-8 (h + 1) / n), h = 0 .. n - 1.
    Otherwise let c be the largest power of two below n_heads: the first c slopes are those of c
    heads, and the remaining n_heads - c are taken from the slopes of 2c heads at even indices
    (0, 2, 4, ...), in that order. Return ``dtype`` on ``device``. n_heads < 1 -> ValueError
    naming n_heads.

    Examples: 8 heads: slopes 1/2, 1/4, ..., 1/256. 6 heads: 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8.
    alibi_bias(1, 3)[0] == [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]] * 2^-8.
    """
    # BEGIN SOLUTION Homework 4.A alibi_bias (Chapter 4, beyond section 4.4 "The causal mask")
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")
    kv_len = q_len if kv_len is None else kv_len

    def power_of_two_slopes(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    c = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two_slopes(c) + power_of_two_slopes(2 * c)[0::2][:n_heads - c]
    m = torch.tensor(slopes, device=device, dtype=torch.float64)                      # (H,)
    query_pos = torch.arange(kv_len - q_len, kv_len, device=device, dtype=torch.float64)
    key_pos = torch.arange(kv_len, device=device, dtype=torch.float64)
    distance = key_pos[None, :] - query_pos[:, None]                                  # (q_len, kv_len)
    return (m[:, None, None] * distance).to(dtype)                                    # (H, q_len, kv_len)
    # END SOLUTION


def prefix_lm_mask(prefix_lens: torch.Tensor, lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The boolean (batch, seq_len, seq_len) mask of a prefix language model (T5's "prefix LM",
    UniLM, PaLI): True where query i of row b may attend to key j.

    Row b holds lengths[b] real tokens followed by right padding; its first prefix_lens[b] tokens
    are the prefix. A real query i may attend to a real key j when j < prefix_lens[b]
    (the prefix is bidirectional, and every later token sees all of it) or j <= i (causal). Padding
    keys (j >= lengths[b]) are never attended, and padding query rows (i >= lengths[b]) are all False.
    prefix_lens, lengths: integer tensors (batch,). Create the mask on prefix_lens' device.
    ValueError naming the argument unless 0 <= prefix_lens <= lengths <= seq_len.

    Example: prefix_lm_mask(tensor([2]), tensor([4]), 4)[0] ==
        [[T, T, F, F],
         [T, T, F, F],
         [T, T, T, F],
         [T, T, T, T]]
    """
    # BEGIN SOLUTION Homework 4.B prefix_lm_mask (Chapter 4, beyond section 4.4 "The causal mask")
    if not bool(((prefix_lens >= 0) & (prefix_lens <= lengths)).all()):
        raise ValueError(f"prefix_lens must be in [0, lengths], got {prefix_lens.tolist()}")
    if not bool((lengths <= seq_len).all()):
        raise ValueError(f"lengths must be <= seq_len={seq_len}, got {lengths.tolist()}")
    device = prefix_lens.device
    i = torch.arange(seq_len, device=device)[None, :, None]                    # (1, T, 1) queries
    j = torch.arange(seq_len, device=device)[None, None, :]                    # (1, 1, T) keys
    prefix = prefix_lens.to(device)[:, None, None]                             # (B, 1, 1)
    length = lengths.to(device)[:, None, None]                                 # (B, 1, 1)
    allowed = (j < prefix) | (j <= i)                                          # (B, T, T)
    return allowed & (j < length) & (i < length)
    # END SOLUTION
