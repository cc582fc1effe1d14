"""Graded tests for Chapter 2 (exercises/ch02_tokens.py).

Oracles: hand-worked merge tables (Sennrich et al.'s low/lower/newest/widest example, whose
merges under the tie rule are listed in Stanford CS336's assignment 1), tiktoken (an independent
BPE encoder) over the same ranks, UTF-8 round trips, and torch's own F.embedding and
F.cross_entropy. Homework 2.A and 2.B: public checks only (the worked examples of the docstrings).
"""

import pytest
import torch
import torch.nn.functional as F

from llama_course.tokenizer import GPT2_PATTERN

from ._checks import assert_close, assert_equal

PACKAGE_MODULES = ["llama_course.tokenizer", "llama_course"]

PAIRS = "Exercise 2.1 count_pairs"
MERGE = "Exercise 2.2 merge_pair"
TRAIN = "Exercise 2.3 train_bpe"
ENCODE = "Exercise 2.4 encode"
DECODE = "Exercise 2.5 decode"
EMBED = "Exercise 2.6 embed"
LOSS = "Exercise 2.7 next_token_loss"
WORDPIECE = "Homework 2.A wordpiece_tokenize"
SMOOTH = "Homework 2.B smoothed_next_token_loss"

SENNRICH = "low low low low low lower lower newest newest newest newest newest newest widest widest widest"
SENNRICH_MERGES = ["s t", "e st", "o w", "l ow", "w est", "n e", "ne west", "w i", "wi d", "wid est",
                   "low e", "lowe r"]
TEXT = ("The cat sat on the mat. The dog sat on the log! Then the cat and the dog ran off, "
        "and the mat, the log and the sun were all that was left. 123 + 456 = 579.\n\n"
        "She said: \"It's the cat's mat, isn't it?\" -- and nobody answered.\n") * 3


def _same(got, expected, call):
    assert got == expected, f"{call} returned {got!r}, expected {expected!r}"


@pytest.mark.graded(PAIRS, weight=2)
def test_count_pairs(impl):
    _same(impl.count_pairs({(1, 2, 3): 2, (2, 3): 1}), {(1, 2): 2, (2, 3): 3}, "count_pairs({(1, 2, 3): 2, (2, 3): 1})")
    _same(impl.count_pairs({(5, 5, 5): 4}), {(5, 5): 8}, "count_pairs({(5, 5, 5): 4}) (a pair can repeat in a word)")
    _same(impl.count_pairs({(7,): 10, (): 3}), {}, "count_pairs({(7,): 10, (): 3}) (one-token words have no pairs)")
    got = impl.count_pairs({tuple(b"newest"): 6}).get((ord("e"), ord("s")))
    _same(got, 6, "count_pairs({'newest' as bytes: 6})[(e, s)]")


@pytest.mark.graded(MERGE, weight=2)
def test_merge_pair(impl):
    for ids, pair, new, expected, why in (
            ([1, 2, 2, 2, 3], (2, 2), 9, [1, 9, 2, 3], "left to right, no overlap"),
            ([2, 2, 2, 2], (2, 2), 9, [9, 9], "two non-overlapping pairs"),
            ([1, 2, 1, 2], (1, 2), 7, [7, 7], "every occurrence"),
            ([1, 3, 2], (1, 2), 7, [1, 3, 2], "only ADJACENT tokens form a pair"),
            ([], (1, 2), 7, [], "an empty list")):
        _same(impl.merge_pair(list(ids), pair, new), expected, f"merge_pair({ids}, {pair}, {new}) ({why})")


def _merges_as_text(tokenizer):
    return [f"{a.decode()} {b.decode()}" for a, b in tokenizer.merges]


@pytest.mark.graded(TRAIN, weight=3, depends=("Exercise 2.1", "Exercise 2.2"))
def test_train_bpe_hand_worked_example(impl):
    tokenizer = impl.train_bpe(SENNRICH, 256 + 12, pattern=r"\w+")
    merges = _merges_as_text(tokenizer)
    assert merges == SENNRICH_MERGES, \
        f"merges {merges}, expected {SENNRICH_MERGES} (the tie rule: (s, t) beats (e, s))"
    assert tokenizer.vocab[256] == b"st" and tokenizer.vocab[267] == b"lower", \
        f"vocab[256] = {tokenizer.vocab[256]!r}, vocab[267] = {tokenizer.vocab[267]!r}; expected b'st' and b'lower'"
    assert len(tokenizer.vocab) == 268, f"the vocabulary has {len(tokenizer.vocab)} tokens, expected 256 + 12"


@pytest.mark.graded(TRAIN, weight=2, depends=("Exercise 2.1", "Exercise 2.2"))
def test_train_bpe_special_tokens_are_never_merged(impl):
    special = "<|endoftext|>"
    text = f"{special}ab ab ab{special}{special}ab ab{special}"
    # pre-tokens "ab" x2 and " ab" x3: two merges, (a, b) then (" ", ab), then the special token
    tokenizer = impl.train_bpe(text, 256 + 2 + 1, special_tokens=[special])
    merges = [tuple(m) for m in tokenizer.merges]
    assert merges == [(b"a", b"b"), (b" ", b"ab")], \
        f"merges {merges}, expected [(b'a', b'b'), (b' ', b'ab')]: the special token's bytes must never be merged"
    assert tokenizer.vocab.get(258) == special.encode(), \
        f"vocab[258] = {tokenizer.vocab.get(258)!r}: the special token takes the id after the last merge"
    assert len(tokenizer.vocab) == 259, f"the vocabulary has {len(tokenizer.vocab)} tokens, expected 259"


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


@pytest.mark.graded(ENCODE, weight=2)
def test_encode_matches_tiktoken(impl, trained):
    oracle = _ranks_oracle(trained, ["<|endoftext|>"])
    for text in SAMPLES + [TEXT, "a<|endoftext|>b<|endoftext|><|endoftext|>"]:
        expected = oracle.encode(text, allowed_special="all")
        got = impl.encode(text, trained.vocab, trained.merges, ["<|endoftext|>"])
        assert got == expected, f"encode({text[:40]!r}...) = {got[:20]}..., tiktoken gives {expected[:20]}..."


@pytest.mark.graded(ENCODE, weight=1)
def test_encode_hand_worked(impl):
    vocab = {i: bytes([i]) for i in range(256)}
    merges = [tuple(m.encode() for m in line.split()) for line in SENNRICH_MERGES]
    for i, (a, b) in enumerate(merges):
        vocab[256 + i] = a + b
    # l o w e s t -> (s t) -> (e st) -> (o w) -> (l ow): "low" + "est"
    _same(impl.encode("lowest", vocab, merges, pattern=r"\w+"), [259, 257],
          "encode('lowest') with the Sennrich merges (apply merges in the order they were learned)")
    _same(impl.encode("", vocab, merges), [], "encode('')")


@pytest.mark.graded(DECODE, weight=2)
def test_decode_round_trip_and_errors(impl, trained):
    oracle = _ranks_oracle(trained, ["<|endoftext|>"])
    for text in SAMPLES + ["<|endoftext|>x"]:
        ids = oracle.encode(text, allowed_special="all")
        _same(impl.decode(ids, trained.vocab), text, f"decode(encode({text[:30]!r}))")
    _same(impl.decode([0xE4], trained.vocab), "\ufffd", "decode([0xE4]) (half a UTF-8 character -> U+FFFD)")
    with pytest.raises(ValueError, match=str(10**6)):
        impl.decode([72, 10**6], trained.vocab)


@pytest.mark.graded(EMBED, weight=2)
def test_embed(impl, device):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g).to(device)
    ids = torch.tensor([[1, 4, 4, 49], [0, 2, 3, 1]], device=device)
    out = impl.embed(ids, weight)
    assert out.device.type == device.type, f"embed returned a tensor on {out.device}, expected {device}"
    assert_equal(out, F.embedding(ids, weight), "embed(ids, weight) vs F.embedding")
    one_hot = F.one_hot(ids, 50).to(weight.dtype)
    assert_close(out, one_hot @ weight, "embed vs one_hot(ids) @ weight (a lookup is a one-hot matmul)")
    llama_ids = torch.tensor([[1, 450, 7483, 310, 3444, 338]], device=device)  # "<s> The capital of France is"
    shape = tuple(impl.embed(llama_ids, torch.randn(32000, 16, generator=g).to(device)).shape)
    assert shape == (1, 6, 16), f"embed of (1, 6) ids with a (32000, 16) table has shape {shape}, expected (1, 6, 16)"


@pytest.mark.graded(EMBED, weight=1)
def test_embed_rejects_ids_out_of_range(impl):
    weight = torch.randn(10, 4)
    for bad in (10, -1):
        with pytest.raises(ValueError, match="token_ids"):
            impl.embed(torch.tensor([0, bad, 3]), weight)


@pytest.mark.graded(LOSS, weight=2)
def test_next_token_loss_matches_cross_entropy(impl, device):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 9, 30, generator=g) * 4).to(device)
    ids = torch.randint(0, 30, (2, 9), generator=g).to(device)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 30), ids[:, 1:].reshape(-1))
    loss = impl.next_token_loss(logits, ids)
    assert loss.dim() == 0, f"the loss must be a scalar (0-dim tensor), got shape {tuple(loss.shape)}"
    assert_close(loss, expected, "next_token_loss vs F.cross_entropy(logits[:, :-1], ids[:, 1:])")
    half = impl.next_token_loss(logits.to(torch.bfloat16), ids)
    assert half.dtype == torch.float32, f"bf16 logits: the loss must be float32, got {half.dtype}"


@pytest.mark.graded(LOSS, weight=1)
def test_next_token_loss_is_stable(impl, device):
    logits = torch.tensor([[[1e4, -1e4, 0.0], [0.0, 1e4, -1e4], [0.0, 0.0, 0.0]]], device=device)
    ids = torch.tensor([[2, 1, 0]], device=device)
    loss = impl.next_token_loss(logits, ids)
    assert torch.isfinite(loss), f"logits of size 1e4 gave a loss of {loss.item()}: subtract the row maximum"
    # position 0 sees token 1: 1e4 - (-1e4) = 2e4; position 1 sees token 0: 1e4 - 0 = 1e4
    assert loss.item() == pytest.approx(1.5e4, rel=1e-6), f"loss {loss.item()}, expected (2e4 + 1e4) / 2 = 1.5e4"


WORDPIECE_VOCAB = {"un", "##aff", "##able", "a", "##ff", "##a"}


@pytest.mark.graded(WORDPIECE, weight=1, kind="homework")
def test_wordpiece_worked_example(impl):
    _same(impl.wordpiece_tokenize("unaffable", WORDPIECE_VOCAB), ["un", "##aff", "##able"],
          "wordpiece_tokenize('unaffable')")
    _same(impl.wordpiece_tokenize("unx", WORDPIECE_VOCAB), ["[UNK]"], "wordpiece_tokenize('unx')")


@pytest.mark.graded(SMOOTH, weight=1, kind="homework")
def test_smoothed_loss_worked_example(impl):
    for smoothing in (0.0, 0.1, 0.5):
        loss = impl.smoothed_next_token_loss(torch.zeros(2, 5, 7), torch.randint(0, 7, (2, 5)), smoothing)
        assert loss.dim() == 0, f"the loss must be a scalar, got shape {tuple(loss.shape)}"
        assert loss.item() == pytest.approx(torch.log(torch.tensor(7.0)).item(), rel=1e-6), \
            f"uniform logits over 7 tokens, smoothing {smoothing}: loss {loss.item():.6f}, expected log 7"
    none = impl.smoothed_next_token_loss(torch.zeros(1, 2, 2), torch.tensor([[0, -100]]))
    assert none.item() == 0.0, f"no counted position: expected 0.0, got {none.item()}"
