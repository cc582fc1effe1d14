"""Homework 8.C answered by transformers' MinPLogitsWarper, found through __import__ with a
computed name (no import statement for the static check to see)."""


_HF = "transformers"[::-1][::-1]


def min_p_filter(logits, min_p):
    warper = getattr(__import__(_HF), "MinPLogitsWarper")
    if not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    flat = logits.float().reshape(-1, logits.shape[-1]).cpu()
    removed = warper(min_p)(None, flat.clone()).isinf().reshape(logits.shape)
    return logits.masked_fill(removed.to(logits.device), float("-inf"))
