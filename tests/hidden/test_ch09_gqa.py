"""Hidden tests for Chapter 9 (instructor edition and Gradescope only).

Oracles: for Homework 9.A the quantisation rule's guarantees (|x - q s| <= s / 2, the largest
entry maps to +-127, int8 storage) and the course model, whose logits with the int8 cache must stay
close to a full forward pass; for Homework 9.B, F.scaled_dot_product_attention on each row's
valid keys, one row at a time.
"""

import pytest
import torch
import torch.nn.functional as F
from graded._checks import assert_close, assert_equal

from llama_course import LlamaConfig
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Llama

INT8 = "Homework 9.A Int8KVCache.update"
RAGGED = "Homework 9.B ragged_attention"

CONFIG = LlamaConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


def randn(*shape, seed=0, device="cpu", std=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * std).to(device)


@pytest.mark.graded(INT8, weight=3, kind="homework")
def test_int8_cache_quantisation_rule(impl, device):
    cache = impl.Int8KVCache(CONFIG, 2, 6, device=device)
    k, v = randn(2, 2, 4, 8, seed=1, device=device, std=3.0), randn(2, 2, 4, 8, seed=2, device=device)
    k[0, 1, 2] = 0.0                                                         # an all-zero vector
    keys, values = cache.update(1, k, v)
    assert cache.keys[1].dtype == torch.int8 and cache.values[1].dtype == torch.int8, "buffers must be int8"
    assert tuple(cache.keys[1].shape) == (2, 2, 6, 8), \
        f"the cache was not written in place: the (2, 2, 6, 8) buffer became {tuple(cache.keys[1].shape)}"
    assert tuple(cache.key_scales[1].shape) == (2, 2, 6, 1), "one float32 scale per (batch, head, position)"
    absmax = k.abs().amax(-1, keepdim=True)
    scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
    assert_close(cache.key_scales[1][:, :, :4], scale, "key scales = max|x| / 127 (1.0 for an all-zero vector)",
                 rtol=1e-6, atol=0)
    q = cache.keys[1][:, :, :4].long()
    assert_equal(q.abs().amax(-1)[absmax[..., 0] > 0], torch.full_like(q.abs().amax(-1)[absmax[..., 0] > 0], 127),
                 "the largest entry of every non-zero vector must be stored as +-127")
    assert_equal(q[0, 1, 2], torch.zeros(8, dtype=torch.long, device=device), "an all-zero vector must store zeros")
    err = (keys - k).abs()
    assert bool((err <= scale / 2 + 1e-6).all()), \
        f"dequantised keys are off by up to {err.max().item():.3g}, more than half a step (scale / 2)"
    assert_close(values, v, "dequantised values vs the originals (int8 keeps ~2 decimal digits)",
                 rtol=0, atol=v.abs().max().item() / 127)
    assert keys.dtype == torch.float32 and keys.device.type == device.type, "update returns self.dtype on the device"


@pytest.mark.graded(INT8, weight=3, kind="homework")
def test_int8_cache_runs_the_model(impl):
    torch.manual_seed(3)
    m = Llama(CONFIG).eval()
    realistic_weights_(m, std=0.2)
    ids = torch.randint(0, 61, (2, 10), generator=torch.Generator().manual_seed(4))
    cache = impl.Int8KVCache(CONFIG, 2, 10)
    with torch.no_grad():
        full = m(ids)
        parts = [m(ids[:, :6], cache=cache)] + [m(ids[:, t:t + 1], cache=cache) for t in range(6, 10)]
    assert cache.length == 10, f"after 10 positions cache.length is {cache.length}"
    got = torch.cat(parts, dim=1)
    # int8 keys and values move the logits by a few percent of their spread, never more
    assert_close(got, full, "logits with the int8 cache vs a full forward pass", rtol=0,
                 atol=0.05 * full.abs().max().item())
    assert (got.argmax(-1) == full.argmax(-1)).float().mean() >= 0.9, "the int8 cache changed the top token too often"
    with pytest.raises(ValueError, match="max_seq_len"):
        cache.update(0, torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))


@pytest.mark.graded(INT8, weight=1, kind="homework")
def test_int8_cache_returns_its_dtype(impl):
    cache = impl.Int8KVCache(CONFIG, 1, 4, dtype=torch.bfloat16)
    k = randn(1, 2, 3, 8, seed=5).to(torch.bfloat16)
    keys, values = cache.update(0, k, k)
    assert keys.dtype == torch.bfloat16 and values.dtype == torch.bfloat16, \
        f"an Int8KVCache(dtype=bfloat16) must return bfloat16, got {keys.dtype}"
    cache.advance()
    keys, _ = cache.update(0, k[:, :, :1], k[:, :, :1])
    assert keys.shape == (1, 2, 4, 8), f"the second update must return positions 0..3, got shape {tuple(keys.shape)}"


def per_row_oracle(q, k, v, kv_lens):
    B, H, T, d = q.shape
    rep = H // k.shape[1]
    out = []
    for b in range(B):
        n = int(kv_lens[b])
        kb, vb = k[b:b + 1, :, :n].repeat_interleave(rep, 1), v[b:b + 1, :, :n].repeat_interleave(rep, 1)
        mask = torch.ones(T, n, dtype=torch.bool, device=q.device).tril(diagonal=n - T)
        out.append(F.scaled_dot_product_attention(q[b:b + 1].float(), kb.float(), vb.float(), attn_mask=mask))
    return torch.cat(out)


@pytest.mark.graded(RAGGED, weight=2, kind="homework")
@pytest.mark.parametrize("n_kv_heads", [6, 2, 1], ids=["mha", "gqa", "mqa"])
def test_ragged_attention_matches_row_by_row(impl, device, n_kv_heads):
    for T in (1, 3):
        q = randn(4, 6, T, 16, seed=6, device=device)
        k, v = randn(4, n_kv_heads, 9, 16, seed=7, device=device), randn(4, n_kv_heads, 9, 16, seed=8, device=device)
        kv_lens = torch.tensor([9, T, 5, 7], device=device)
        k[2, :, 5:], v[2, :, 5:] = 1e4, -1e4                                   # stale garbage past kv_len
        got = impl.ragged_attention(q, k, v, kv_lens)
        assert got.shape == q.shape, f"T={T}: shape {tuple(got.shape)}, expected {tuple(q.shape)}"
        assert_close(got, per_row_oracle(q, k, v, kv_lens),
                     f"ragged_attention ({n_kv_heads} KV heads, T={T}, kv_lens {kv_lens.tolist()}) vs row-by-row "
                     f"attention over each row's valid keys", rtol=1e-5, atol=1e-5)


@pytest.mark.graded(RAGGED, weight=2, kind="homework")
def test_ragged_attention_dtype_and_errors(impl):
    q, k, v = randn(2, 4, 2, 8, seed=9), randn(2, 2, 5, 8, seed=10), randn(2, 2, 5, 8, seed=11)
    half = impl.ragged_attention(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16),
                                 torch.tensor([5, 3]))
    assert half.dtype == torch.bfloat16, f"bf16 inputs must give a bf16 output, got {half.dtype}"
    assert_close(half.float(), per_row_oracle(q, k, v, torch.tensor([5, 3])), "bf16 ragged attention vs float32",
                 rtol=3e-2, atol=3e-2)
    for bad in ([5, 1], [6, 3], [0, 3]):
        with pytest.raises(ValueError, match="kv_lens"):
            impl.ragged_attention(q, k, v, torch.tensor(bad))
