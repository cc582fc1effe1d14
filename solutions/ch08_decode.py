"""Chapter 8 exercises: the KV cache, a decode step, greedy generation, nucleus sampling, and the
size of the cache.

Read Chapter 8 ("Prefill and decode") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 8

The course model calls a cache like this during model(input_ids, cache=cache):
    cache.length                      positions already cached (before this call)
    k, v = cache.update(layer, k, v)  once per layer: store the new positions, get all so far
    cache.advance()                   once at the end: the new positions now count as cached
"""

import torch

from llama_course.config import LlamaConfig


class KVCache:
    """Preallocated keys and values, one (batch, n_kv_heads, max_seq_len, head_dim) buffer per layer."""

    def __init__(self, config: LlamaConfig, batch_size: int, max_seq_len: int, device=None, dtype=torch.float32):
        shape = (batch_size, config.n_kv_heads, max_seq_len, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.max_seq_len = max_seq_len
        self.length = 0
        self.pending = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k and v, (batch, n_kv_heads, new, head_dim), right after the ``self.length`` cached
        positions of ``layer``, IN PLACE (no torch.cat of the whole cache); remember ``new`` in
        self.pending; return the keys and values of positions 0 .. length + new - 1.
        Raise ValueError mentioning the capacity (max_seq_len) if they do not fit.
        """
        # BEGIN SOLUTION Exercise 8.1 KVCache.update (Chapter 8, section 8.2 "The KV cache")
        new = k.shape[2]
        end = self.length + new
        if end > self.max_seq_len:
            raise ValueError(f"the cache holds max_seq_len={self.max_seq_len} positions; {end} do not fit")
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v
        self.pending = new
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
        # END SOLUTION

    def advance(self):
        self.length += self.pending
        self.pending = 0


def decode_step(model, token_ids: torch.Tensor, cache) -> torch.Tensor:
    """Feed ``token_ids`` (batch, new) -- a whole prompt (prefill) or one token per row (decode) --
    through ``model`` with ``cache`` and return the logits of the LAST position, (batch, vocab).
    The positions are cache.length, cache.length + 1, ...; the model takes them from the cache."""
    # BEGIN SOLUTION Exercise 8.2 decode_step (Chapter 8, section 8.3 "The decode loop")
    with torch.no_grad():
        return model(token_ids, cache=cache)[:, -1]
    # END SOLUTION


def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding with your KVCache: one prefill, then one decode step per new token, always
    taking the most likely token (argmax; ties: the lowest id). Return the prompt followed by the
    new tokens, (batch, T + n), on input_ids' device.

    Build the cache from ``model.config`` (its n_layers, n_kv_heads and head_dim), for
    input_ids.shape[0] rows and T + max_new_tokens positions, on input_ids' device and in the dtype
    of the model's parameters (a bfloat16 model needs a bfloat16 cache).
    """
    # BEGIN SOLUTION Exercise 8.3 greedy_generate (Chapter 8, section 8.3 "The decode loop")
    dtype = next(model.parameters()).dtype
    cache = KVCache(model.config, input_ids.shape[0], input_ids.shape[1] + max_new_tokens,
                    device=input_ids.device, dtype=dtype)
    out = input_ids
    logits = decode_step(model, input_ids, cache)
    for _ in range(max_new_tokens):
        token = logits.argmax(dim=-1, keepdim=True)
        out = torch.cat([out, token], dim=1)
        logits = decode_step(model, token, cache)
    return out
    # END SOLUTION


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probabilities add up to
    at least ``top_p``; set every other logit to -inf. Always keep the most likely token.

    Precisely: order the tokens by decreasing probability, equal probabilities by increasing token
    id (a stable sort); a token is kept exactly when the total probability of the tokens BEFORE it
    in that order is < top_p. So with top_p = 0.5 and four equally likely tokens, tokens 0 and 1 are
    kept (mass before token 2 is exactly 0.5). logits (..., vocab); return the same shape, dtype and
    device.
    """
    # BEGIN SOLUTION Exercise 8.4 top_p_filter (Chapter 8, section 8.4 "Sampling")
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
    probs = sorted_logits.float().softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs
    remove_sorted = before >= top_p
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))
    # END SOLUTION


def kv_cache_bytes(config: LlamaConfig, seq_len: int = 1, batch_size: int = 1, bytes_per_value: float = 2) -> int:
    """Bytes of the KV cache: keys AND values, every layer, every KV head, for seq_len tokens of
    batch_size sequences, at bytes_per_value bytes per number (2 for fp16/bf16)."""
    # BEGIN SOLUTION Exercise 8.5 kv_cache_bytes (Chapter 8, section 8.5 "What decode costs")
    return int(2 * config.n_layers * config.n_kv_heads * config.head_dim * bytes_per_value * seq_len * batch_size)
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def beam_search(model, input_ids: torch.Tensor, num_beams: int, max_new_tokens: int) -> torch.Tensor:
    """Beam search without end-of-sequence tokens: return, for each row of input_ids (B, T), the
    continuation of max_new_tokens tokens with the highest total log-probability, (B, T + n).

    ``model(ids)`` gives logits (B', T', vocab) for any ids (B', T'); you may run it on the whole
    sequence at every step (no cache needed). A sequence's score is the sum of the float32
    log_softmax of its new tokens. Step 1 keeps the num_beams best first tokens; each later step
    extends every beam by every token and keeps the num_beams best (beam, token) candidates of the
    row. Ties go to the candidate that comes first in (beam index, token id) order, where beams are
    numbered best first. The answer is the best beam after the last step. max_new_tokens = 0
    returns input_ids. ValueError naming num_beams unless 1 <= num_beams <= vocab size.
    With num_beams = 1 this is greedy decoding.

    Example: a "model" whose next-token log-probabilities do not depend on the prefix makes every
    beam pick the same best token each step, so the answer repeats that token n times.
    """
    # BEGIN SOLUTION Homework 8.A beam_search (Chapter 8, beyond section 8.4 "Sampling")
    B, T = input_ids.shape
    with torch.no_grad():
        logits = model(input_ids)[:, -1].float()                                  # (B, V)
        V = logits.shape[-1]
        if not 1 <= num_beams <= V:
            raise ValueError(f"num_beams must be in [1, {V}], got {num_beams}")
        if max_new_tokens == 0:
            return input_ids
        scores, tokens = logits.log_softmax(-1).sort(dim=-1, descending=True, stable=True)
        scores, tokens = scores[:, :num_beams], tokens[:, :num_beams]             # (B, K)
        seqs = torch.cat([input_ids.repeat_interleave(num_beams, 0), tokens.reshape(-1, 1)], dim=1)
        for _ in range(max_new_tokens - 1):
            log_p = model(seqs)[:, -1].float().log_softmax(-1).view(B, num_beams, V)   # (B, K, V)
            total = (scores[:, :, None] + log_p).view(B, num_beams * V)               # (B, K*V)
            scores, flat = total.sort(dim=-1, descending=True, stable=True)
            scores, flat = scores[:, :num_beams], flat[:, :num_beams]                 # (B, K)
            beam, token = flat // V, flat % V
            rows = (torch.arange(B, device=seqs.device)[:, None] * num_beams + beam).reshape(-1)
            seqs = torch.cat([seqs[rows], token.reshape(-1, 1)], dim=1)               # (B*K, T')
    return seqs.view(B, num_beams, -1)[:, 0]                                          # the best beam
    # END SOLUTION


def speculative_accept(draft_probs: torch.Tensor, target_probs: torch.Tensor, draft_tokens: torch.Tensor,
                       generator: torch.Generator) -> list:
    """The acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

    A small draft model proposed n tokens draft_tokens (n,), drawn from draft_probs (n, V) (row i
    is the draft's distribution for token i); the big model scored the same positions and one more,
    target_probs (n + 1, V). Walk through the draft tokens in order; for token x_i draw
    u = torch.rand((), generator=generator) and ACCEPT it if u <= p_target(x_i) / p_draft(x_i)
    (row i). At the first rejection, draw the replacement from the residual distribution
    max(0, target_probs[i] - draft_probs[i]) renormalised, with
    torch.multinomial(residual, 1, generator=generator), and stop. If all n are accepted, draw a
    bonus token from target_probs[n] the same way. Return the accepted tokens followed by the
    replacement or bonus token, as a list of Python ints (length 1 .. n + 1). The random draws must
    happen in exactly this order (the grader replays them). Every output token is then distributed
    exactly as the big model alone would have sampled it. Probabilities are float32 or float64 on
    any device; ValueError naming target_probs if its shape is not (n + 1, V).

    Example: when draft_probs equals target_probs[:n] every ratio is 1, so all n tokens are
    accepted and one bonus token follows (n + 1 tokens).
    """
    # BEGIN SOLUTION Homework 8.B speculative_accept (Chapter 8, beyond section 8.4 "Sampling")
    n, V = draft_probs.shape
    if tuple(target_probs.shape) != (n + 1, V):
        raise ValueError(f"target_probs must have shape ({n + 1}, {V}), got {tuple(target_probs.shape)}")
    out = []
    for i in range(n):
        x = int(draft_tokens[i])
        u = torch.rand((), generator=generator).item()
        if u <= (target_probs[i, x] / draft_probs[i, x]).item():
            out.append(x)
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp(min=0)                   # (V,)
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(target_probs[n], 1, generator=generator)))
    return out
    # END SOLUTION


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Min-p filtering (Nguyen et al. 2024): keep every token whose probability is at least
    min_p times the probability of the most likely token of its row; set the other logits to -inf.

    logits (..., vocab) of any float dtype; probabilities from a float32 softmax. A token exactly
    at the threshold is kept, so the most likely token (and every token tied with it) is always
    kept. Return logits' shape, dtype and device. ValueError naming min_p unless 0 <= min_p <= 1.

    Example: probabilities (0.5, 0.3, 0.15, 0.05) with min_p = 0.2 keep the first three
    (threshold 0.1).
    """
    # BEGIN SOLUTION Homework 8.C min_p_filter (Chapter 8, beyond section 8.4 "Sampling")
    if not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    probs = logits.float().softmax(dim=-1)                                  # (..., V)
    threshold = min_p * probs.amax(dim=-1, keepdim=True)                    # (..., 1)
    return logits.masked_fill(probs < threshold, float("-inf"))
    # END SOLUTION
