"""Hidden tests for Chapter 8 (instructor edition and Gradescope only).

Oracles: transformers' beam search (generate(num_beams=...)) on the same weights and an
exhaustive search over every continuation (Homework 8.A); the acceptance rule replayed draw by
draw, and the theorem that the output is distributed as the target model (Homework 8.B);
transformers' MinPLogitsWarper (Homework 8.C).
"""

import itertools

import pytest
import torch
from graded._checks import assert_close, assert_equal

from llama_course.grade.testing import LastTwoTokens

PACKAGE_MODULES = ["llama_course.kv_cache", "llama_course.generate", "llama_course.cost"]

BEAM = "Homework 8.A beam_search"
SPEC = "Homework 8.B speculative_accept"
MIN_P = "Homework 8.C min_p_filter"

SIZES = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, max_position_embeddings=64)


@pytest.mark.graded(BEAM, weight=2, kind="homework")
@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_matches_transformers(impl, hf_llama_and_ours, num_beams):
    hf, ours = hf_llama_and_ours(seed=21, std=0.3, **SIZES)
    prompt = torch.tensor([[3, 14, 15, 9, 2], [7, 7, 1, 60, 33]])
    expected = hf.generate(prompt, max_new_tokens=7, do_sample=False, num_beams=num_beams, pad_token_id=0,
                           length_penalty=1.0, early_stopping=False)
    got = impl.beam_search(ours, prompt, num_beams, 7)
    assert_equal(got, expected, f"beam_search(num_beams={num_beams}, 7 new tokens, 2 prompts) vs transformers' "
                 f"beam search")


@pytest.mark.graded(BEAM, weight=2, kind="homework")
def test_beam_search_wide_enough_is_exhaustive(impl):
    torch.manual_seed(22)
    model = LastTwoTokens(torch.randn(5, 5, 6) * 2)                  # next-token logits depend on the last two tokens
    prompt = torch.tensor([[1, 2]])
    best, best_score = None, -float("inf")
    for tail in itertools.product(range(6), repeat=2):        # every continuation of 2 tokens
        seq = torch.tensor([[1, 2, *tail]])
        logp = model(seq)[0, 1:-1].log_softmax(-1)
        score = sum(logp[i, t].item() for i, t in enumerate(tail))
        if score > best_score:
            best, best_score = list(tail), score
    got = impl.beam_search(model, prompt, 6, 2)[0, 2:].tolist()
    assert got == best, f"with 6 beams over a 6-token vocabulary and 2 steps, beam search must find the best " \
                        f"continuation {best} (log-prob {best_score:.3f}); got {got}"


@pytest.mark.graded(BEAM, weight=2, kind="homework")
def test_beam_search_edges(impl, hf_llama_and_ours):
    hf, ours = hf_llama_and_ours(seed=23, std=0.3, **SIZES)
    prompt = torch.tensor([[5, 6, 7]])
    greedy = hf.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert_equal(impl.beam_search(ours, prompt, 1, 5), greedy, "num_beams=1 must be greedy decoding")
    assert_equal(impl.beam_search(ours, prompt, 3, 0), prompt, "max_new_tokens=0 must return the prompt")
    for bad in (0, 62):
        with pytest.raises(ValueError, match="num_beams"):
            impl.beam_search(ours, prompt, bad, 2)


def replay(draft_probs, target_probs, draft_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, x in enumerate(draft_tokens.tolist()):
        u = torch.rand((), generator=g).item()
        if u <= (target_probs[i, x] / draft_probs[i, x]).item():
            out.append(x)
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp(min=0)
        return out + [int(torch.multinomial(residual / residual.sum(), 1, generator=g))]
    return out + [int(torch.multinomial(target_probs[-1], 1, generator=g))]


def random_probs(*shape, seed):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 1.5).softmax(-1)


@pytest.mark.graded(SPEC, weight=3, kind="homework")
def test_speculative_accept_replays_the_rule(impl):
    for seed in range(40):
        n = 1 + seed % 4
        draft, target = random_probs(n, 7, seed=seed), random_probs(n + 1, 7, seed=1000 + seed)
        tokens = torch.multinomial(draft, 1, generator=torch.Generator().manual_seed(seed)).squeeze(1)
        expected = replay(draft, target, tokens, seed)
        got = impl.speculative_accept(draft, target, tokens, torch.Generator().manual_seed(seed))
        assert got == expected, f"seed {seed}, drafts {tokens.tolist()}: got {got}, expected {expected} " \
                                f"(accept when u <= p_target/p_draft; replacement from max(0, p_target - p_draft))"


@pytest.mark.graded(SPEC, weight=2, kind="homework")
def test_speculative_output_is_distributed_as_the_target(impl):
    draft = torch.tensor([[0.6, 0.3, 0.1, 0.0]])
    target = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    trials = 4000
    for t in range(trials):
        x = torch.multinomial(draft[0], 1, generator=g)
        counts[impl.speculative_accept(draft, target, x, torch.Generator().manual_seed(t))[0]] += 1
    freq = counts / trials
    # standard error of a frequency near 0.4 over 4000 trials is 0.008: allow 4 of them
    assert_close(freq, target[0], "frequency of the first output token over 4000 drafts vs the target "
                 "distribution (speculative sampling must not change the distribution)", rtol=0, atol=0.032)


@pytest.mark.graded(SPEC, weight=2, kind="homework")
def test_speculative_edges(impl):
    target = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    draft = torch.tensor([[0.9, 0.05, 0.05]])
    for seed in range(20):
        out = impl.speculative_accept(draft, target, torch.tensor([0]), torch.Generator().manual_seed(seed))
        assert len(out) == 1 and out[0] in (1, 2), \
            f"a draft token the target gives probability 0 must always be rejected and replaced by 1 or 2; got {out}"
    out = impl.speculative_accept(draft.double(), target.double(), torch.tensor([1]), torch.Generator().manual_seed(1))
    assert out == [1, 0], f"p_target/p_draft = 10 >= u: accept token 1, then the bonus from [1, 0, 0]; got {out}"
    assert all(type(t) is int for t in out), "return a list of Python ints"
    with pytest.raises(ValueError, match="target_probs"):
        impl.speculative_accept(draft, target[:1], torch.tensor([1]), torch.Generator())


@pytest.mark.graded(MIN_P, weight=2, kind="homework")
def test_min_p_matches_transformers(impl, device):
    transformers = pytest.importorskip("transformers")
    logits = (torch.randn(8, 40, generator=torch.Generator().manual_seed(5)) * 3).to(device)
    for min_p in (0.0, 0.05, 0.2, 0.7):
        expected = transformers.MinPLogitsWarper(min_p)(None, logits.clone().cpu())
        got = impl.min_p_filter(logits, min_p)
        assert got.device.type == device.type, f"min_p_filter returned a tensor on {got.device}, expected {device}"
        assert_equal(got.isinf().cpu(), expected.isinf(), f"min_p={min_p}: removed tokens vs transformers")
        assert_equal(got[~got.isinf()], logits[~got.isinf()], f"min_p={min_p}: kept logits must be unchanged")


@pytest.mark.graded(MIN_P, weight=1, kind="homework")
def test_min_p_ties_dtype_and_errors(impl):
    ties = torch.tensor([[1.0, 3.0, 3.0, 2.0]])
    kept = (~impl.min_p_filter(ties, 1.0).isinf()).tolist()
    assert kept == [[False, True, True, False]], f"min_p=1 keeps the most likely tokens and all tied with them: {kept}"
    half = impl.min_p_filter(torch.randn(3, 9).to(torch.bfloat16), 0.1)
    assert half.dtype == torch.bfloat16, f"min_p_filter must keep the logits' dtype, got {half.dtype}"
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="min_p"):
            impl.min_p_filter(ties, bad)
