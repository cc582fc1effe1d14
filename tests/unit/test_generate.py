"""Generation: prefill + decode against full forwards and transformers, sampling support, bad input."""

import numpy as np
import pytest
import torch

from llama_course import LlamaConfig
from llama_course.generate import generate, sample_next, stream_generate, top_k_filter, top_p_filter
from llama_course.grade.testing import realistic_weights_
from llama_course.kv_cache import KVCache
from llama_course.model import Llama

CONFIG = LlamaConfig(vocab_size=53, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


def tiny(seed=0, device="cpu"):
    torch.manual_seed(seed)
    m = Llama(CONFIG, device=device).eval()
    realistic_weights_(m, std=0.3)
    return m


@pytest.mark.parametrize("padded", [False, True])
def test_prefill_plus_decode_equals_full_forward(device, padded):
    m = tiny(1, device)
    ids = torch.randint(0, 53, (2, 12), generator=torch.Generator().manual_seed(2)).to(device)
    mask = torch.ones(2, 12, dtype=torch.long, device=device)
    if padded:
        mask[0, :4] = 0
    with torch.no_grad():
        full = m(ids, attention_mask=mask)
        cache = KVCache(CONFIG, 2, 12, device=device)
        parts = [m(ids[:, :7], cache=cache, attention_mask=mask[:, :7])]
        for t in range(7, 12):
            parts.append(m(ids[:, t:t + 1], cache=cache, attention_mask=mask[:, :t + 1]))
    real = mask.bool()
    torch.testing.assert_close(torch.cat(parts, dim=1)[real], full[real], rtol=1e-5, atol=1e-5)
    assert cache.length == 12


def test_greedy_matches_transformers_on_left_padded_batch(hf_llama_and_ours):
    hf, ours = hf_llama_and_ours(seed=0, std=0.2, vocab_size=97, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=160,
                                 max_position_embeddings=128)
    ids = torch.tensor([[0, 0, 0, 7, 8, 9], [3, 4, 5, 6, 7, 8], [0, 11, 12, 13, 14, 15]])
    mask = (ids != 0).long()
    expected = hf.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, ids, 24, attention_mask=mask), expected)


def test_sampling_is_reproducible_and_streams():
    m = tiny(4)
    prompt = torch.tensor([[1, 2, 3]])
    a = generate(m, prompt, 10, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(7))
    b = generate(m, prompt, 10, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    streamed = list(stream_generate(m, prompt, 10, temperature=0.8, top_k=5,
                                    generator=torch.Generator().manual_seed(7)))
    assert torch.equal(torch.stack(streamed, dim=1), a[:, 3:])


def test_samples_stay_inside_top_k_and_the_nucleus():
    logits = torch.randn(1, 40, generator=torch.Generator().manual_seed(8)) * 2
    g = torch.Generator().manual_seed(9)
    top5 = set(logits.topk(5).indices[0].tolist())
    draws = {int(sample_next(logits, 1.0, top_k=5, generator=g)) for _ in range(400)}
    assert draws <= top5 and len(draws) > 1
    probs = logits.softmax(-1)[0]
    order = probs.argsort(descending=True)
    nucleus = set(order[: int((probs[order].cumsum(0) < 0.7).sum()) + 1].tolist())  # independent count
    draws = {int(sample_next(logits, 1.0, top_p=0.7, generator=g)) for _ in range(400)}
    assert draws <= nucleus and len(draws) > 1
    assert torch.equal(top_k_filter(logits, 40), logits) and torch.equal(top_p_filter(logits, 1.0), logits)


def test_eos_stops_each_row():
    m = tiny(5)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    free = generate(m, prompt, 8)
    eos = int(free[0, 4])  # row 0's second new token
    out = generate(m, prompt, 8, eos_token_id=eos)
    assert torch.equal(out[0, :5], free[0, :5]) and (out[0, 5:] == eos).all()
    # with every token of the free run as the eos (rows then stop at different steps, or never),
    # each row is the free run up to and including its own first eos, then eos
    for eos in sorted(set(free[:, 3:].flatten().tolist())):
        out = generate(m, prompt, 8, eos_token_id=eos)
        for row in range(2):
            new = free[row, 3:].tolist()
            stop = new.index(eos) + 1 if eos in new else len(new)
            assert out[row].tolist() == prompt[row].tolist() + new[:stop] + [eos] * (len(new) - stop), (eos, row)


def test_bad_input():
    m = tiny(6)
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="empty prompt"):
        generate(m, torch.zeros(1, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="top_p"):
        generate(m, ids, 3, temperature=1.0, top_p=1.5)
    with pytest.raises(ValueError, match="top_p"):
        generate(m, ids, 3, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        generate(m, ids, 3, temperature=1.0, top_k=0)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, ids, 3, temperature=-0.1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(m, ids, -1)
    with pytest.raises(ValueError, match=r"\(2\) \+ max_new_tokens \(64\) - 1 = 65 positions .* max_seq_len \(64\)"):
        generate(m, ids, 64)
    assert torch.equal(generate(m, ids, 0), ids)


def test_the_last_new_token_needs_no_position():
    # prompt + new = max_seq_len + 1: the last token is chosen but never fed back (issue 31)
    m = tiny(3)
    ids = torch.randint(0, 53, (1, 60), generator=torch.Generator().manual_seed(4))
    out = generate(m, ids, 5)                                            # 60 + 5 = 65 tokens, 64 positions
    assert out.shape == (1, 65)
    with torch.no_grad():
        assert out[0, -1] == m(out[:, :64])[0, -1].argmax()             # the full forward's choice


def test_an_all_padding_row_and_nan_logits_are_named():
    m = tiny(5)
    prompt = torch.tensor([[0, 0, 0], [1, 2, 3]])
    with pytest.raises(ValueError, match=r"attention_mask rows \[0\] are all padding"):
        generate(m, prompt, 2, attention_mask=torch.tensor([[0, 0, 0], [1, 1, 1]]))
    with torch.no_grad():
        m.lm_head.weight[7] = float("nan")                              # token 7's logit is NaN
    with pytest.raises(FloatingPointError, match="NaN logits"):          # not multinomial's bare error
        generate(m, prompt[1:], 3, temperature=1.0, generator=torch.Generator().manual_seed(0))
    with pytest.raises(FloatingPointError, match="NaN logits"):          # greedy: argmax would pick token 7
        generate(m, prompt[1:], 3)


@pytest.mark.parametrize("rows, eos_token_id", [([1], None), ([0, 1], 0)])
def test_greedy_decoding_on_nan_logits_of_one_decode_step_raises_when_the_stream_ends(monkeypatch, rows,
                                                                                       eos_token_id):
    """NaN logits in the 2nd decode step only (one row; or both rows, whose argmax then picks token 0,
    the EOS here, so the stream stops early): the NaN flag is gathered on the device each step and
    read once when the stream ends, so generate raises instead of returning tokens picked from NaN."""
    m = tiny(6)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    clean = generate(m, prompt, 5)
    assert not (clean[:, 3:5] == 0).any()                              # no early EOS before the NaN step
    calls, logits = [0], m.forward

    def poisoned(*args, **kwargs):                                     # prefill, decode 1, decode 2 (NaN), ...
        calls[0] += 1
        out = logits(*args, **kwargs)
        return out.clone().index_fill_(0, torch.tensor(rows), float("nan")) if calls[0] == 3 else out
    monkeypatch.setattr(m, "forward", poisoned)
    with pytest.raises(FloatingPointError, match="NaN logits"):
        generate(m, prompt, 5, eos_token_id=eos_token_id)
    calls[0] = 0
    stream = stream_generate(m, prompt, 5, eos_token_id=eos_token_id)
    seen = [next(stream) for _ in range(3)]                            # tokens come as soon as chosen
    assert torch.equal(seen[0], clean[:, 3]) and torch.equal(seen[1], clean[:, 4])
    assert (seen[2][rows] == 0).all()                                  # what argmax makes of a NaN row
    with pytest.raises(FloatingPointError, match="NaN logits"):
        list(stream)


def test_sdpa_backend_generates_the_same_tokens():
    m = tiny(7)
    prompt = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    mask = (prompt != 0).long()
    explicit = generate(m, prompt, 12, attention_mask=mask)
    fused = generate(m.set_attention_backend("sdpa"), prompt, 12, attention_mask=mask)
    assert torch.equal(fused, explicit)
    with pytest.raises(ValueError, match="backend"):
        m.set_attention_backend("flash")


def test_right_padding_eos_lists_tiny_temperature_and_numpy_ints():
    m = tiny(8)
    prompt = torch.tensor([[5, 6, 0], [1, 2, 3]])
    with pytest.raises(ValueError, match="right padding"):
        generate(m, prompt, 3, attention_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match="attention_mask must hold only 0"):
        generate(m, prompt, 3, attention_mask=torch.tensor([[2, 1, 1], [1, 1, 1]]))
    with pytest.raises(TypeError, match="eos_token_id must be an int"):
        generate(m, prompt, 3, eos_token_id=[1, 2])
    with pytest.raises(ValueError, match="eos_token_id"):
        generate(m, prompt, 3, eos_token_id=53)
    greedy = generate(m, prompt, 4)
    assert torch.equal(generate(m, prompt, 4, temperature=1e-45), greedy)     # the limit of sampling is argmax
    assert torch.equal(generate(m, prompt, np.int64(4)), greedy)
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        generate(m, prompt, 4.0)


def test_sampling_upcasts_float64_logits():
    # the best token has 0.5 - 1e-10 of the mass, short of top_p = 0.5 in float64 (so the second is kept);
    # float32 rounds it to 0.5, which would drop the second token
    logits = torch.tensor([[0.5 - 1e-10, 0.3, 0.2 + 1e-10]], dtype=torch.float64).log()
    kept = top_p_filter(logits, 0.5)
    assert kept.dtype == torch.float64 and torch.isfinite(kept[0, :2]).all() and torch.isinf(kept[0, 2])
