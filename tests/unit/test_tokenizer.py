"""The package's BPE tokenizer: round trips, streaming, special tokens, files, bad input.
(Training is checked against the definition in tests/graded/test_ch02_tokens.py, which `make
test` also runs against the package.)"""

import json
import re
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    for one_byte in ("<", "\n"):               # issue 31: refused before training, not after it
        with pytest.raises(ValueError, match=re.escape(f"special token {one_byte!r} is one byte")):
            train_bpe("a < b\n" * 50, 300, special_tokens=[one_byte])
        with pytest.raises(ValueError, match=re.escape(f"special token {one_byte!r} is one byte")):
            BPETokenizer({i: bytes([i]) for i in range(256)}, special_tokens=[one_byte])
    with pytest.raises(TypeError, match="text"):
        train_bpe([b"abc"], 300)


def test_merge_counts_record_the_training():
    tokenizer = train_bpe("low low low low low lower lower newest newest newest newest newest newest "
                          "widest widest widest", 256 + 12, pattern=r"\w+")
    assert tokenizer.merge_counts == [9, 9, 7, 7, 6, 6, 6, 3, 3, 3, 2, 2]  # counted by hand


def rescanning_merge(data: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """tiktoken's rule written out directly (the package's encoder before the heap): rescan every
    adjacent pair after each join, join the lowest rank, ties to the leftmost. O(n^2); the oracle."""
    parts = [data[i:i + 1] for i in range(len(data))]
    while True:
        candidates = [(ranks[parts[i] + parts[i + 1]], i) for i in range(len(parts) - 1)
                      if parts[i] + parts[i + 1] in ranks]
        if not candidates:
            return parts
        _, i = min(candidates)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab 中文e\u0301")), max_size=60) | st.text(max_size=30))
def test_heap_encoder_equals_the_rescanning_rule(tok, text):
    from llama_course.tokenizer.bpe import bpe_merge

    data = text.encode("utf-8")
    assert bpe_merge(data, tok._rank) == rescanning_merge(data, tok._rank)


def test_repeated_merges_equal_the_rescanning_rule():
    # every run of one byte merges through ranks of 2, 4, 8... bytes: many ties, many stale entries
    from llama_course.tokenizer.bpe import bpe_merge

    tokenizer = train_bpe(" ".join("a" * n for n in range(1, 40)) + " " + "ab" * 50, 300)
    for n in range(1, 70):
        for data in (b"a" * n, b"ab" * n, b"aab" * n):
            assert bpe_merge(data, tokenizer._rank) == rescanning_merge(data, tokenizer._rank)


class CountingRanks(dict):
    lookups = 0

    def get(self, key, default=None):
        CountingRanks.lookups += 1
        return super().get(key, default)

    def __contains__(self, key):
        CountingRanks.lookups += 1
        return super().__contains__(key)

    def __getitem__(self, key):
        CountingRanks.lookups += 1
        return super().__getitem__(key)


def test_encoding_one_long_piece_is_not_quadratic(tok):
    """A run of 2,000 CJK characters is one pre-token of 6,000 bytes: the rank lookups must grow
    linearly (a rescan after every join needs about n^2 / 2 = 18 million)."""
    piece = "中" * 2000
    tok._rank = CountingRanks(tok._rank)
    tok._cache.clear()
    try:
        ids = tok.encode(piece)
    finally:
        tok._rank = dict(tok._rank)
    assert tok.decode(ids) == piece
    assert CountingRanks.lookups < 10 * len(piece.encode("utf-8"))


def test_lone_surrogates_become_u_fffd_as_in_tiktoken(tok):
    assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")
    assert tok.encode("\udfff" * 3) == tok.encode("\ufffd" * 3)
    assert tok.encode("x\ud83d\ude00y") == tok.encode("x😀y")           # a surrogate pair is one character
    assert list(tok.encode_iterable(["x\ud83d", "\ude00y", "\ud83d"])) == tok.encode("x😀y\ufffd")


def test_a_pattern_that_leaves_text_out_is_an_error():
    tokenizer = BPETokenizer({i: bytes([i]) for i in range(256)}, [], pattern=r"\w+")
    assert tokenizer.decode(tokenizer.encode("low")) == "low"
    with pytest.raises(ValueError, match=r"does not match the text at position 3 \(' lower'\)"):
        tokenizer.encode("low lower")
    with pytest.raises(ValueError, match="position 0"):
        list(tokenizer.encode_iterable(["  ", "x"]))


def test_the_empty_string_is_not_a_special_token():
    with pytest.raises(ValueError, match="empty string"):
        BPETokenizer({i: bytes([i]) for i in range(256)}, [], [""])
    with pytest.raises(ValueError, match="empty string"):
        train_bpe("abc", 300, special_tokens=[""])


@pytest.mark.parametrize("change, message", [
    (lambda d: d["vocab"].update({"Ġzz": d["vocab"]["Ġt"]}), "ids used twice"),
    (lambda d: d["vocab"].update({"Ġzz": d["special_tokens"][SPECIAL]}), "ids used twice"),
    (lambda d: d["vocab"].update({"Ġt": -1}), "ints >= 0"),
    (lambda d: d["special_tokens"].update({SPECIAL: 10**6}), "special token id 1000000 is out of range"),
    (lambda d: d["merges"].append("Ġt"), "merge 101 must be two tokens"),
    (lambda d: d["merges"].append("a b c"), "merge 101 must be two tokens"),
    (lambda d: d.pop("pattern"), "missing key 'pattern'"),
    (lambda d: d.pop("vocab"), "missing key 'vocab'"),
    (lambda d: d["special_tokens"].update({"": 358}), "empty string"),
    (lambda d: d.update(vocab=[1, 2]), "vocab must be a JSON object"),
])
def test_load_validates_and_names_the_file(tok, tmp_path, change, message):
    path = tmp_path / "tok.json"
    tok.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as error:
        BPETokenizer.load(path)
    assert str(path) in str(error.value)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="tok.json"):
        BPETokenizer.load(path)
