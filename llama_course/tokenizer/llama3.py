"""Llama 3's production tokenizer, loaded into the course's own BPETokenizer (Chapter 2).

Meta ships Llama 3's vocabulary as 128,000 "mergeable ranks" in tiktoken's format: one line per
token, ``base64(token bytes) rank``. The rank is the token's id and the order of its merge.
Add Llama 3's pre-tokenization regex and its 256 special tokens (ids 128000-128255) and the
course's BPETokenizer encodes exactly as Meta's tiktoken-based tokenizer does.

The ranks file comes from Meta's ``llama-models`` package (``pip install llama-models==0.3.0``,
no download at run time): ``llama_models/llama3/tokenizer.model``.
"""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

from .bpe import BPETokenizer

# Llama 3's pre-tokenizer: case-insensitive contractions; a word with at
# most one leading non-letter; numbers in groups of at most 3 digits;
# punctuation runs; newlines; spaces.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
                  r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# tiktoken (0.14, Meta's engine) matches \p{L} and \p{N} with Unicode 16.0's
# tables; the `regex` package (2026.11) with Unicode 17.0's, which class
# 17,480 newly assigned code points as letters or digits (CJK Extension J
# U+3D000.., Tolong Siki digits U+11DE0.., cuneiform numbers U+12550..). For
# tiktoken they are neither (unassigned), so the course's copy of the pattern
# leaves them out of both classes. Found, and checked on every code point, by
# running both engines on each class (tests/unit/test_llama3_tokenizer.py); a
# `regex` with newer tables fails that test.
_NEWER_LETTERS = (
    r"\U00000558\U0000058B-\U0000058C\U0000088F\U00000C5C\U00000CDC\U0000208F"
    r"\U0000209D-\U0000209F\U0000A7CE-\U0000A7CF\U0000A7D2\U0000A7D4\U0000A7DD"
    r"\U0000A7E2\U0000A7F1\U0000AB6C-\U0000AB6D\U000107BB-\U000107BF"
    r"\U00010940-\U00010959\U00010EC5-\U00010EC7\U00010ED9-\U00010EEE"
    r"\U00011B0A\U00011DB0-\U00011DDB\U00011DF1\U00016EA0-\U00016EB8"
    r"\U00016EBB-\U00016ED3\U00016FF2-\U00016FF3\U000187F8-\U000187FF"
    r"\U00018CD6-\U00018CDA\U00018D09-\U00018D20\U00018D80-\U00018DF2"
    r"\U00018E00-\U00019191\U000191A0-\U000191D2\U0001B123-\U0001B128"
    r"\U0001B168\U0001D6A6\U0001DF1F-\U0001DF24\U0001DF2B-\U0001DF81"
    r"\U0001DF90-\U0001DF96\U0001DFCD-\U0001DFFF\U0001E6C0-\U0001E6DE"
    r"\U0001E6E0-\U0001E6E2\U0001E6E4-\U0001E6E5\U0001E6E7-\U0001E6ED"
    r"\U0001E6F0-\U0001E6F4\U0001E6FE-\U0001E6FF\U0002B73A-\U0002B73F"
    r"\U0002B81E\U0002CEA2-\U0002CEAD\U000323B0-\U00033479"
    r"\U0003D000-\U0003FC3F")
_NEWER_DIGITS = (
    r"\U00011DE0-\U00011DE9\U0001246F\U00012475-\U0001247F"
    r"\U00012550-\U00012686\U00016FF4-\U00016FF6")
# Meta's classes -> the same classes under Unicode 16.0, for `regex`
_ANY_NEWER = _NEWER_LETTERS + _NEWER_DIGITS
UNICODE_16_CLASSES = {
    r"\p{L}": rf"[^\P{{L}}{_NEWER_LETTERS}]",    # a letter, not a newer one
    r"\p{N}": rf"[^\P{{N}}{_NEWER_DIGITS}]",
    r"[^\r\n\p{L}\p{N}]": rf"(?:[^\r\n\p{{L}}\p{{N}}]|[{_ANY_NEWER}])",
    r"[^\s\p{L}\p{N}]": rf"(?:[^\s\p{{L}}\p{{N}}]|[{_ANY_NEWER}])",
}
# LLAMA3_PATTERN with those classes: what the course's BPETokenizer
# (`regex`) splits with
LLAMA3_REGEX_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
    + UNICODE_16_CLASSES[r"[^\r\n\p{L}\p{N}]"] + "?"
    + UNICODE_16_CLASSES[r"\p{L}"] + "+|"
    + UNICODE_16_CLASSES[r"\p{N}"] + "{1,3}| ?"
    + UNICODE_16_CLASSES[r"[^\s\p{L}\p{N}]"]
    + r"+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_NAMED_SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>",
]
LLAMA3_SPECIAL_TOKENS = _NAMED_SPECIALS + [f"<|reserved_special_token_{2 + i}|>"
                                           for i in range(256 - len(_NAMED_SPECIALS))]


def llama3_ranks_path() -> Path:
    """Where the installed ``llama-models`` package keeps Llama 3's tokenizer.model."""
    spec = importlib.util.find_spec("llama_models")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("Llama 3's tokenizer ships with Meta's llama-models package: "
                          "pip install llama-models==0.3.0 (make install does)")
    path = Path(next(iter(spec.submodule_search_locations))) / "llama3" / "tokenizer.model"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llama-models package")
    return path


def load_tiktoken_ranks(path: str | Path) -> dict[bytes, int]:
    """Parse a tiktoken ranks file: one ``base64(token) rank`` pair per line."""
    ranks = {}
    for line_number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError:  # binascii.Error is a ValueError too
            raise ValueError(f"{path}:{line_number}: expected 'base64(token) rank', got {line[:80]!r}") from None
    return ranks


def llama3_tokenizer(path: str | Path | None = None) -> BPETokenizer:
    """Llama 3's tokenizer: 128,000 BPE ranks + 256 special tokens, as a course BPETokenizer.

    ``<|begin_of_text|>`` is 128000, ``<|end_of_text|>`` 128001, ``<|eot_id|>`` 128009. Text that
    spells a special token is encoded as that token (Meta's ``allowed_special="all"``).
    """
    ranks = load_tiktoken_ranks(path or llama3_ranks_path())
    vocab = {rank: token for token, rank in ranks.items()}
    base = len(vocab)
    for i, token in enumerate(LLAMA3_SPECIAL_TOKENS):
        vocab[base + i] = token.encode("utf-8")
    return BPETokenizer(vocab, merges=(), special_tokens=LLAMA3_SPECIAL_TOKENS, pattern=LLAMA3_REGEX_PATTERN)
