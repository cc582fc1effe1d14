"""llama3_tokenizer() (the course's BPETokenizer with Llama 3's ranks) against Meta's own
tokenizer from the llama-models package, which wraps tiktoken: identical ids, always."""

import pytest
from hypothesis import given, settings
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
@given(st.text(alphabet=st.sampled_from(list("一二中文 ab1'\n") + ["ß", "👋"]), max_size=300) | st.text(max_size=80))
def test_any_text_identical_to_tiktoken(ours, tiktoken_llama3, text):
    ours._cache.clear()
    assert ours.encode(text) == tiktoken_llama3.encode(text, allowed_special="all")
