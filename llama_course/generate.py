"""Generation with a KV cache (Chapter 8): one prefill, then one decode step per new token.

    prefill   model(prompt, cache)          -> logits of the last position; the cache holds the prompt
    decode    model(token, cache)           -> the next logits; position = number of cached tokens

NaN logits (e.g. float16 overflow) raise FloatingPointError: argmax would silently pick a NaN's
index, so whether a step saw NaN is kept on the device and read once, when the stream ends (one
wait for the device per call, none per step).

Sampling: temperature 0 is greedy (argmax). Otherwise logits / temperature (at least float32), keep the top_k
largest and/or the smallest set of tokens whose probabilities sum to at least top_p (the
nucleus), renormalise, and draw with ``generator``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from .attention import check_attention_mask, check_attention_mask_values
from .checks import (
    check_int,
    check_number,
    check_positive_int,
    check_token_ids,
)
from .kv_cache import KVCache, cache_config

if TYPE_CHECKING:  # model.py does not import this module; the hint alone needs the class
    from .model import Llama


def _check_sampling(temperature, top_k, top_p) -> None:
    check_number("temperature", temperature, low=0)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None:
        check_number("top_p", top_p, 0, 1, low_open=True)


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Set every logit below the k-th largest of its row to -inf. logits (..., V)."""
    check_positive_int("top_k", top_k)
    k = min(top_k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]                     # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probabilities sum
    to >= top_p (the nucleus); set the other logits to -inf. The most likely
    token is always kept. logits (..., V)."""
    check_number("top_p", top_p, 0, 1, low_open=True)
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
    wide = torch.promote_types(logits.dtype, torch.float32)
    probs = sorted_logits.to(wide).softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # mass of the better tokens
    drop_sorted = mass_before >= top_p          # enough mass before it
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row from logits (B, V): argmax at temperature 0, else a filtered draw. Returns (B,).

    The logits are shifted so that their maximum is 0 before the division by the temperature (at
    least float32), so that even a tiny temperature cannot overflow: it tends to argmax."""
    _check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (B, V) at least float32
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (B, V) <= 0: no overflow
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(dim=-1)                                      # (B, V)
    try:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    except RuntimeError:
        check_no_nan(probs.isnan().any())                               # say why, if NaN is the reason
        raise


def _check_generate(model: Llama, input_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id,
                    attention_mask) -> None:
    config = model.config
    check_token_ids("input_ids", input_ids, config.vocab_size)
    if input_ids.dim() != 2 or 0 in input_ids.shape:
        raise ValueError(f"input_ids must be a (batch, seq) prompt with batch, seq >= 1: an empty prompt needs at "
                         f"least one token (e.g. BOS); got shape {tuple(input_ids.shape)}")
    fed = input_ids.shape[1] + max(check_int("max_new_tokens", max_new_tokens, low=0) - 1, 0)  # the last: never fed
    if fed > config.max_seq_len:
        raise ValueError(f"prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) - 1 = {fed} positions "
                         f"go through the model, more than its max_seq_len ({config.max_seq_len})")
    _check_sampling(temperature, top_k, top_p)
    if eos_token_id is not None:
        check_int("eos_token_id", eos_token_id, 0, config.vocab_size - 1)
    if attention_mask is not None:
        check_attention_mask(attention_mask)
        check_attention_mask_values(attention_mask)
        _check_no_empty_row(attention_mask)
        if attention_mask.device.type != "meta" and bool((attention_mask[:, 1:] < attention_mask[:, :-1]).any()
                                                         | (attention_mask[:, -1] == 0).any()):
            raise ValueError("attention_mask has right padding (a 0 after a 1, or a row ending in 0): generation "
                             "continues from each row's last token, so pad prompts on the left")


def _check_no_empty_row(attention_mask: torch.Tensor) -> None:
    """ValueError naming the rows of attention_mask (B, T) that hold no real token at all."""
    if attention_mask.device.type != "meta" and bool((attention_mask == 0).all(dim=1).any()):
        rows = (attention_mask == 0).all(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"attention_mask rows {rows} are all padding: every prompt needs at least one real token")


def check_no_nan(seen: torch.Tensor) -> None:
    """FloatingPointError if ``seen`` (a bool tensor: were there NaN logits?) is true."""
    if bool(seen):
        raise FloatingPointError("the model produced NaN logits, so the tokens chosen from them mean nothing: "
                                 "check the weights and the dtype (float16 overflows where bfloat16 does not)")


@torch.no_grad()
def stream_generate(model: Llama, input_ids: torch.Tensor,
                    max_new_tokens: int, temperature: float = 0.0,
                    top_k: int | None = None, top_p: float | None = None,
                    eos_token_id: int | None = None,
                    attention_mask: torch.Tensor | None = None,
                    generator: torch.Generator | None = None,
                    ) -> Iterator[torch.Tensor]:
    """Yield the next token of every row, (B,), as soon as it is chosen.

    A row that has produced ``eos_token_id`` keeps yielding it; the stream
    ends after ``max_new_tokens`` steps or when every row has finished. NaN
    logits raise FloatingPointError when the stream ends (sampling raises at
    once): whether any step saw one is gathered on the device and read once,
    not every step, so the tokens before the error were already yielded.
    """
    _check_generate(model, input_ids, max_new_tokens, temperature, top_k,
                    top_p, eos_token_id, attention_mask)
    if max_new_tokens == 0:
        return
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    dtype = next(model.parameters()).dtype
    cache = KVCache(cache_config(model), batch,
                    prompt_len + max_new_tokens - 1, device=device,
                    dtype=dtype)
    logits = model(input_ids, cache=cache,
                   attention_mask=attention_mask)[:, -1]   # prefill: (B, V)
    nan_seen = logits.isnan().any()   # on the device: read once, at the end
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        token = sample_next(logits, temperature, top_k, top_p,
                            generator)                         # (B,)
        if eos_token_id is not None:
            eos = torch.full_like(token, eos_token_id)
            token = torch.where(finished, eos, token)
            finished |= token == eos_token_id
        yield token
        if step == max_new_tokens - 1 or (eos_token_id is not None
                                          and bool(finished.all())):
            check_no_nan(nan_seen)  # argmax would pick a NaN's index
            return
        if attention_mask is not None:   # padded rows: the new token is real
            one = torch.ones_like(attention_mask[:, :1])
            attention_mask = torch.cat([attention_mask, one], dim=1)
        # decode: the model's own token, in the vocabulary by construction:
        # no value check (a GPU wait)
        logits = model(token[:, None], cache=cache,
                       attention_mask=attention_mask,
                       check_values=False)[:, -1]
        nan_seen |= logits.isnan().any()


def generate(model: Llama, input_ids: torch.Tensor, max_new_tokens: int,
             temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, eos_token_id: int | None = None,
             attention_mask: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """The prompt followed by up to ``max_new_tokens`` new tokens per row,
    (B, T + n).

    Greedy at temperature 0. Rows that finished early are filled with
    ``eos_token_id``. NaN logits at any step raise FloatingPointError
    (checked once, at the end). ``generator`` makes sampling reproducible
    (it must live on the model's device).
    """
    new = list(stream_generate(model, input_ids, max_new_tokens,
                               temperature, top_k, top_p, eos_token_id,
                               attention_mask, generator))
    if not new:
        return input_ids.clone()
    return torch.cat([input_ids, torch.stack(new, dim=1)], dim=1)
