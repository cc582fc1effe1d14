"""llama3_tokenizer() (the course's BPETokenizer with Llama 3's ranks) against Meta's own
tokenizer from the llama-models package, which wraps tiktoken: identical ids, always."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("tiktoken", reason="Llama 3 parity needs the pinned extra: pip install tiktoken llama-models")
pytest.importorskip("llama_models", reason="Llama 3 parity needs the pinned extra: pip install llama-models==0.3.0")

from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer  # noqa: E402

from llama_course.tokenizer import LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS, llama3_tokenizer  # noqa: E402

SAMPLES = [
    "The capital of France is",
    "Hello, world! I'm here; you're there. THEY'LL COME, won't they?",
    "我打你，你打我。语言模型根据前面的词元预测下一个词元。",
    "日本語のテキストと한국어 텍스트, русский текст, العربية",
    "def rope(x, positions):\n    return x * cos + rotate_half(x) * sin  # (B, H, T, d)\n",
    "1234567890 3.14159265358979 1,000,000 2024-11-29 0x7fff",
    "👋🏽 🇫🇷 👨‍👩‍👧‍👦 ✨🚀",
    "   leading spaces\n\n\n\ttabs\t\tand\r\nwindows lines   \n  ",
    " " * 300 + "x" + "\n" * 50,
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "e\u0301 café naïve Ångström",
    "a" * 2000,
    "",
]


@pytest.fixture(scope="module")
def ours():
    return llama3_tokenizer()


@pytest.fixture(scope="module")
def meta():
    return MetaTokenizer.get_instance()


@pytest.mark.parametrize("text", SAMPLES)
def test_identical_to_meta(ours, meta, text):
    expected = meta.encode(text, bos=False, eos=False, allowed_special="all")
    assert ours.encode(text) == expected
    assert ours.decode(expected) == meta.decode(expected)


def test_vocabulary_and_special_tokens(ours, meta):
    assert len(ours) == meta.n_words == 128256
    assert ours.special_tokens == meta.special_tokens
    assert ours.special_tokens["<|begin_of_text|>"] == 128000 and ours.special_tokens["<|eot_id|>"] == 128009
    assert LLAMA3_PATTERN == MetaTokenizer.pat_str
    assert len(LLAMA3_SPECIAL_TOKENS) == 256


def test_seed_sentence(ours):
    ids = ours.encode("The capital of France is")
    assert ours.decode(ids) == "The capital of France is"
    assert [ours.decode([i]) for i in ids] == ["The", " capital", " of", " France", " is"]


def tiktoken_encoding():
    import tiktoken

    from llama_course.tokenizer.llama3 import llama3_ranks_path, load_tiktoken_ranks

    ranks = load_tiktoken_ranks(llama3_ranks_path())
    specials = {token: len(ranks) + i for i, token in enumerate(LLAMA3_SPECIAL_TOKENS)}
    return tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


@pytest.fixture(scope="module")
def tiktoken_llama3():
    return tiktoken_encoding()


@pytest.mark.parametrize("text", ["一" * 8000, "语言模型" * 1500, "a" * 6000, "\u00e9" * 3000 + "z"])
def test_long_runs_identical_to_tiktoken(ours, tiktoken_llama3, text):
    assert ours.encode(text) == tiktoken_llama3.encode(text, allowed_special="all")


def test_lone_surrogates_as_tiktoken(ours, tiktoken_llama3):
    for text in ["a\ud800b", "\udfff", "中\ud83d文"]:
        assert ours.encode(text) == tiktoken_llama3.encode(text, allowed_special="all")


@settings(max_examples=200, deadline=None)
@example(text="\U0003d000:A")          # CJK Extension J (Unicode 17.0): a letter for `regex`, not for tiktoken
@given(st.text(alphabet=st.sampled_from(list("一二中文 ab1'\n") + ["ß", "👋"]), max_size=300) | st.text(max_size=80))
def test_any_text_identical_to_tiktoken(ours, tiktoken_llama3, text):
    ours._cache.clear()
    assert ours.encode(text) == tiktoken_llama3.encode(text, allowed_special="all")


def test_every_code_point_is_classed_as_tiktoken_classes_it():
    """Each class of Meta's pattern (letter, digit, space, and the two 'anything else' classes),
    matched by tiktoken's own engine and by the course's Unicode 16.0 copy of it under `regex`, over
    every code point of every plane (surrogates aside: not text). tiktoken's finditer skips what a
    pattern does not match, so a pattern of one class keeps exactly that class's characters.
    Measured: about 2 s; before the fix `regex` classed 17,144 letters and 336 digits otherwise."""
    import regex
    import tiktoken

    from llama_course.tokenizer.llama3 import LLAMA3_REGEX_PATTERN, UNICODE_16_CLASSES

    byte_ranks = {bytes([b]): b for b in range(256)}
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    chunks = [everything[i:i + 65536] for i in range(0, len(everything), 65536)]
    for meta_class, ours in [*UNICODE_16_CLASSES.items(), (r"\s", r"\s"), (r"[\r\n]", r"[\r\n]")]:
        engine = tiktoken.Encoding(f"class {meta_class}", pat_str=meta_class, mergeable_ranks=byte_ranks,
                                   special_tokens={})
        kept = "".join(bytes(engine.encode_ordinary(chunk)).decode("utf-8") for chunk in chunks)
        ours_kept = "".join(regex.findall(ours, everything))
        assert len(ours_kept) == len(kept) and ours_kept == kept, (
            f"{meta_class}: tiktoken keeps {len(kept)} code points, the course's class {len(ours_kept)}; first "
            f"differing: {sorted(set(map(ord, kept)) ^ set(map(ord, ours_kept)))[:5]}")
    placeholders = {k: f"<{i}>" for i, k in enumerate(UNICODE_16_CLASSES)}
    meta = LLAMA3_PATTERN
    for k in sorted(placeholders, key=len, reverse=True):                # whole bracket classes first
        meta = meta.replace(k, placeholders[k])
    for k, v in UNICODE_16_CLASSES.items():
        meta = meta.replace(placeholders[k], v)
    assert LLAMA3_REGEX_PATTERN == meta                                  # Meta's pattern, class for class


def test_newer_letters_and_digits_encode_as_tiktoken(ours, tiktoken_llama3):
    for text in ["\U0003d000:A", "x\U00011de1\U00011de2\U00011de3\U00011de4 7", "\U00012550\U00012551" * 3 + "a",
                 "\u0558abc \U0001d6a6 \U000323b0\u4e00"]:
        ours._cache.clear()
        assert ours.encode(text) == tiktoken_llama3.encode(text, allowed_special="all"), repr(text)
