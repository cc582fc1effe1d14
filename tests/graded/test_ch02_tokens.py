"""Graded tests for Chapter 2 (exercises/ch02_tokens.py).

Oracles: hand-worked merge tables (Sennrich et al.'s low/lower/newest/widest example, whose
merges under the tie rule are listed in Stanford CS336's assignment 1), a naive BPE trainer
written here from the definition, tiktoken (an independent BPE encoder) over the same ranks,
UTF-8 round trips, and torch's own F.embedding and F.cross_entropy.
"""

from collections import Counter

import pytest
import regex
import torch
import torch.nn.functional as F

from llama_course.tokenizer import GPT2_PATTERN

PACKAGE_MODULES = ["llama_course.tokenizer", "llama_course"]

PAIRS = "Exercise 2.1 count_pairs"
MERGE = "Exercise 2.2 merge_pair"
TRAIN = "Exercise 2.3 train_bpe"
ENCODE = "Exercise 2.4 encode"
DECODE = "Exercise 2.5 decode"
EMBED = "Exercise 2.6 embed"
LOSS = "Exercise 2.7 next_token_loss"

SENNRICH = "low low low low low lower lower newest newest newest newest newest newest widest widest widest"
SENNRICH_MERGES = ["s t", "e st", "o w", "l ow", "w est", "n e", "ne west", "w i", "wi d", "wid est",
                   "low e", "lowe r"]
TEXT = ("The cat sat on the mat. The dog sat on the log! Then the cat and the dog ran off, "
        "and the mat, the log and the sun were all that was left. 123 + 456 = 579.\n\n"
        "She said: \"It's the cat's mat, isn't it?\" -- and nobody answered.\n") * 3


@pytest.mark.graded(PAIRS, points=2)
def test_count_pairs(impl):
    assert impl.count_pairs({(1, 2, 3): 2, (2, 3): 1}) == {(1, 2): 2, (2, 3): 3}
    assert impl.count_pairs({(5, 5, 5): 4}) == {(5, 5): 8}  # a pair can repeat inside one word
    assert impl.count_pairs({(7,): 10, (): 3}) == {}        # one-token words have no pairs
    word = tuple(b"newest")
    assert impl.count_pairs({word: 6})[(ord("e"), ord("s"))] == 6


@pytest.mark.graded(MERGE, points=2)
def test_merge_pair(impl):
    assert impl.merge_pair([1, 2, 2, 2, 3], (2, 2), 9) == [1, 9, 2, 3]  # left to right, no overlap
    assert impl.merge_pair([2, 2, 2, 2], (2, 2), 9) == [9, 9]
    assert impl.merge_pair([1, 2, 1, 2], (1, 2), 7) == [7, 7]
    assert impl.merge_pair([1, 3, 2], (1, 2), 7) == [1, 3, 2]
    assert impl.merge_pair([], (1, 2), 7) == []


def _merges_as_text(tokenizer):
    return [f"{a.decode()} {b.decode()}" for a, b in tokenizer.merges]


@pytest.mark.graded(TRAIN, points=3)
def test_train_bpe_hand_worked_example(impl):
    tokenizer = impl.train_bpe(SENNRICH, 256 + 12, pattern=r"\w+")
    assert _merges_as_text(tokenizer) == SENNRICH_MERGES  # (s, t) beats (e, s): the tie rule
    assert tokenizer.vocab[256] == b"st" and tokenizer.vocab[267] == b"lower"
    assert len(tokenizer.vocab) == 268


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


@pytest.mark.graded(TRAIN, points=3)
def test_train_bpe_matches_the_definition(impl):
    tokenizer = impl.train_bpe(TEXT, 256 + 60)
    assert [tuple(m) for m in tokenizer.merges] == naive_bpe(TEXT, 256 + 60, GPT2_PATTERN)
    for i, (a, b) in enumerate(tokenizer.merges):
        assert tokenizer.vocab[256 + i] == a + b


@pytest.mark.graded(TRAIN, points=2)
def test_train_bpe_special_tokens_are_never_merged(impl):
    special = "<|endoftext|>"
    text = f"{special}ab ab ab{special}{special}ab ab{special}"
    # pre-tokens "ab" x2 and " ab" x3: two merges, (a, b) then (" ", ab), then the special token
    tokenizer = impl.train_bpe(text, 256 + 2 + 1, special_tokens=[special])
    assert [tuple(m) for m in tokenizer.merges] == [(b"a", b"b"), (b" ", b"ab")]
    assert tokenizer.vocab[256 + 2] == special.encode()     # the last id
    assert len(tokenizer.vocab) == 259


def _ranks_oracle(tokenizer, specials=()):
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is the encode oracle (make install installs it)")
    special_ids = {t: i for i, t in tokenizer.vocab.items() if t.decode("utf-8", "ignore") in specials}
    ranks = {t: i for i, t in tokenizer.vocab.items() if i not in special_ids.values()}
    return tiktoken.Encoding("course-test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={t.decode(): i for t, i in special_ids.items()})


SAMPLES = [
    "The cat sat on the mat.",
    "It's the dog's log, isn't it?  Yes!!\n\n\tTabs, then   spaces.",
    "Numbers: 3.14159, 1,000,000 and 2024-11-29.",
    "中文也可以：语言模型预测下一个词元。 Emoji too: 👋🏽🚀",
    "e\u0301 (e + combining accent) and café",
    "",
]


@pytest.fixture(scope="module")
def trained():
    from llama_course.tokenizer import train_bpe  # the vocabulary under test; tiktoken is the oracle
    return train_bpe(TEXT * 2 + "中文 语言 模型 👋", 256 + 80 + 1, special_tokens=["<|endoftext|>"])


@pytest.mark.graded(ENCODE, points=2)
def test_encode_matches_tiktoken(impl, trained):
    oracle = _ranks_oracle(trained, ["<|endoftext|>"])
    for text in SAMPLES + [TEXT, "a<|endoftext|>b<|endoftext|><|endoftext|>"]:
        expected = oracle.encode(text, allowed_special="all")
        assert impl.encode(text, trained.vocab, trained.merges, ["<|endoftext|>"]) == expected, text


@pytest.mark.graded(ENCODE, points=1)
def test_encode_hand_worked(impl):
    vocab = {i: bytes([i]) for i in range(256)}
    merges = [tuple(m.encode() for m in line.split()) for line in SENNRICH_MERGES]
    for i, (a, b) in enumerate(merges):
        vocab[256 + i] = a + b
    # l o w e s t -> (s t) -> (e st) -> (o w) -> (l ow): "low" + "est"
    assert impl.encode("lowest", vocab, merges, pattern=r"\w+") == [259, 257]
    assert impl.encode("", vocab, merges) == []


@pytest.mark.graded(DECODE, points=2)
def test_decode_round_trip_and_errors(impl, trained):
    oracle = _ranks_oracle(trained, ["<|endoftext|>"])
    for text in SAMPLES + ["<|endoftext|>x"]:
        ids = oracle.encode(text, allowed_special="all")
        assert impl.decode(ids, trained.vocab) == text
    assert impl.decode([0xE4], trained.vocab) == "\ufffd"  # half of a UTF-8 character
    with pytest.raises(ValueError, match=str(10**6)):
        impl.decode([72, 10**6], trained.vocab)


@pytest.mark.graded(EMBED, points=2)
def test_embed(impl, device):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g).to(device)
    ids = torch.tensor([[1, 4, 4, 49], [0, 2, 3, 1]], device=device)
    out = impl.embed(ids, weight)
    assert out.shape == (2, 4, 8) and out.device.type == device.type
    assert torch.equal(out, F.embedding(ids, weight))
    one_hot = F.one_hot(ids, 50).to(weight.dtype)
    torch.testing.assert_close(out, one_hot @ weight)   # a lookup is a one-hot matmul
    llama_ids = torch.tensor([[1, 450, 7483, 310, 3444, 338]], device=device)  # "<s> The capital of France is"
    assert impl.embed(llama_ids, torch.randn(32000, 16, generator=g).to(device)).shape == (1, 6, 16)


@pytest.mark.graded(LOSS, points=2)
def test_next_token_loss_matches_cross_entropy(impl, device):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 9, 30, generator=g) * 4).to(device)
    ids = torch.randint(0, 30, (2, 9), generator=g).to(device)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 30), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(impl.next_token_loss(logits, ids).float(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.graded(LOSS, points=1)
def test_next_token_loss_is_stable(impl, device):
    logits = torch.tensor([[[1e4, -1e4, 0.0], [0.0, 1e4, -1e4], [0.0, 0.0, 0.0]]], device=device)
    ids = torch.tensor([[2, 1, 0]], device=device)
    loss = impl.next_token_loss(logits, ids)
    assert torch.isfinite(loss)
    # position 0 sees token 1: 1e4 - (-1e4) = 2e4; position 1 sees token 0: 1e4 - 0 = 1e4
    assert loss.item() == pytest.approx(1.5e4, rel=1e-6)
