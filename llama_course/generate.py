"""Generation with a KV cache (Chapter 8): one prefill, then one decode step per new token.

    prefill   model(prompt, cache)          -> logits of the last position; the cache holds the prompt
    decode    model(token, cache)           -> the next logits; position = number of cached tokens

Sampling: temperature 0 is greedy (argmax). Otherwise logits / temperature, keep the top_k
largest and/or the smallest set of tokens whose probabilities sum to at least top_p (the
nucleus), renormalise, and draw with ``generator``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .kv_cache import KVCache


def _check_temperature(temperature) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")


def _check_top_k(top_k) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")


def _check_top_p(top_p) -> None:
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Set every logit below the k-th largest of its row to -inf. logits (..., V)."""
    _check_top_k(top_k)
    k = min(top_k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]                     # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probabilities sum to >= top_p (the nucleus);
    set the other logits to -inf. The most likely token is always kept. logits (..., V)."""
    _check_top_p(top_p)
    sorted_logits, order = logits.sort(dim=-1, descending=True)         # (..., V)
    probs = sorted_logits.float().softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs                          # probability of the better tokens
    drop_sorted = mass_before >= top_p                                  # already enough mass before it
    drop = drop_sorted.scatter(-1, order, drop_sorted)                  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row from logits (B, V): argmax at temperature 0, else a filtered draw. Returns (B,)."""
    _check_temperature(temperature)
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(dim=-1)                                      # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _check(input_ids, max_new_tokens, temperature, top_k, top_p, config):
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a (batch, seq) tensor, got "
                         f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is an empty prompt: give at least one token (e.g. BOS)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    _check_temperature(temperature)
    if top_k is not None:
        _check_top_k(top_k)
    if top_p is not None:
        _check_top_p(top_p)
    total = input_ids.shape[1] + max_new_tokens
    if total > config.max_seq_len:
        raise ValueError(f"prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) = {total} "
                         f"exceeds the model's max_seq_len ({config.max_seq_len})")


@torch.no_grad()
def stream_generate(model, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
                    top_k: int | None = None, top_p: float | None = None, eos_token_id: int | None = None,
                    attention_mask: torch.Tensor | None = None,
                    generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """Yield the next token of every row, (B,), as soon as it is chosen.

    A row that has produced ``eos_token_id`` keeps yielding it; the stream ends after
    ``max_new_tokens`` steps or when every row has finished.
    """
    config = model.config
    _check(input_ids, max_new_tokens, temperature, top_k, top_p, config)
    if max_new_tokens == 0:
        return
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    dtype = next(model.parameters()).dtype
    cache = KVCache(config, batch, prompt_len + max_new_tokens, device=device, dtype=dtype)
    logits = model(input_ids, cache=cache, attention_mask=attention_mask)[:, -1]  # prefill: (B, V)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        token = sample_next(logits, temperature, top_k, top_p, generator)        # (B,)
        if eos_token_id is not None:
            token = torch.where(finished, torch.full_like(token, eos_token_id), token)
            finished |= token == eos_token_id
        yield token
        if step == max_new_tokens - 1 or (eos_token_id is not None and bool(finished.all())):
            return
        if attention_mask is not None:   # padded rows: the new token is real, extend the mask
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        logits = model(token[:, None], cache=cache, attention_mask=attention_mask)[:, -1]  # decode: (B, V)


def generate(model, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, eos_token_id: int | None = None,
             attention_mask: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """The prompt followed by up to ``max_new_tokens`` new tokens per row, (B, T + n).

    Greedy at temperature 0. Rows that finished early are filled with ``eos_token_id``.
    ``generator`` makes sampling reproducible (it must live on the model's device).
    """
    new = list(stream_generate(model, input_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id,
                               attention_mask, generator))
    if not new:
        return input_ids.clone()
    return torch.cat([input_ids, torch.stack(new, dim=1)], dim=1)
