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
    # BEGIN SOLUTION Exercise 2.1 count_pairs (Chapter 2, section 2.3 "Training BPE by hand")
    counts = {}
    for word, n in word_counts.items():
        for pair in zip(word, word[1:]):
            counts[pair] = counts.get(pair, 0) + n
    return counts
    # END SOLUTION


def merge_pair(ids: list, pair: tuple, new_id: int) -> list:
    """Replace every occurrence of ``pair`` in ``ids``, scanning left to right, by ``new_id``.

    merge_pair([1, 2, 2, 2, 3], (2, 2), 9) == [1, 9, 2, 3]
    """
    # BEGIN SOLUTION Exercise 2.2 merge_pair (Chapter 2, section 2.3 "Training BPE by hand")
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
    # END SOLUTION


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
    # BEGIN SOLUTION Exercise 2.3 train_bpe (Chapter 2, section 2.4 "Training on a corpus")
    pattern = pattern or GPT2_PATTERN
    parts = [text]
    if special_tokens:
        splitter = "|".join(regex.escape(t) for t in sorted(special_tokens, key=len, reverse=True))
        parts = regex.split(splitter, text)
    words = {}
    for part in parts:
        for piece in regex.findall(pattern, part):
            word = tuple(piece.encode("utf-8"))
            words[word] = words.get(word, 0) + 1
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        counts = count_pairs(words)
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        merges.append((vocab[best[0]], vocab[best[1]]))
        merged = {}
        for word, n in words.items():
            key = tuple(merge_pair(list(word), best, new_id))
            merged[key] = merged.get(key, 0) + n
        words = merged
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    return BPETokenizer(vocab, merges, special_tokens, pattern)
    # END SOLUTION


def encode(text: str, vocab: dict, merges: list, special_tokens=(), pattern=None) -> list:
    """Token ids of ``text`` under a trained vocabulary.

    vocab {id: bytes} and merges [(bytes, bytes), ...] as train_bpe returns them (tokenizer.vocab,
    tokenizer.merges). special_tokens is a list or tuple of str; wherever one occurs in the text it
    becomes ONE id, the id whose bytes in ``vocab`` are its UTF-8 encoding (train_bpe put those
    ids after the merges); the longest special token wins where two overlap. Split the rest into
    pre-tokens with ``regex.findall(pattern or GPT2_PATTERN, part)``, and in each pre-token start
    from its bytes and apply the merges in the order they were learned (lowest merge number first).
    """
    # BEGIN SOLUTION Exercise 2.4 encode (Chapter 2, section 2.5 "Encoding and decoding")
    pattern = pattern or GPT2_PATTERN
    id_of = {token: i for i, token in vocab.items()}
    rank = {pair: k for k, pair in enumerate(merges)}
    parts = [text]
    if special_tokens:
        splitter = "|".join(regex.escape(t) for t in sorted(special_tokens, key=len, reverse=True))
        parts = regex.split(f"({splitter})", text)
    ids = []
    for part in parts:
        if part in special_tokens:
            ids.append(id_of[part.encode("utf-8")])
            continue
        for piece in regex.findall(pattern, part):
            tokens = [bytes([b]) for b in piece.encode("utf-8")]
            while len(tokens) > 1:
                pairs = [(rank.get(p, len(rank)), i) for i, p in enumerate(zip(tokens, tokens[1:]))]
                best_rank, _ = min(pairs)
                if best_rank == len(rank):
                    break
                a, b = merges[best_rank]
                out, i = [], 0
                while i < len(tokens):
                    if i + 1 < len(tokens) and tokens[i] == a and tokens[i + 1] == b:
                        out.append(a + b)
                        i += 2
                    else:
                        out.append(tokens[i])
                        i += 1
                tokens = out
            ids.extend(id_of[t] for t in tokens)
    return ids
    # END SOLUTION


def decode(ids: list, vocab: dict) -> str:
    """The text of ``ids``: join the tokens' bytes, then decode UTF-8 (invalid bytes -> U+FFFD).

    An id that is not in ``vocab`` raises ValueError naming it.
    """
    # BEGIN SOLUTION Exercise 2.5 decode (Chapter 2, section 2.5 "Encoding and decoding")
    for i in ids:
        if i not in vocab:
            raise ValueError(f"token id {i} is not in the vocabulary")
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    # END SOLUTION


def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x_i = E[t_i]: one row of ``weight`` (vocab, d) per token id; (...,) -> (..., d), in weight's
    dtype and device.

    An id outside [0, vocab) raises ValueError naming token_ids (a negative id must NOT silently
    pick a row from the end, as Python indexing would).
    """
    # BEGIN SOLUTION Exercise 2.6 embed (Chapter 2, section 2.8 "From ids to vectors")
    bad = token_ids[(token_ids < 0) | (token_ids >= weight.shape[0])]
    if bad.numel():
        raise ValueError(f"token_ids must be in [0, {weight.shape[0]}), got {int(bad[0])}")
    return weight[token_ids]
    # END SOLUTION


def next_token_loss(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token_ids[:, t + 1] from logits[:, t].

    logits (batch, seq, vocab) of any float dtype, token_ids (batch, seq). Compute log-softmax
    stably (subtract the row maximum) in float32 (float64 stays float64) and return a 0-dim tensor
    in that dtype.
    """
    # BEGIN SOLUTION Exercise 2.7 next_token_loss (Chapter 2, section 2.9 "The loss")
    z = logits[:, :-1]
    z = z.double() if z.dtype == torch.float64 else z.float()
    z = z - z.amax(dim=-1, keepdim=True)
    log_probs = z - torch.logsumexp(z, dim=-1, keepdim=True)
    targets = token_ids[:, 1:].long().unsqueeze(-1)
    return -log_probs.gather(-1, targets).mean()
    # END SOLUTION


# ---------------------------------------------------------------------------------------------
# Homework (graded by hidden tests; the public checks in tests/graded only check the examples)
# ---------------------------------------------------------------------------------------------

def wordpiece_tokenize(word: str, vocab, unk_token: str = "[UNK]", prefix: str = "##",
                       max_chars: int = 100) -> list:
    """WordPiece's greedy longest-match-first split of ONE word (BERT's tokenizer, no training).

    ``vocab`` is any container of strings (a set, or a dict whose keys are the tokens). From the
    start of the word take the LONGEST piece that is in ``vocab``; every piece after the first is
    looked up with ``prefix`` in front ("##able"). Repeat from the end of that piece. If at some
    point no piece (not even one character) matches, the whole word becomes ``[unk_token]``
    (never a partial split). A word longer than ``max_chars`` characters is ``[unk_token]``; the
    empty word gives []. Characters are Python str characters (code points), not bytes.
    ``word`` not a str -> TypeError naming ``word``.

    Example, vocab = {"un", "##aff", "##able", "a", "##ff", "##a"}:
        wordpiece_tokenize("unaffable", vocab) == ["un", "##aff", "##able"]   # "##aff" beats "##a"
        wordpiece_tokenize("unx", vocab) == ["[UNK]"]
    """
    # BEGIN SOLUTION Homework 2.A wordpiece_tokenize (Chapter 2, beyond section 2.5 "Encoding and decoding")
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {type(word).__name__}")
    if len(word) > max_chars:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):                 # longest candidate first
            piece = word[start:end] if start == 0 else prefix + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            return [unk_token]                                  # nothing matches here
    return pieces
    # END SOLUTION


def smoothed_next_token_loss(logits: torch.Tensor, token_ids: torch.Tensor, smoothing: float = 0.0,
                             ignore_index: int = -100) -> torch.Tensor:
    """Next-token cross-entropy with label smoothing and ignored targets.

    Predict token_ids[:, t + 1] from logits[:, t] as in Exercise 2.7, but the target distribution
    puts 1 - smoothing on the true token plus smoothing / V on EVERY token (V = vocab size), so the
    loss of one position is

        (1 - smoothing) * (-log p[target]) + smoothing * mean_v(-log p[v]).

    Positions whose target equals ``ignore_index`` contribute nothing and are not counted; return
    the mean over the counted positions as a scalar (0.0, not NaN, when none is counted).
    logits (batch, seq, V) of any float dtype; compute and return in float32 (float64 stays float64);
    token_ids (batch, seq) integers. ``smoothing`` outside [0, 1) -> ValueError naming smoothing.

    Example: with logits all equal (p = 1/V everywhere) the loss is log V for every smoothing;
    logits [[[0, 0], [0, 0]]] with ids [[0, -100]] count no position and give 0.0.
    """
    # BEGIN SOLUTION Homework 2.B smoothed_next_token_loss (Chapter 2, beyond section 2.9 "The loss")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    z = logits[:, :-1]
    z = z.float() if z.dtype != torch.float64 else z                        # (B, T-1, V)
    log_probs = z - torch.logsumexp(z, dim=-1, keepdim=True)                # (B, T-1, V)
    targets = token_ids[:, 1:].long()                                       # (B, T-1)
    counted = targets != ignore_index                                       # (B, T-1)
    true = -log_probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)                                       # (B, T-1)
    per_position = (1 - smoothing) * true + smoothing * uniform
    total = torch.where(counted, per_position, torch.zeros_like(per_position)).sum()
    return total / counted.sum().clamp(min=1)
    # END SOLUTION
