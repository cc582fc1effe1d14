"""The whole model against transformers' LlamaForCausalLM: padding, presets, bad input (loading
checkpoints is in test_checkpoint.py)."""

import pytest
import torch

from llama_course import PRESETS, LlamaConfig, count_parameters
from llama_course.grade.testing import realistic_weights_
from llama_course.model import Llama

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "mha-untied": dict(vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, intermediate_size=176),
    "gqa-tied": dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=8,
                     num_key_value_heads=2, intermediate_size=160, tie_word_embeddings=True),
    "mqa-theta": dict(vocab_size=257, hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=1, intermediate_size=256, rope_theta=500000.0),
}


def hf_model(name, seed=0):
    config = transformers.LlamaConfig(**CONFIGS[name], max_position_embeddings=256, rms_norm_eps=1e-5,
                                      attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    realistic_weights_(model, std=0.2)
    return model


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def saved(request, tmp_path_factory):
    model = hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path, max_shard_size="100KB")  # several shards and an index
    return model, path


def test_left_padding_matches(saved):
    reference, path = saved
    ours = Llama.from_hf(path)
    ids = torch.randint(0, reference.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[0, :3] = 0                                  # row 0: 3 pads, then 6 real tokens
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)   # each row's first real token is 0
    with torch.no_grad():
        expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
        logits = ours(ids, attention_mask=attention_mask)
    real = attention_mask.bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=1e-5, atol=1e-5)
    alone = ours(ids[:1, 3:])                                  # the padded row, unpadded, alone
    torch.testing.assert_close(logits[0, 3:], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_on_meta_allocate_nothing_and_count_right(name):
    with torch.device("meta"):
        model = Llama(PRESETS[name])
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == count_parameters(PRESETS[name])["total"]


def test_meta_forward_shapes_of_llama2_7b():
    with torch.device("meta"):
        model = Llama(PRESETS["llama2-7b"])
        logits = model(torch.zeros(1, 6, dtype=torch.long))
    assert logits.shape == (1, 6, 32000) and logits.device.type == "meta"


def test_tied_head_is_one_matrix():
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, tie_embeddings=True))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == count_parameters(model.config)["total"]


def test_bad_input():
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    with pytest.raises(TypeError, match="input_ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="input_ids"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="token id 50"):
        model(torch.tensor([[1, 50]]))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3, dtype=torch.long))
