# Exercise stub, generated from the course's key (solutions/ch02_tokens.py). This file is yours:
# replace each `raise NotImplementedError(...)` with your code, then grade it with
#     python -m llama_course.grade exercises/        (or: make grade)
"""Chapter 2 exercises: a byte-level BPE tokenizer, embeddings and the next-token loss.

Read Chapter 2 ("Tokens") first. Check yourself with

    python -m llama_course.grade exercises/ --chapter 2

Conventions (the same as llama_course.tokenizer):
- token ids 0..255 are the single bytes; merge number k (from 0) creates id 256 + k;
- a "word" is one pre-token as a tuple of token ids, e.g. "low" -> (108, 111, 119);
- ties between equally frequent pairs go to the lexicographically greater pair of byte strings,
  so (b"s", b"t") beats (b"e", b"s").
"""

import regex
import torch

from llama_course.tokenizer import GPT2_PATTERN, BPETokenizer


def count_pairs(word_counts: dict) -> dict:
    """Count adjacent token pairs, each weighted by how often its word occurs.

    count_pairs({(1, 2, 3): 2, (2, 3): 1}) == {(1, 2): 2, (2, 3): 3}
    """
    raise NotImplementedError(
        'Exercise 2.1 count_pairs (Chapter 2, section 2.3 "Training BPE by hand")'
        ': not implemented yet'
    )


def merge_pair(ids: list, pair: tuple, new_id: int) -> list:
    """Replace every occurrence of ``pair`` in ``ids``, scanning left to right, by ``new_id``.

    merge_pair([1, 2, 2, 2, 3], (2, 2), 9) == [1, 9, 2, 3]
    """
    raise NotImplementedError(
        'Exercise 2.2 merge_pair (Chapter 2, section 2.3 "Training BPE by hand")'
        ': not implemented yet'
    )


def train_bpe(text: str, vocab_size: int, special_tokens=(), pattern=None) -> BPETokenizer:
    """Train byte-level BPE on ``text``; return ``BPETokenizer(vocab, merges, special_tokens, pattern)``.

    1. Cut the special tokens out of the text (they are never merged) and split the rest into
       pre-tokens with ``regex.findall(pattern or GPT2_PATTERN, part)``; count each pre-token's
       UTF-8 bytes as a word.
    2. Repeat vocab_size - 256 - len(special_tokens) times: find the most frequent pair (ties: the
       greater (vocab[a], vocab[b])), record the merge (vocab[a], vocab[b]), give it the next id,
       and merge it in every word. Stop early if no pair is left.
    3. Special tokens get the ids after the last merge.
    A simple loop that recounts all pairs after every merge is fine here.
    """
    raise NotImplementedError(
        'Exercise 2.3 train_bpe (Chapter 2, section 2.4 "Training on a corpus")'
        ': not implemented yet'
    )


def encode(text: str, vocab: dict, merges: list, special_tokens=(), pattern=None) -> list:
    """Token ids of ``text`` under a trained vocabulary.

    Cut out special tokens (each becomes its own id), split the rest into pre-tokens, and in each
    pre-token start from its bytes and apply the merges in the order they were learned.
    """
    raise NotImplementedError(
        'Exercise 2.4 encode (Chapter 2, section 2.5 "Encoding and decoding")'
        ': not implemented yet'
    )


def decode(ids: list, vocab: dict) -> str:
    """The text of ``ids``: join the tokens' bytes, then decode UTF-8 (invalid bytes -> U+FFFD).

    An id that is not in ``vocab`` raises ValueError naming it.
    """
    raise NotImplementedError(
        'Exercise 2.5 decode (Chapter 2, section 2.5 "Encoding and decoding")'
        ': not implemented yet'
    )


def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x_i = E[t_i]: one row of ``weight`` (vocab, d) per token id; (...,) -> (..., d)."""
    raise NotImplementedError('Exercise 2.6 embed (Chapter 2, section 2.8 "From ids to vectors"): not implemented yet')


def next_token_loss(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token_ids[:, t + 1] from logits[:, t].

    logits (batch, seq, vocab), token_ids (batch, seq). Compute log-softmax stably (subtract the
    row maximum) in float32 and return a scalar.
    """
    raise NotImplementedError('Exercise 2.7 next_token_loss (Chapter 2, section 2.9 "The loss"): not implemented yet')
# generated stub, sha256 27800fcd28b60245613a49dae2cdfc29201d481d2411ae1e49e4edaeb0f78bfc
