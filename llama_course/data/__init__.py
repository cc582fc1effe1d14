"""The course corpus: original text written for this course (CC0), shipped with the package.

    stories_a.txt   45 short stories (animals, seasons, village life, learning a skill)
    stories_b.txt   45 short stories (the sea, travel, school, inventions, small mysteries)
    explainers.txt  35 short explanations (everyday science, simple maths, computers, maps)
    chinese.txt     9 short pieces of simple modern Chinese (UTF-8)

About 186 KB in all. Each file's SHA-256 is pinned below and checked on every read, so every
machine and Python version trains on the same bytes. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus_parts"
CORPUS_SHA256 = {
    "stories_a.txt": "fa43f2d8a005fdb3589b6d346d5a4909e2a973058225b1aa64606b60892ddacb",
    "stories_b.txt": "070c983ffaf7da0cc399aa5cf3db2539c2333e5ccc58ba1804d17ba90d0281e1",
    "explainers.txt": "861b43f643ccd2472699761ee438a6b6e7fa5a76d85a645e31127b04873d90dd",
    "chinese.txt": "7dad7aa18fd52297be8b02c8f3be915272b3ea951b1cf783ecf727e27c545d0e",
}
ENGLISH = ("stories_a.txt", "stories_b.txt", "explainers.txt")
ALL = ENGLISH + ("chinese.txt",)


def corpus_bytes(name: str) -> bytes:
    """The exact bytes of one corpus file, checked against its pinned SHA-256."""
    if name not in CORPUS_SHA256:
        raise ValueError(f"name must be one of {sorted(CORPUS_SHA256)}, got {name!r}")
    data = (CORPUS_DIR / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CORPUS_SHA256[name]:
        raise RuntimeError(f"{name} has SHA-256 {digest}, expected {CORPUS_SHA256[name]}: "
                           f"the file was changed (or its line endings converted)")
    return data


def course_corpus(parts: tuple[str, ...] = ALL) -> str:
    """The corpus files ``parts`` (default: all four), in that order, separated by a blank line."""
    return "\n".join(corpus_bytes(name).decode("utf-8") for name in parts)
