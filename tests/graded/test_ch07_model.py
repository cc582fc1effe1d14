"""Graded tests for Chapter 7 (exercises/ch07_model.py).

Oracles: transformers' LlamaDecoderLayer and LlamaForCausalLM on the same weights (realistic
scale, GQA and a tied head included), and the course model's parameter names.
Homework 7.A and 7.B: public checks only (the docstrings' examples and shapes).
"""

import pytest
import torch

from llama_course import LlamaConfig
from llama_course.grade.testing import realistic_weights_

from ._checks import assert_close

BLOCK = "Exercise 7.1 llama_block"
FORWARD = "Exercise 7.2 llama_forward"
NAMES = "Exercise 7.3 hf_to_course_names"
PARALLEL = "Homework 7.A parallel_block"
LENS = "Homework 7.B logit_lens"

transformers = pytest.importorskip("transformers")

# float32 through a block or two: the reference implementation is within 1e-5 of transformers
# (outputs up to ~20); 1e-4 leaves room for other correct orders of the same operations
TOL = dict(rtol=1e-4, atol=1e-4)


def hf_model(tie=False, n_kv_heads=2, seed=0):
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=n_kv_heads, intermediate_size=160,
                                      tie_word_embeddings=tie, rms_norm_eps=1e-5, max_position_embeddings=128,
                                      rope_theta=10000.0, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    realistic_weights_(model, std=0.2)
    course = LlamaConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_ff=160,
                         norm_eps=1e-5, max_seq_len=128, tie_embeddings=tie, rope_layout="half")
    return model, course


@pytest.mark.graded(BLOCK, weight=4)
@pytest.mark.parametrize("n_kv_heads", [4, 2], ids=["mha", "gqa"])
def test_block_matches_transformers(impl, n_kv_heads):
    model, config = hf_model(n_kv_heads=n_kv_heads)
    layer = model.model.layers[1]
    weights = {name: p.detach().clone() for name, p in layer.state_dict().items()}
    x = torch.randn(2, 6, 64, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(6)
    with torch.no_grad():
        rotary = model.model.rotary_emb(x, positions[None].expand(2, 6))
        causal = torch.full((6, 6), float("-inf")).triu(1)[None, None]
        expected = layer(x, attention_mask=causal, position_embeddings=rotary)
        expected = expected[0] if isinstance(expected, tuple) else expected
    assert_close(impl.llama_block(x, weights, config, positions), expected,
                 f"llama_block ({'MHA' if n_kv_heads == 4 else 'GQA'}) vs transformers' LlamaDecoderLayer", **TOL)


@pytest.mark.graded(FORWARD, weight=4, depends=("Exercise 7.1",))
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_forward_matches_transformers(impl, tie):
    model, config = hf_model(tie=tie, seed=2)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    if tie:
        state.pop("lm_head.weight", None)  # a tied checkpoint stores the matrix once
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(ids).logits
    logits = impl.llama_forward(ids, state, config)
    assert logits.shape == (2, 8, 97), f"llama_forward returned shape {tuple(logits.shape)}, expected (2, 8, 97)"
    assert_close(logits, expected, f"logits ({'tied' if tie else 'untied'} head) vs transformers' LlamaForCausalLM",
                 **TOL)


@pytest.mark.graded(NAMES, weight=2)
def test_name_map(impl):
    from llama_course.model import Llama

    model, config = hf_model(seed=4)
    hf_state = {name: torch.zeros(1) for name in model.state_dict()}
    hf_state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(1)  # older checkpoints
    renamed = impl.hf_to_course_names(hf_state)
    with torch.device("meta"):
        course_names = set(Llama(config).state_dict())
    missing, extra = sorted(course_names - set(renamed)), sorted(set(renamed) - course_names)
    assert not missing and not extra, f"names the course model expects but are missing: {missing[:4]}; " \
                                      f"names it does not know: {extra[:4]}"


@pytest.mark.graded(PARALLEL, weight=1, kind="homework")
def test_parallel_block_zero_weights_is_identity(impl):
    _, config = hf_model()
    zeros = {f"self_attn.{n}_proj.weight": torch.zeros(64 if n in "qo" else 32, 64) for n in "qkvo"}
    zeros["self_attn.o_proj.weight"] = torch.zeros(64, 64)
    zeros |= {"mlp.gate_proj.weight": torch.zeros(160, 64), "mlp.up_proj.weight": torch.zeros(160, 64),
              "mlp.down_proj.weight": torch.zeros(64, 160), "input_layernorm.weight": torch.ones(64)}
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(5))
    out = impl.parallel_block(x, zeros, config, torch.arange(5))
    assert out.shape == x.shape, f"parallel_block returned shape {tuple(out.shape)}, expected {tuple(x.shape)}"
    assert_close(out, x, "with every projection zero the parallel block must return x", rtol=0, atol=1e-6)


@pytest.mark.graded(LENS, weight=1, kind="homework")
def test_logit_lens_shape_and_row_zero(impl):
    model, config = hf_model(seed=6)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(7))
    lens = impl.logit_lens(ids, state, config)
    assert lens.shape == (3, 2, 6, 97), f"logit_lens returned shape {tuple(lens.shape)}, expected (3, 2, 6, 97)"
    changed = ids.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 97
    again = impl.logit_lens(changed, state, config)
    keep = [0, 1, 2, 4, 5]
    assert_close(again[0][:, keep], lens[0][:, keep], "row 0 (before any block) must depend on each token alone")
