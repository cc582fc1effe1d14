"""Byte-level byte-pair encoding (BPE), trained from scratch (Chapter 2).

Text -> UTF-8 bytes -> pre-tokens (a regex splits text into word-like pieces; merges never
cross a piece boundary) -> merges. Training starts from the 256 single bytes and repeatedly
joins the most frequent adjacent pair of tokens into a new token:

    for step in 1 .. vocab_size - 256 - len(special_tokens):
        (a, b) = argmax over adjacent pairs of count(a, b)      # ties: the greater (bytes(a), bytes(b))
        new token id 256 + step - 1 with bytes(a) + bytes(b)

Special tokens (e.g. "<|endoftext|>") are cut out of the text before pre-tokenization: they are
never split and never merged, and get the last ids of the vocabulary.

Encoding follows tiktoken's rule (the one Llama 3 uses): a piece that is itself a token is that
token; otherwise repeatedly join the adjacent pair whose concatenation has the lowest rank
(the rank of a token is its id, the order in which training created it; ties: the leftmost).
A heap of candidate pairs over a linked list of parts finds each join in O(log n), so a piece
of n bytes costs O(n log n), not the O(n^2) of rescanning every pair after each join (a run of
8,000 Chinese characters is one piece). Text with lone surrogates (not encodable as UTF-8) is
encoded as tiktoken does, with each surrogate replaced by U+FFFD.
"""

from __future__ import annotations

import heapq
import json
import operator
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import regex

from ..checks import check_int

# GPT-2's pre-tokenizer: contractions, words with an optional leading space,
# numbers, punctuation runs, and whitespace (a run before a word leaves its
# last space to the word).
GPT2_PATTERN = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+"""
                r"""| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

FORMAT = "llama-course-bpe"


class BPETokenizer:
    """A byte-level BPE tokenizer: ``vocab`` (id -> bytes), ``merges``, special tokens, a pattern.

    vocab           {id: token bytes}; must contain all 256 single bytes
    merges          [(bytes_a, bytes_b), ...] in the order training learned them (may be empty
                    for a vocabulary given only as ranks, like Llama 3's)
    special_tokens  strings that are never split; an id is added for any not already in vocab
    pattern         the pre-tokenization regex (``regex`` syntax); GPT-2's by default
    """

    def __init__(self, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]] = (),
                 special_tokens: Iterable[str] = (), pattern: str | None = None):
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.pattern = GPT2_PATTERN if pattern is None else pattern
        self._regex = regex.compile(self.pattern)
        self._rank = {token: i for i, token in self.vocab.items()}  # bytes -> id (= rank)
        if len(self._rank) != len(self.vocab):
            raise ValueError("vocab has two ids with the same bytes")
        missing = [b for b in range(256) if bytes([b]) not in self._rank]
        if missing:
            raise ValueError(f"vocab must contain all 256 single bytes; missing {missing[:8]}...")
        self.special_tokens: dict[str, int] = {}
        for token in special_tokens:
            data = _check_special_token(token).encode("utf-8")
            if data not in self._rank:
                new_id = max(self.vocab) + 1
                self.vocab[new_id] = data
                self._rank[data] = new_id
            self.special_tokens[token] = self._rank[data]
        for token in self.special_tokens:
            del self._rank[token.encode("utf-8")]  # specials are never produced by merging
        ordered = sorted(self.special_tokens, key=len, reverse=True)  # longest first wins
        self._special_regex = regex.compile("(" + "|".join(map(regex.escape, ordered)) + ")") if ordered else None
        self._cache: dict[str, list[int]] = {}
        self.merge_counts: list[int] = []  # filled by train_bpe: the count of each pair when merged

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens in the text become their own ids."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        text = _replace_surrogates(text)
        ids: list[int] = []
        for chunk, is_special in self._split_special(text):
            if is_special:
                ids.append(self.special_tokens[chunk])
            else:
                for piece in pre_tokens(self._regex, chunk):
                    ids.extend(self._encode_piece(piece))
        return ids

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Stream token ids from an iterable of strings (e.g. an open file, line by line).

        Gives exactly ``encode("".join(iterable))``. Memory stays bounded: each chunk is split
        into pre-tokens in the context of what follows it, and only the last two pre-tokens
        (which the next chunk could still change) and any tail that might begin a special token
        are held back.
        """
        buffer, high_surrogate = "", ""  # a chunk's last code point may pair with the next chunk's first
        for chunk in iterable:
            if not isinstance(chunk, str):
                raise TypeError(f"iterable must yield str, got {type(chunk).__name__}")
            chunk, high_surrogate = high_surrogate + chunk, ""
            if chunk and "\ud800" <= chunk[-1] <= "\udbff":
                chunk, high_surrogate = chunk[:-1], chunk[-1]
            buffer += _replace_surrogates(chunk)
            pieces = self._pieces(buffer[:self._special_safe_end(buffer)])
            ready = pieces[:-2]  # the last two pieces may still grow or split
            for _, piece, is_special in ready:
                yield from [self.special_tokens[piece]] if is_special else self._encode_piece(piece)
            if ready:
                buffer = buffer[pieces[-2][0]:]
        if buffer + high_surrogate:
            yield from self.encode(buffer + high_surrogate)

    def _special_safe_end(self, text: str) -> int:
        """Length of the prefix of ``text`` that cannot be the start of a special token."""
        end = len(text)
        for token in self.special_tokens:
            for k in range(min(len(token) - 1, len(text)), 0, -1):
                if text.endswith(token[:k]):
                    end = min(end, len(text) - k)
                    break
        return end

    def _pieces(self, text: str) -> list[tuple[int, str, bool]]:
        """(start, text, is_special) of every pre-token of ``text``, special tokens included."""
        pieces = []
        for chunk_start, chunk, is_special in self._split_special_with_offsets(text):
            if is_special:
                pieces.append((chunk_start, chunk, True))
            else:
                pieces.extend((chunk_start + start, piece, False) for start, piece in
                              pre_tokens(self._regex, chunk, offsets=True))
        return pieces

    def _split_special(self, text: str):
        for _, chunk, is_special in self._split_special_with_offsets(text):
            yield chunk, is_special

    def _split_special_with_offsets(self, text: str):
        if self._special_regex is None:
            if text:
                yield 0, text, False
            return
        position = 0
        for m in self._special_regex.finditer(text):
            if m.start() > position:
                yield position, text[position:m.start()], False
            yield m.start(), m.group(), True
            position = m.end()
        if position < len(text):
            yield position, text[position:], False

    def _encode_piece(self, piece: str) -> list[int]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        data = piece.encode("utf-8")
        whole = self._rank.get(data)
        ids = [whole] if whole is not None else [self._rank[part] for part in bpe_merge(data, self._rank)]
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[piece] = ids
        return ids

    # ------------------------------------------------------------------ decoding

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``. Bytes that do not form valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The exact bytes of ``ids``."""
        out = []
        for token_id in ids:
            if isinstance(token_id, bool) or not hasattr(token_id, "__index__"):
                raise TypeError(f"ids must be ints, got {type(token_id).__name__}")
            token_id = operator.index(token_id)
            token = self.vocab.get(token_id)
            if token is None:
                raise ValueError(f"token id {token_id} is not in the vocabulary (size {len(self.vocab)})")
            out.append(token)
        return b"".join(out)

    # ------------------------------------------------------------------ inspection

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, token_id: int) -> str:
        """A readable form of one token: GPT-2's byte-to-character map (space shows as Ġ)."""
        return _show(self.decode_bytes([token_id]))

    # ------------------------------------------------------------------ save / load

    def save(self, path: str | Path) -> None:
        """Write a readable JSON file: tokens in GPT-2's printable byte map ("Ġthe"), merges in order."""
        specials = set(self.special_tokens.values())
        data = {
            "format": FORMAT,
            "version": 1,
            "pattern": self.pattern,
            "special_tokens": self.special_tokens,
            "merges": [f"{_show(a)} {_show(b)}" for a, b in self.merges],
            "vocab": {_show(token): i for i, token in sorted(self.vocab.items()) if i not in specials},
        }
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by ``save``; ValueError naming the file for anything malformed."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            vocab, merges, specials = _parse_saved(data)
            return cls(vocab, merges, list(specials), data["pattern"])
        except (ValueError, TypeError, KeyError, RecursionError, regex.error) as err:
            detail = {KeyError: f"missing key {err}", RecursionError: "JSON nested too deeply"}.get(type(err), str(err))
            raise ValueError(f"{path}: {detail}") from None


def _parse_saved(data: dict) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], dict[str, int]]:
    """vocab, merges and special tokens of a saved tokenizer, each checked."""
    tokens, specials, lines = data["vocab"], data["special_tokens"], data["merges"]
    if not isinstance(data["pattern"], str):
        raise ValueError("pattern must be a string")
    for key, value, kind in (("vocab", tokens, dict), ("special_tokens", specials, dict), ("merges", lines, list)):
        if not isinstance(value, kind):
            raise ValueError(f"{key} must be a JSON {'object' if kind is dict else 'array'}")
    ids = list(tokens.values()) + list(specials.values())
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
            raise ValueError(f"token ids must be ints >= 0, got {token_id!r}")
    repeated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if repeated:
        raise ValueError(f"ids used twice (by two tokens, or a token and a special token): {repeated[:8]}")
    if ids and max(ids) >= len(ids):
        which = "special token" if max(ids) in specials.values() else "token"
        raise ValueError(f"{which} id {max(ids)} is out of range: the {len(ids)} ids must be 0..{len(ids) - 1}")
    try:
        vocab = {i: _unshow(token) for token, i in tokens.items()}
    except KeyError as err:
        raise ValueError(f"vocab has a character outside GPT-2's byte map: {err}") from None
    vocab.update({i: _check_special_token(token).encode("utf-8") for token, i in specials.items()})
    merges = []
    for number, line in enumerate(lines, start=1):
        parts = line.split(" ") if isinstance(line, str) else []
        if len(parts) != 2 or not all(parts) or any(c not in _FROM_CHAR for c in "".join(parts)):
            raise ValueError(f"merge {number} must be two tokens separated by one space, got {line!r}")
        merges.append((_unshow(parts[0]), _unshow(parts[1])))
    return vocab, merges, specials


# GPT-2's reversible map from the 256 byte values to printable characters.
def _byte_to_char() -> dict[int, str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_TO_CHAR = _byte_to_char()
_FROM_CHAR = {c: b for b, c in _TO_CHAR.items()}


def _check_special_token(token) -> str:
    if not isinstance(token, str):
        raise TypeError(f"special_tokens must be str, got {type(token).__name__}")
    if not token:
        raise ValueError("special_tokens must not contain the empty string (it would match everywhere)")
    if len(token.encode("utf-8")) == 1:
        raise ValueError(f"special token {token!r} is one byte, which is already the ordinary token "
                         f"{ord(token)}: a special token needs at least two bytes, like '<|endoftext|>'")
    return token


def _replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (a str that UTF-8 cannot encode) as U+FFFD, as tiktoken does."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def pre_tokens(pattern: regex.Pattern, text: str, offsets: bool = False) -> list:
    """The pieces of ``text`` that ``pattern`` matches (with their start offsets if ``offsets``).
    ValueError if the matches leave a gap: a pattern must cover the text, or text would be lost."""
    pieces, position = [], 0
    for m in pattern.finditer(text):
        if m.start() != position:
            break
        pieces.append((m.start(), m.group()) if offsets else m.group())
        position = m.end()
    if position != len(text):
        raise ValueError(f"the pre-tokenization pattern does not match the text at position {position} "
                         f"({text[position:position + 20]!r}): every character must belong to a pre-token")
    return pieces


def bpe_merge(data: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """The parts of ``data`` after tiktoken's rule: while some adjacent pair
    of parts concatenates to a token, join the pair of lowest rank (ties: the
    leftmost). O(n log n) for n bytes.

    Parts are kept as a linked list (part i covers data[i:end[i]], its left
    neighbour starts at left[i]); a heap holds (rank, i, j, end of j) for
    every adjacent pair of parts i, j that is a token. An entry is stale once
    i or j has changed, which (end[i], end[j]) reveals.
    """
    n = len(data)
    end, left = list(range(1, n + 1)), list(range(-1, n - 1))   # (n,) each
    heap = [(ranks[data[i:i + 2]], i, i + 1, i + 2)
            for i in range(n - 1) if data[i:i + 2] in ranks]
    heapq.heapify(heap)
    while heap:
        _, i, j, j_end = heapq.heappop(heap)
        if end[i] != j or end[j] != j_end:
            continue                      # stale: a neighbour merged first
        end[i], end[j] = j_end, -1        # join part j into part i
        if j_end < n:
            left[j_end] = i               # new pair: (i, its right neighbour)
            _push_pair(heap, data, ranks, i, j_end, end[j_end])
        if left[i] >= 0:                  # new pair: (left neighbour, i)
            _push_pair(heap, data, ranks, left[i], i, j_end)
    parts, i = [], 0
    while i < n:
        parts.append(data[i:end[i]])
        i = end[i]
    return parts


def _push_pair(heap: list, data: bytes, ranks: dict[bytes, int], i: int, j: int, j_end: int) -> None:
    rank = ranks.get(data[i:j_end])
    if rank is not None:
        heapq.heappush(heap, (rank, i, j, j_end))


def _show(token: bytes) -> str:
    return "".join(_TO_CHAR[b] for b in token)


def _unshow(text: str) -> bytes:
    return bytes(_FROM_CHAR[c] for c in text)


# ---------------------------------------------------------------------------- training

def train_bpe(text_or_iterable: str | Iterable[str], vocab_size: int,
              special_tokens: Iterable[str] = (),
              pattern: str | None = None) -> BPETokenizer:
    """Train a byte-level BPE tokenizer with ``vocab_size`` tokens (256 bytes
    + merges + specials).

    Pre-tokens are counted once; each merge then updates only the pair counts
    of the words that contain the merged pair, and a heap finds the most
    frequent pair (ties: the pair whose (bytes_a, bytes_b) is
    lexicographically greatest, as in GPT-2's and CS336's reference). If the
    text runs out of pairs first, a warning says so and the vocabulary is
    smaller. An iterable is a stream of documents: no pre-token spans two of
    its strings.
    """
    special_tokens = _check_training_arguments(vocab_size, special_tokens)
    texts = ([text_or_iterable] if isinstance(text_or_iterable, str)
             else text_or_iterable)
    pattern = GPT2_PATTERN if pattern is None else pattern
    # 1. each distinct pre-token once, as a list of token ids
    counts = count_pre_tokens(texts, pattern, special_tokens)
    words = [list(word) for word in counts]
    freqs = list(counts.values())
    # 2. the pair counts, and the words holding each pair
    pair_counts, where = index_pairs(words, freqs)
    vocab = {i: bytes([i]) for i in range(256)}
    order = {i: _reversed_order(vocab[i]) for i in vocab}
    heap = [(-c, order[a], order[b], a, b)
            for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[bytes, bytes]] = []
    merge_counts: list[int] = []        # each merged pair's count when chosen
    # 3. merge the most frequent pair
    while len(merges) < vocab_size - 256 - len(special_tokens):
        while heap and (pair_counts.get((heap[0][3], heap[0][4]), 0)
                        != -heap[0][0]):
            heapq.heappop(heap)         # stale: the count changed since
        if not heap:
            size = 256 + len(merges) + len(special_tokens)
            warnings.warn(f"train_bpe: the text has no pairs left after "
                          f"{len(merges)} merges; the vocabulary has {size} "
                          f"tokens, not {vocab_size}", stacklevel=2)
            break
        count, _, _, a, b = heapq.heappop(heap)
        new_id, joined = 256 + len(merges), vocab[a] + vocab[b]
        vocab[new_id], order[new_id] = joined, _reversed_order(joined)
        merges.append((vocab[a], vocab[b]))
        merge_counts.append(-count)
        for pair in merge_everywhere(words, freqs, pair_counts, where,
                                     (a, b), new_id):
            heapq.heappush(heap, (-pair_counts[pair], order[pair[0]],
                                  order[pair[1]], *pair))
    for i, token in enumerate(special_tokens):
        vocab[256 + len(merges) + i] = token.encode("utf-8")
    tokenizer = BPETokenizer(vocab, merges, special_tokens, pattern)
    tokenizer.merge_counts = merge_counts
    return tokenizer


def _check_training_arguments(vocab_size: int, special_tokens: Iterable[str]) -> list[str]:
    check_int("vocab_size", vocab_size)
    special_tokens = list(special_tokens)
    for token in special_tokens:
        _check_special_token(token)
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError("special_tokens has duplicates")
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least 256 + {len(special_tokens)} special tokens, got {vocab_size}")
    return special_tokens


def count_pre_tokens(texts: Iterable[str], pattern: str, special_tokens: list[str]) -> Counter[bytes]:
    """How often each pre-token (as UTF-8 bytes) occurs; special tokens cut the text and are not counted.
    Only what ``pattern`` matches is counted (r"\\w+" skips spaces, as in Sennrich's example); encoding,
    unlike training, refuses a pattern that leaves text out."""
    pre_tokenizer = regex.compile(pattern)
    splitter = regex.compile("|".join(map(regex.escape, sorted(special_tokens, key=len, reverse=True)))) \
        if special_tokens else None
    counts: Counter[bytes] = Counter()
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str or an iterable of str, got {type(text).__name__}")
        for part in (splitter.split(text) if splitter else [text]):
            counts.update(piece.encode("utf-8") for piece in pre_tokenizer.findall(part))
    return counts


def index_pairs(words: list[list[int]], freqs: list[int]) -> tuple[Counter, dict]:
    """The count of every adjacent pair (weighted by word frequency), and which words hold each pair."""
    pair_counts: Counter[tuple[int, int]] = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, (ids, f) in enumerate(zip(words, freqs)):
        for pair in zip(ids, ids[1:]):
            pair_counts[pair] += f
            where.setdefault(pair, set()).add(w)
    return pair_counts, where


def merge_everywhere(words: list[list[int]], freqs: list[int], pair_counts: Counter, where: dict,
                     pair: tuple[int, int], new_id: int) -> list[tuple[int, int]]:
    """Replace ``pair`` by new_id in every word that holds it, updating pair_counts and where in
    place; returns the pairs whose count changed and is still positive (to push on the heap)."""
    changed: set[tuple[int, int]] = set()
    for w in where.pop(pair):
        old = words[w]
        new = merge_pair(old, pair, new_id)
        delta = Counter(zip(new, new[1:]))
        delta.subtract(Counter(zip(old, old[1:])))
        for other, d in delta.items():
            if d:
                pair_counts[other] += d * freqs[w]
                changed.add(other)
                if d > 0:
                    where.setdefault(other, set()).add(w)
        for other in set(zip(old, old[1:])) - set(zip(new, new[1:])) - {pair}:
            where[other].discard(w)
        words[w] = new
    del pair_counts[pair]
    for other in [c for c in changed if pair_counts.get(c, 0) <= 0]:
        pair_counts.pop(other, None)
        changed.discard(other)
    return sorted(changed)


def merge_pair(ids: list[int], pair: tuple[int, int],
               new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` in ids, left to
    right, by new_id.

    merge_pair([1, 2, 2, 2, 3], (2, 2), 9) == [1, 9, 2, 3]
    """
    a, b = pair
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _reversed_order(token: bytes) -> tuple[int, ...]:
    """A key whose ascending order is the descending order of ``token`` (heapq is a min-heap)."""
    return tuple(-x for x in token) + (1,)
