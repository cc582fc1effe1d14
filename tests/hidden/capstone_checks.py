"""Hidden tests of the capstone (Chapter 14): the instructor edition only (tools/student_release.py
leaves tests/hidden/ out).

``CHECKS``: {part: [(name, weight, factory)]}. ``factory(capstone)`` builds the oracle in the
grader's process and returns ``check(bench)``, which runs the student's pieces through the bench
(capstone.Bench: in the sandbox's worker, or in-process) and raises CheckFailed (or any error)
when what comes back disagrees. A part's hidden points (capstone.PARTS: points
minus what its public checks carry) are divided by weight, as the homework's hidden tests share a
problem's points.

Oracles, none of them the code under test: transformers' LlamaForCausalLM and generate (a, b),
the student's own full forward (b, the KV cache) -- these through the grader's own checks
(capstone.logits_check, cache_check, greedy_check) at other shapes, the package's tokenizer and torch's
cross-entropy (c), the package's nucleus filter with the same generator (d).
"""

import torch
import torch.nn.functional as F

from llama_course.grade.capstone import SPECIAL, CheckFailed, close


def _ids(shape, seed, vocab=97):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# (a) ------------------------------------------------------------------------------------------


def mqa_long_logits(capstone):
    """One KV head (MQA), rope_theta 500000, a batch of 3 and 40 positions (the public checks use 8)."""
    return capstone.logits_check(1, False, seed=11, shape=(3, 40), rope_theta=500_000.0,
                                 what="(MQA, rope_theta 500000, 40 positions)")


def one_token_logits(capstone):
    """A sequence of one token (the mask and RoPE at their smallest), GQA with a tied head."""
    return capstone.logits_check(2, True, seed=13, shape=(4, 1), what="of one-token sequences")


# (b) ------------------------------------------------------------------------------------------


def one_token_prefill(capstone):
    """A prefill of one token, then eleven single-token steps, MQA with a tied head: every step's
    logits equal the student's own full forward (the grader's KV-cache check, another shape)."""
    return capstone.cache_check(1, True, seed=15, shape=(1, 12), prefill=1, what=" (one-token prefill)")


def greedy_from_one_token(capstone):
    """Greedy decoding of ten tokens from one-token prompts (MQA) equals transformers' generate (the
    grader's greedy check, another shape)."""
    return capstone.greedy_check(1, False, seed=17, shape=(3, 1), new_tokens=10, what=" from one-token prompts")


# (c) ------------------------------------------------------------------------------------------

UNICODE = ("Title: Café au lait\nThe naïve cat — ‘Zoë’ — met 東京 and 🦙🦙 at 3:07.\n<|endoftext|>"
           "Title: Über\nÀ bientôt, señor! ¿Qué tal? 👋🏽\n")


def unicode_tokenizer(capstone):
    """train_bpe, encode and decode on text with accents, CJK, emoji (multi-byte UTF-8) and the
    special token, beside a slice of the course corpus: the package tokenizer's merges and ids."""
    from llama_course.tokenizer.bpe import train_bpe

    text = capstone.corpus()[0][:4000] + UNICODE * 3
    expected = train_bpe(text, 290, SPECIAL)

    def check(S):
        merges, _ = S.train_bpe("hidden unicode", text, 290)
        if merges != [tuple(merge) for merge in expected.merges]:
            raise CheckFailed("train_bpe on text with accents, CJK and emoji: the merges differ from the "
                              "package tokenizer's")
        ids = S.encode("hidden unicode", UNICODE)
        if ids != expected.encode(UNICODE):
            raise CheckFailed("encode of text with accents, CJK, emoji and <|endoftext|> differs from the "
                              "package tokenizer's ids")
        if S.decode("hidden unicode", ids) != UNICODE:
            raise CheckFailed("decode(encode(text)) is not the text (accents, CJK, emoji)")
    return check


def loss_and_gradient(capstone):
    """next_token_loss and its gradient equal torch's cross-entropy of logits[:, :-1] against ids[:, 1:]."""
    logits = torch.randn(3, 9, 17, generator=torch.Generator().manual_seed(19)) * 3
    ids = _ids((3, 9), seed=20, vocab=17)
    reference = logits.clone().requires_grad_(True)
    expected = F.cross_entropy(reference[:, :-1].reshape(-1, 17), ids[:, 1:].reshape(-1))
    expected.backward()

    def check(S):
        loss, grad = S.loss_and_grad(logits, ids)
        close(loss, expected.detach(), "next_token_loss vs torch's cross-entropy")
        close(grad, reference.grad, "the gradient of next_token_loss vs torch's cross-entropy's")
    return check


# (d) ------------------------------------------------------------------------------------------


def hot_narrow_sampling(capstone):
    """Sampling at temperature 1.3 with top_p 0.5 and seed 7 (the public check: 0.8, 0.9, 0)."""
    return capstone.sampling_check({}, temperature=1.3, top_p=0.5, seed=7)


CHECKS = {
    "a": [("MQA, rope_theta 500000, 40 positions", 1, mqa_long_logits),
          ("one-token sequences", 1, one_token_logits)],
    "b": [("one-token prefill, then 11 cached steps", 1, one_token_prefill),
          ("greedy from one-token prompts", 1, greedy_from_one_token)],
    "c": [("tokenizer on accents, CJK and emoji", 1, unicode_tokenizer),
          ("next_token_loss and its gradient", 1, loss_and_gradient)],
    "d": [("sampling at temperature 1.3, top_p 0.5", 1, hot_narrow_sampling)],
}
