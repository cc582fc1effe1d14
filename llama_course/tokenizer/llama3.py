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

# Llama 3's pre-tokenizer: case-insensitive contractions; a word with at most one leading
# non-letter; numbers in groups of at most 3 digits; punctuation runs; newlines; spaces.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

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
    return BPETokenizer(vocab, merges=(), special_tokens=LLAMA3_SPECIAL_TOKENS, pattern=LLAMA3_PATTERN)
