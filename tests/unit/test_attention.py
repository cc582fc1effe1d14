"""The Attention module and attention helpers: transformers parity, backends, masks, bad input."""

import pytest
import torch
import torch.nn.functional as F

from llama_course import LlamaConfig
from llama_course.attention import (
    MultiHeadAttention,
    causal_mask,
    check_attention_mask_values,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from llama_course.gqa import repeat_kv
from llama_course.model import Attention


def llama_attention_reference(config, ours, x, additive_mask):
    """transformers' eager LlamaAttention on our weights, with RoPE switched off (cos 1, sin 0)."""
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig as HFConfig

    hf_config = HFConfig(hidden_size=config.d_model, num_attention_heads=config.n_heads,
                         num_key_value_heads=config.n_kv_heads, intermediate_size=config.d_ff,
                         vocab_size=config.vocab_size, attn_implementation="eager")
    reference = modeling_llama.LlamaAttention(hf_config, layer_idx=0).to(x.device, x.dtype)
    reference.load_state_dict(ours.state_dict())
    T = x.shape[1]
    cos = torch.ones(x.shape[0], T, config.head_dim, device=x.device, dtype=x.dtype)
    with torch.no_grad():
        out, _ = reference(x, position_embeddings=(cos, torch.zeros_like(cos)), attention_mask=additive_mask)
    return out


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_attention_matches_transformers(device, n_kv_heads):
    config = LlamaConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=4, n_kv_heads=n_kv_heads)
    torch.manual_seed(0)
    attention = Attention(config, device=device)
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, 6, 64, device=device)
    additive = torch.full((6, 6), float("-inf"), device=device).triu(1)  # built here, not with causal_mask
    expected = llama_attention_reference(config, attention, x, additive[None, None])
    with torch.no_grad():
        torch.testing.assert_close(attention(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_backend_equals_explicit(device, dtype):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 9, 16, generator=g).to(device, dtype) for _ in range(3))
    mask = causal_mask(9, device=device) & padding_mask(torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9],
                                                                      device=device))
    explicit = scaled_dot_product_attention(q, k, v, mask)
    fused = scaled_dot_product_attention(q, k, v, mask, backend="sdpa")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(fused, explicit, **tol)
    assert not fused.isnan().any() and torch.equal(fused[0, :, :2], torch.zeros_like(fused[0, :, :2]))


def test_attention_module_backends_agree(device):
    config = LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2)
    torch.manual_seed(2)
    explicit = Attention(config, device=device)
    fused = Attention(config, backend="sdpa", device=device)
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(3, 5, 32, device=device)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), explicit(x), rtol=1e-5, atol=1e-6)


def test_causality_of_the_module(device):
    config = LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4)
    torch.manual_seed(3)
    attention = Attention(config, device=device)
    x = torch.randn(1, 8, 32, device=device)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 32, device=device) * 10
    with torch.no_grad():
        assert torch.equal(attention(x)[:, :5], attention(y)[:, :5])


def test_padding_mask_and_helpers(device):
    am = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]], device=device)
    pm = padding_mask(am)
    assert pm.shape == (2, 1, 1, 4) and pm.dtype == torch.bool
    combined = causal_mask(4, device=device) & pm
    assert combined.shape == (2, 1, 4, 4)
    assert combined[0, 0].tolist() == [[False] * 4, [False] * 4, [False, False, True, False],
                                       [False, False, True, True]]
    x = torch.randn(2, 3, 12, device=device)
    assert torch.equal(merge_heads(split_heads(x, 3)), x)
    kv = torch.randn(1, 2, 3, 4, device=device)
    rep = repeat_kv(kv, 3)
    assert rep.shape == (1, 6, 3, 4) and torch.equal(rep[0, 3:6], kv[0, 1:2].expand(3, 3, 4))


def test_softmax_dtypes(device):
    x = torch.randn(3, 50, device=device, dtype=torch.bfloat16) * 30
    out = softmax(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, F.softmax(x.float(), -1).bfloat16())


def test_bad_input():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    with pytest.raises(ValueError, match=r"q and k.*\(2, 5, 8\).*\(2, 6, 4\)"):
        scaled_dot_product_attention(q, torch.randn(2, 6, 4), v)
    with pytest.raises(ValueError, match="k and v"):
        scaled_dot_product_attention(q, k, torch.randn(2, 7, 8))
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, torch.zeros(5, 6))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 6\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="backend"):
        scaled_dot_product_attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="n_heads"):
        split_heads(torch.randn(1, 2, 10), 3)
    with pytest.raises(ValueError, match="kv_len"):
        causal_mask(5, 3)
    with pytest.raises(ValueError, match="q_len"):
        causal_mask(0)
    with pytest.raises(TypeError, match="attention_mask"):
        padding_mask(torch.ones(2, 3))
    with pytest.raises(ValueError, match="n_heads"):
        LlamaConfig(vocab_size=10, d_model=30, n_layers=1, n_heads=4)


def test_fp16_explicit_attention_is_finite():
    """q . k = 64 * 40^2 = 102,400 overflows float16 (max 65,504) before the 1/sqrt(d) scale."""
    q = k = torch.full((1, 1, 3, 64), 40.0, dtype=torch.float16)
    v = torch.randn(1, 1, 3, 64).half()
    out = scaled_dot_product_attention(q, k, v, causal_mask(3))
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)  # float32 oracle
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["explicit", "sdpa"])
def test_both_backends_propagate_nan(backend, causal):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    q_nan, k_nan = q.clone(), k.clone()
    q_nan[0, 0, 2, 5] = float("nan")                  # one query: its row of outputs is NaN
    k_nan[0, 1, 1, 0] = float("nan")                  # key 1 of head 1: every query that sees it is NaN
    mask = causal_mask(4) if causal else None
    out = scaled_dot_product_attention(q_nan, k, v, mask, backend=backend)
    assert out[0, 0, 2].isnan().all() and not out[0, 0, [0, 1, 3]].isnan().any() and not out[0, 1].isnan().any()
    out = scaled_dot_product_attention(q, k_nan, v, mask, backend=backend)   # (with the causal mask, query 0
    assert out[0, 1, 1:].isnan().all() and not out[0, 0].isnan().any()     # does not see it: may differ)
    if not causal:
        assert out[0, 1, 0].isnan().all()


def test_non_float_inputs_are_type_errors():
    x = torch.randn(2, 3, 4)
    for bad in (torch.ones(2, 3, 4, dtype=torch.long), torch.ones(2, 3, 4, dtype=torch.bool),
                torch.ones(2, 3, 4, dtype=torch.cfloat)):
        with pytest.raises(TypeError, match="x must be a floating-point tensor"):
            softmax(bad)
        with pytest.raises(TypeError, match="q must be a floating-point tensor"):
            scaled_dot_product_attention(bad, x, x)
        with pytest.raises(TypeError, match="v must be a floating-point tensor"):
            scaled_dot_product_attention(x, x, bad)


def test_meta_and_cpu_inputs_do_not_mix():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="one device.*k on meta"):
        scaled_dot_product_attention(q, torch.empty(1, 2, 3, 4, device="meta"), q)
    with pytest.raises(ValueError, match="one device.*mask on meta"):
        scaled_dot_product_attention(q, q, q, causal_mask(3, device="meta"))


def test_empty_keys_and_zero_width_heads_are_value_errors():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="k and v must have the same length, >= 1"):
        scaled_dot_product_attention(q, torch.randn(1, 0, 4), torch.randn(1, 0, 4))
    with pytest.raises(ValueError, match="same last dimension, >= 1"):
        scaled_dot_product_attention(torch.randn(1, 3, 0), torch.randn(1, 3, 0), torch.randn(1, 3, 4))


def test_attention_mask_holds_only_zeros_and_ones():
    """A value check, made at the entry points (Llama.forward, generate); padding_mask runs inside
    every forward and checks the mask's dtype and shape only."""
    for bad in ([[1, 2, 1]], [[0, -1, 1]]):
        with pytest.raises(ValueError, match="attention_mask must hold only 0"):
            check_attention_mask_values(torch.tensor(bad))
    with pytest.raises(TypeError, match="attention_mask must hold integers or booleans"):
        padding_mask(torch.tensor([[0.0, 1.0]]))
    assert padding_mask(torch.tensor([[0, 1, 1]])).tolist() == [[[[False, True, True]]]]


def test_chapter_4_attention_is_the_llama_layer_without_the_later_steps():
    config = LlamaConfig(vocab_size=10, d_model=32, n_layers=1, n_heads=4)
    torch.manual_seed(0)
    plain = MultiHeadAttention(config)
    full = Attention(config)                 # no position hook, no cache, H_kv = H
    full.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert torch.equal(plain(x), full(x))
        assert torch.equal(plain(x), plain(x, causal_mask(5)))
    assert set(plain.state_dict()) == {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}


@pytest.mark.parametrize("backend", ["explicit", "sdpa"])
def test_explicit_scale_and_a_value_width_of_its_own(backend):
    # Chapter 12's MLA passes its own softmax scale, and its values are narrower than its keys;
    # the oracle is torch's F.scaled_dot_product_attention with the same scale.
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 3, 5, 12, generator=g), torch.randn(2, 3, 7, 12, generator=g)
    v = torch.randn(2, 3, 7, 4, generator=g)                    # d_v = 4, d = 12
    mask = causal_mask(5, 7)
    for scale in (0.05, 1.7):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        got = scaled_dot_product_attention(q, k, v, mask, backend, scale=scale)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    default = scaled_dot_product_attention(q, k, v, mask, backend)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask, backend, scale=12 ** -0.5), default)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale"):
            scaled_dot_product_attention(q, k, v, mask, backend, scale=bad)
    with pytest.raises(TypeError, match="scale"):
        scaled_dot_product_attention(q, k, v, mask, backend, scale="0.1")
