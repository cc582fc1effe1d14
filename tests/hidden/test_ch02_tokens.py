"""Hidden tests for Chapter 2 (instructor edition and Gradescope only).

Oracles: a naive BPE trainer written here from the definition (Exercise 2.3); Hugging Face
`tokenizers`' WordPiece model (Homework 2.A); torch's F.cross_entropy with label_smoothing and
ignore_index (Homework 2.B).
"""

import math
import random
from collections import Counter

import pytest
import regex
import torch
import torch.nn.functional as F
from graded._checks import assert_close

from llama_course.tokenizer import GPT2_PATTERN

PACKAGE_MODULES = ["llama_course.tokenizer", "llama_course"]

TRAIN = "Exercise 2.3 train_bpe"
WORDPIECE = "Homework 2.A wordpiece_tokenize"
SMOOTH = "Homework 2.B smoothed_next_token_loss"

TEXT = ("The cat sat on the mat. The dog sat on the log! Then the cat and the dog ran off, "
        "and the mat, the log and the sun were all that was left. 123 + 456 = 579.\n\n"
        "She said: \"It's the cat's mat, isn't it?\" -- and nobody answered.\n") * 3


def naive_bpe(text, vocab_size, pattern):
    """BPE from the definition: re-tokenize every word as a list of byte strings, recount, repeat."""
    words = Counter(tuple(bytes([b]) for b in piece.encode()) for piece in regex.findall(pattern, text))
    merges = []
    while 256 + len(merges) < vocab_size:
        pairs = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        top = max(pairs.values())
        best = max(pair for pair, n in pairs.items() if n == top)  # tie: the greater pair of bytes
        merges.append(best)
        rewritten = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            rewritten[tuple(out)] += n
        words = rewritten
    return merges


@pytest.mark.graded(TRAIN, weight=3, depends=("Exercise 2.1", "Exercise 2.2"))
def test_train_bpe_matches_the_definition(impl):
    tokenizer = impl.train_bpe(TEXT, 256 + 60)
    got, expected = [tuple(m) for m in tokenizer.merges], naive_bpe(TEXT, 256 + 60, GPT2_PATTERN)
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    assert got == expected, (f"merge {first} differs from BPE's definition: got "
                             f"{got[first] if first < len(got) else 'nothing'}, expected "
                             f"{expected[first] if first < len(expected) else 'nothing'}")
    for i, (a, b) in enumerate(tokenizer.merges):
        assert tokenizer.vocab[256 + i] == a + b, f"vocab[{256 + i}] must be the bytes of merge {i}, {a + b!r}"


# --- Homework 2.A -------------------------------------------------------------------------------

def _oracle(vocab, unk="[UNK]", prefix="##", max_chars=100):
    from tokenizers.models import WordPiece
    model = WordPiece({t: i for i, t in enumerate(sorted(vocab | {unk}))}, unk_token=unk,
                      continuing_subword_prefix=prefix, max_input_chars_per_word=max_chars)
    return lambda word: [t.value for t in model.tokenize(word)]


BERTISH = {"un", "##aff", "##able", "a", "##ff", "##a", "play", "##ing", "##in", "##g", "p", "##l", "##a", "##y",
           "token", "##izer", "##ize", "##r", "to", "##ken", "中", "##文", "é", "##é", "x", "##x"}


@pytest.mark.graded(WORDPIECE, weight=3, kind="homework")
def test_wordpiece_matches_huggingface_tokenizers(impl):
    pytest.importorskip("tokenizers")
    oracle = _oracle(BERTISH)
    words = ["unaffable", "playing", "play", "plaaying", "tokenizer", "tokenize", "tokens", "中文", "中文中",
             "ééé", "xxxxxxxx", "a", "y", "unplay", "aff"]
    for word in words:
        expected = oracle(word)
        got = impl.wordpiece_tokenize(word, BERTISH)
        assert got == expected, f"wordpiece_tokenize({word!r}) = {got}, expected {expected} (greedy longest match)"


@pytest.mark.graded(WORDPIECE, weight=2, kind="homework")
def test_wordpiece_random_words_against_huggingface(impl):
    pytest.importorskip("tokenizers")
    rng = random.Random(0)
    letters = "abcd"
    vocab = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 3))) for _ in range(12)}
    vocab |= {"##" + "".join(rng.choice(letters) for _ in range(rng.randint(1, 3))) for _ in range(20)}
    oracle = _oracle(vocab, unk="<unk>", max_chars=9)
    for _ in range(300):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 11)))
        expected = oracle(word)
        got = impl.wordpiece_tokenize(word, vocab, unk_token="<unk>", max_chars=9)
        assert got == expected, f"vocab {sorted(vocab)}: wordpiece_tokenize({word!r}) = {got}, expected {expected}"


@pytest.mark.graded(WORDPIECE, weight=2, kind="homework")
def test_wordpiece_edge_cases(impl):
    vocab = {"ab": 0, "##c": 1, "a": 2, "##bc": 3}                       # a dict vocabulary: its keys
    assert impl.wordpiece_tokenize("abc", vocab) == ["ab", "##c"], "'abc': the longest FIRST piece 'ab' wins"
    assert impl.wordpiece_tokenize("", vocab) == [], "the empty word must give []"
    assert impl.wordpiece_tokenize("abd", vocab) == ["[UNK]"], \
        "'abd': when a later piece cannot match, the WHOLE word is [UNK], not ['ab', '[UNK]']"
    assert impl.wordpiece_tokenize("ab" * 3, {"ab", "##ab"}, max_chars=5) == ["[UNK]"], \
        "a word longer than max_chars must be [UNK]"
    assert impl.wordpiece_tokenize("abab", {"ab", "@@ab"}, prefix="@@") == ["ab", "@@ab"], "prefix is a parameter"
    with pytest.raises(TypeError, match="word"):
        impl.wordpiece_tokenize(b"ab", vocab)


# --- Homework 2.B -------------------------------------------------------------------------------

def _torch_loss(logits, ids, smoothing, ignore_index):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V).double(), ids[:, 1:].reshape(-1),
                           label_smoothing=smoothing, ignore_index=ignore_index)


@pytest.mark.graded(SMOOTH, weight=2, kind="homework")
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.35])
def test_smoothed_loss_matches_torch(impl, device, smoothing):
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 11, 40, generator=g) * 3).to(device)
    ids = torch.randint(0, 40, (3, 11), generator=g)
    ids[0, 4], ids[2, 1:6], ids[1, 0] = -100, -100, -100                # position 0 is never a target
    ids = ids.to(device)
    expected = _torch_loss(logits, ids, smoothing, -100)
    got = impl.smoothed_next_token_loss(logits, ids, smoothing)
    assert got.dtype == torch.float32, f"float32 logits: the loss must be float32, got {got.dtype}"
    assert_close(got, expected, f"smoothed loss (smoothing {smoothing}, some targets ignored) vs F.cross_entropy",
                 check_dtype=False)   # the oracle computes in float64; got's dtype is asserted above
    other = ids.masked_fill(ids == -100, 7)
    assert_close(impl.smoothed_next_token_loss(logits, other, smoothing, ignore_index=7),
                 _torch_loss(logits, other, smoothing, 7), "ignore_index=7 (a real token id) vs F.cross_entropy",
                 check_dtype=False)


@pytest.mark.graded(SMOOTH, weight=2, kind="homework")
def test_smoothed_loss_dtypes_stability_and_errors(impl):
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 6, 9, generator=g, dtype=torch.float64) * 2000      # needs a stable log-softmax
    ids = torch.randint(0, 9, (2, 6), generator=g)
    got = impl.smoothed_next_token_loss(logits, ids, 0.2)
    assert got.dtype == torch.float64, f"float64 logits must stay float64, got {got.dtype}"
    assert_close(got, _torch_loss(logits, ids, 0.2, -100), "huge float64 logits vs F.cross_entropy", rtol=1e-9)
    half = impl.smoothed_next_token_loss(logits.to(torch.bfloat16), ids, 0.2)
    assert half.dtype == torch.float32, f"bf16 logits: compute and return float32, got {half.dtype}"
    assert math.isfinite(half.item()), "bf16 logits of size 2000 gave a non-finite loss"
    all_ignored = torch.full((2, 6), -100)
    zero = impl.smoothed_next_token_loss(logits.float(), all_ignored, 0.1)
    assert zero.item() == 0.0, f"every target ignored: expected 0.0 (not NaN), got {zero.item()}"
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="smoothing"):
            impl.smoothed_next_token_loss(logits, ids, bad)
