"""Hidden tests for Chapter 7 (instructor edition and Gradescope only).

Oracles: transformers' Llama modules on the same weights -- for Homework 7.A the layer's own
input_layernorm, self_attn and mlp composed in parallel; for Homework 7.B the hidden states
LlamaForCausalLM returns (output_hidden_states=True) passed through its final norm and head.
"""

import pytest
import torch
from graded._checks import assert_close

transformers = pytest.importorskip("transformers")

from graded.test_ch07_model import TOL, hf_model  # noqa: E402  (after the importorskip)

PARALLEL = "Homework 7.A parallel_block"
LENS = "Homework 7.B logit_lens"


@pytest.mark.graded(PARALLEL, weight=2, kind="homework")
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_parallel_block_matches_transformers_modules(impl, n_kv_heads):
    model, config = hf_model(n_kv_heads=n_kv_heads, seed=11)
    layer = model.model.layers[0]
    weights = {n: p.detach().clone() for n, p in layer.state_dict().items() if not n.startswith("post_attention")}
    x = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(12)) * 2
    positions = torch.arange(3, 10)
    with torch.no_grad():
        rotary = model.model.rotary_emb(x, positions[None].expand(2, 7))
        causal = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        n = layer.input_layernorm(x)
        attn = layer.self_attn(hidden_states=n, position_embeddings=rotary, attention_mask=causal)[0]
        expected = x + attn + layer.mlp(n)
    got = impl.parallel_block(x, weights, config, positions)
    assert_close(got, expected, f"parallel_block ({n_kv_heads} KV heads, positions 3..9) vs x + attn(n) + mlp(n)",
                 **TOL)


@pytest.mark.graded(PARALLEL, weight=2, kind="homework")
def test_parallel_block_is_causal_and_keeps_dtype(impl):
    model, config = hf_model(seed=13)
    weights = {n: p.detach().clone() for n, p in model.model.layers[1].state_dict().items()
               if not n.startswith("post_attention")}
    x = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(14))
    out = impl.parallel_block(x, weights, config, torch.arange(6))
    x2 = x.clone()
    x2[:, 4:] += 5.0
    assert_close(impl.parallel_block(x2, weights, config, torch.arange(6))[:, :4], out[:, :4],
                 "changing tokens 4 and 5 changed the outputs of tokens 0-3 (attention must be causal)",
                 rtol=0, atol=1e-6)
    half = impl.parallel_block(x.to(torch.bfloat16), {k: v.to(torch.bfloat16) for k, v in weights.items()},
                               config, torch.arange(6))
    assert half.dtype == torch.bfloat16, f"bf16 input must give a bf16 output, got {half.dtype}"


@pytest.mark.graded(LENS, weight=4, kind="homework", depends=("Exercise 7.1",))
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_logit_lens_matches_transformers_hidden_states(impl, tie):
    model, config = hf_model(tie=tie, seed=15)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    if tie:
        state.pop("lm_head.weight", None)
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(16))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        hidden = out.hidden_states                               # embeddings, block 1, final (already normed)
        expected = torch.stack([model.lm_head(model.model.norm(h)) for h in hidden[:-1]] + [out.logits])
    lens = impl.logit_lens(ids, state, config)
    assert lens.shape == expected.shape, f"logit_lens shape {tuple(lens.shape)}, expected {tuple(expected.shape)}"
    for layer in range(3):
        assert_close(lens[layer], expected[layer], f"row {layer} of the logit lens ({'tied' if tie else 'untied'} "
                     f"head) vs transformers' hidden state {layer} through the final norm and head", **TOL)
