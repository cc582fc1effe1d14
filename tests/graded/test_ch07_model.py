"""Graded tests for Chapter 7 (exercises/ch07_model.py).

Oracles: transformers' LlamaDecoderLayer and LlamaForCausalLM on the same weights (realistic
scale, GQA and a tied head included), and the course model's parameter names.
"""

import pytest
import torch

from llama_course import LlamaConfig
from llama_course.grade.testing import realistic_weights_

BLOCK = "Exercise 7.1 llama_block"
FORWARD = "Exercise 7.2 llama_forward"
NAMES = "Exercise 7.3 hf_to_course_names"

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


@pytest.mark.graded(BLOCK, points=4)
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
    torch.testing.assert_close(impl.llama_block(x, weights, config, positions), expected, **TOL)


@pytest.mark.graded(FORWARD, points=4)
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
    assert logits.shape == (2, 8, 97)
    torch.testing.assert_close(logits, expected, **TOL)


@pytest.mark.graded(NAMES, points=2)
def test_name_map(impl):
    from llama_course.model import Llama

    model, config = hf_model(seed=4)
    hf_state = {name: torch.zeros(1) for name in model.state_dict()}
    hf_state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(1)  # older checkpoints
    renamed = impl.hf_to_course_names(hf_state)
    with torch.device("meta"):
        course_names = set(Llama(config).state_dict())
    assert set(renamed) == course_names
    assert "layers.1.mlp.down_proj.weight" in renamed and "lm_head.weight" in renamed
