"""The package's BPE tokenizer: round trips, streaming, special tokens, files, bad input.
(Training is checked against the definition in tests/graded/test_ch02_tokens.py, which `make
test` also runs against the package.)"""

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_course.tokenizer import BPETokenizer, merge_pair, train_bpe

SPECIAL = "<|endoftext|>"
TEXT = ("Once upon a time a small robot named Kai learned to bake bread. It wasn't easy! "
        "Kai's first loaf was 3 cm tall; the second, 12 cm.\n\n\tThen  came   spaces.\n"
        "中文句子也在这里。 Emoji 👋🏽 and e\u0301.\n") * 20


@pytest.fixture(scope="module")
def tok():
    return train_bpe(TEXT + SPECIAL + TEXT, 256 + 100 + 2, special_tokens=[SPECIAL, "<|pad|>"])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_any_unicode(tok, text):
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["the", " the", "  ", "\n", "\n\n", "cat", "'s", " 12", "3", "中文", "👋",
                                 "<|endo", "ftext|>", SPECIAL, "<|pad|>", "<", "|", "e\u0301", "\t"]), max_size=40),
       st.integers(1, 7))
def test_encode_iterable_equals_encode(tok, parts, size):
    text = "".join(parts)
    chunks = [text[i:i + size] for i in range(0, len(text), size)]
    assert list(tok.encode_iterable(chunks)) == tok.encode(text)


def test_encode_iterable_streams_with_bounded_memory(tok):
    line = "The robot baked bread, and the bread was good. 中文 👋\n"

    def lines(n):
        for _ in range(n):
            yield line

    first = tok.encode_iterable(iter(lines(10**9)))       # endless input: must still yield at once
    assert [next(first) for _ in range(5)] == tok.encode(line)[:5]
    tracemalloc.start()
    total = sum(1 for _ in tok.encode_iterable(lines(20_000)))  # ~1.1 MB of text
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total == 20_000 * len(tok.encode(line))
    assert peak < 2_000_000  # independent of input length (the text alone would be > 1 MB as str)


def test_special_tokens_are_never_split(tok):
    ids = tok.encode(f"a{SPECIAL}{SPECIAL}b<|pad|>")
    assert ids.count(tok.special_tokens[SPECIAL]) == 2 and tok.special_tokens["<|pad|>"] in ids
    assert tok.special_tokens == {SPECIAL: 356, "<|pad|>": 357}  # the last ids, after 100 merges
    assert tok.special_tokens[SPECIAL] not in tok.encode("<|endoftext")   # a prefix is plain text


def test_longest_special_token_wins():
    tokenizer = BPETokenizer({i: bytes([i]) for i in range(256)}, [], ["<a>", "<a><b>"])
    assert tokenizer.encode("<a><b><a>") == [tokenizer.special_tokens["<a><b>"], tokenizer.special_tokens["<a>"]]


def test_training_is_deterministic_and_reports_a_short_text(tok):
    again = train_bpe(TEXT + SPECIAL + TEXT, 256 + 100 + 2, special_tokens=[SPECIAL, "<|pad|>"])
    assert again.merges == tok.merges and again.vocab == tok.vocab
    with pytest.warns(UserWarning, match="no pairs left"):
        small = train_bpe("ab ab", 300)
    assert len(small) < 300


def test_an_iterable_is_a_stream_of_documents():
    # pre-tokens never cross from one string to the next, just as they never cross a special token
    parts = TEXT.split("\n\n")
    separated = train_bpe("<|doc|>".join(parts), 301, special_tokens=["<|doc|>"])
    assert train_bpe(parts, 300).merges == separated.merges


def test_save_and_load(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))  # plain, readable JSON
    assert data["format"] == "llama-course-bpe"
    assert any(m.startswith("Ġ") for m in data["merges"])  # a space shows as Ġ (GPT-2's byte map)
    loaded = BPETokenizer.load(path)
    assert loaded.vocab == tok.vocab and loaded.merges == tok.merges and loaded.special_tokens == tok.special_tokens
    assert loaded.encode(TEXT) == tok.encode(TEXT)


def test_merge_pair():
    assert merge_pair([1, 2, 2, 2, 3], (2, 2), 9) == [1, 9, 2, 3]


def test_empty_and_bad_input(tok):
    assert tok.encode("") == [] and tok.decode([]) == ""
    with pytest.raises(TypeError, match="text"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="token id 99999"):
        tok.decode([1, 99999])
    with pytest.raises(TypeError, match="ids"):
        tok.decode([1.0])
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe("abc", 256, special_tokens=[SPECIAL])
    with pytest.raises(TypeError, match="special_tokens"):
        train_bpe("abc", 300, special_tokens=[42])
    with pytest.raises(TypeError, match="vocab_size"):
        train_bpe("abc", 300.0)
    with pytest.raises(TypeError, match="text"):
        train_bpe([b"abc"], 300)


def test_merge_counts_record_the_training():
    tokenizer = train_bpe("low low low low low lower lower newest newest newest newest newest newest "
                          "widest widest widest", 256 + 12, pattern=r"\w+")
    assert tokenizer.merge_counts == [9, 9, 7, 7, 6, 6, 6, 3, 3, 3, 2, 2]  # counted by hand
