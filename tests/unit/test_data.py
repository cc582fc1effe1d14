"""The course corpus: pinned bytes, the promised sizes and languages."""

import hashlib

import pytest

from llama_course.data import ALL, CORPUS_SHA256, ENGLISH, corpus_bytes, course_corpus


def test_every_file_matches_its_pinned_hash():
    for name, digest in CORPUS_SHA256.items():
        assert hashlib.sha256(corpus_bytes(name)).hexdigest() == digest, name  # corpus_bytes checks it too


def test_sizes_and_content():
    english = course_corpus(ENGLISH)
    assert english.isascii() and 150_000 < len(english) < 250_000
    assert "\r" not in course_corpus()
    assert len(course_corpus(("stories_a.txt", "stories_b.txt")).encode()) > 120_000  # the benchmark's text
    chinese = corpus_bytes("chinese.txt").decode("utf-8")
    assert sum("\u4e00" <= c <= "\u9fff" for c in chinese) > 1000
    assert course_corpus().count("Title:") == 125 and len(course_corpus(ALL)) > len(english)


def test_unknown_name():
    with pytest.raises(ValueError, match="name"):
        corpus_bytes("shakespeare.txt")
