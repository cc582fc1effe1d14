"""The training data (Chapter 11): the corpus as token ids, split, and cut
into random windows.

    cache     the corpus is encoded once and kept on disk (uint16 if the
              vocabulary fits, else uint32) with a manifest of its SHA-256
    split     documents shuffled with a seed, joined, then the first 90% of
              the tokens for training and the rest for validation
    windows   batch_size random windows of context_length + 1 tokens,
              (B, T + 1), drawn with a seeded generator: the model reads a
              window and predicts each of its next T tokens
    rows      with N processes (Chapter 13) every rank draws the same
              windows and keeps its B / N rows: together they read one batch
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import warnings
from pathlib import Path

import numpy as np
import torch

from ..checks import check_positive_int


def tokenize_to_file(text: str, tokenizer, path: str | Path) -> np.ndarray:
    """Encode ``text`` once and keep the ids on disk (uint16 if the
    vocabulary fits, else uint32); later calls with the same text and
    tokenizer memory-map the file instead of re-encoding. The file is
    fsync'd and a manifest beside it holds its SHA-256: a damaged or
    truncated cache is encoded again, never trusted."""
    path = Path(path)
    dtype = np.uint16 if len(tokenizer.vocab) <= 2**16 else np.uint32
    key = hashlib.sha256(text.encode("utf-8") + _identity(tokenizer))
    suffix = path.suffix or ".bin"
    target = path.with_name(f"{path.stem}-{key.hexdigest()[:16]}{suffix}")
    if not _cache_is_intact(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        ids = np.asarray(tokenizer.encode(text), dtype=dtype)
        manifest = {"sha256": hashlib.sha256(ids.tobytes()).hexdigest(),
                    "tokens": len(ids)}
        _replace_durably(target, ids.tobytes())
        _replace_durably(_cache_manifest(target),      # last: it vouches
                         json.dumps(manifest).encode())
    return np.memmap(target, dtype=dtype, mode="r")


def _identity(tokenizer) -> bytes:
    """What makes a tokenizer encode differently, as bytes for a hash."""
    merges = [a.hex() + " " + b.hex() for a, b in tokenizer.merges]
    return json.dumps([tokenizer.pattern,
                       sorted(tokenizer.special_tokens.items()),
                       merges, len(tokenizer.vocab)]).encode()


def _replace_durably(file: Path, data: bytes) -> None:
    """Write ``data`` to file.tmp, fsync it, rename it over ``file``."""
    temporary = file.with_suffix(file.suffix + ".tmp")
    temporary.unlink(missing_ok=True)
    write_durably(temporary, data)
    os.replace(temporary, file)
    fsync_dir(file.parent)


def _cache_manifest(cache: Path) -> Path:
    return cache.with_name(cache.name + ".json")


def _cache_is_intact(cache: Path) -> bool:
    """Whether the token cache exists and its SHA-256 is the one in its
    manifest (a warning if not)."""
    if not cache.exists():
        return False
    try:
        manifest = json.loads(_cache_manifest(cache).read_text())
        intact = manifest["sha256"] == sha256(cache)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        intact = False
    if not intact:
        warnings.warn(f"the token cache {cache} does not match its manifest "
                      f"(damaged or truncated): encoding the text again",
                      stacklevel=3)
    return intact


def sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_durably(path: Path, data: bytes) -> str:
    """Write ``data`` to a new file and fsync it (on disk, not only in the
    OS cache); returns its SHA-256."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (new files, renames) durable.
    POSIX only; a no-op elsewhere."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shuffle_documents(text: str, seed: int = 0,
                      separator: str = "<|endoftext|>") -> str:
    """The corpus's documents (each starts with a "Title:" or "标题："
    line) in a seeded random order, joined by ``separator``, so that a
    tail split for validation samples every kind of text."""
    documents = re.split(r"\n\n(?=Title:|标题：)", text.strip())
    random.Random(seed).shuffle(documents)
    return separator.join(documents)


def split(tokens, val_fraction: float = 0.1
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first (1 - val_fraction) of the tokens for training, the rest
    for validation (int64)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    data = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    cut = int(len(data) * (1 - val_fraction))
    return data[:cut], data[cut:]


def _check_windows(data, batch_size, context_length) -> None:
    check_positive_int("batch_size", batch_size)
    check_positive_int("context_length", context_length)
    if len(data) < context_length + 1:
        raise ValueError(f"the data has {len(data)} tokens, fewer than one "
                         f"window of context_length + 1 = "
                         f"{context_length + 1}")


def get_batch(data: torch.Tensor, batch_size: int, context_length: int,
              generator: torch.Generator, device=None) -> torch.Tensor:
    """``batch_size`` random windows of context_length + 1 tokens,
    (B, T + 1). The model reads a window and next_token_loss(model(w), w)
    scores its context_length next-token predictions."""
    _check_windows(data, batch_size, context_length)
    n, t = len(data) - context_length, context_length
    starts = torch.randint(0, n, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(t + 1)                                    # (T+1,)
    windows = data[starts[:, None] + offsets]                     # (B, T+1)
    return windows.to(device) if device is not None else windows


def check_batch(batch_size: int, world_size: int,
                accum_steps: int = 1) -> int:
    """Rows per rank per micro-step: batch_size / (world_size *
    accum_steps), which must be whole."""
    for name, value in (("batch_size", batch_size),
                        ("world_size", world_size),
                        ("accum_steps", accum_steps)):
        check_positive_int(name, value)
    if batch_size % (world_size * accum_steps):
        raise ValueError(f"batch_size ({batch_size}) must be divisible by "
                         f"world_size ({world_size}) x accum_steps "
                         f"({accum_steps}): every rank reads the same "
                         f"number of windows")
    return batch_size // (world_size * accum_steps)


def local_rows(windows: torch.Tensor, rank: int,
               world_size: int) -> torch.Tensor:
    """Rank ``rank``'s rows of the global batch: (B, T+1) -> (B/N, T+1),
    rows r*B/N .. (r+1)*B/N - 1. All ranks draw the same windows from the
    same seed, so together they read exactly one batch."""
    rows = check_batch(windows.shape[0], world_size)
    return windows[rank * rows:(rank + 1) * rows]                # (B/N, T+1)
