"""YourLlama (Chapter 14) refuses what it does not model and bad input, naming the argument."""

import pytest
import torch

from llama_course import your_llama as yl
from llama_course.config import LlamaConfig

CONFIG = LlamaConfig(vocab_size=11, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=12, rope_layout="half")


def state(config=CONFIG, dtype=torch.float32):
    return {name: torch.zeros(shape, dtype=dtype) for name, shape in yl.hf_names(config).items()}


@pytest.mark.parametrize("change, field", [
    (dict(qk_norm=True), "qk_norm"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    (dict(n_experts=2), "n_experts"),
    (dict(kv_lora_rank=4, q_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4), "_rank"),
    (dict(sliding_window=4), "sliding_window"),
    (dict(rope_layout="interleaved"), "rope_layout"),
])
def test_a_config_it_does_not_model_is_refused(change, field):
    with pytest.raises(ValueError, match=field):
        yl.YourLlama(CONFIG.replace(**change), yl.Pieces())


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError, match="config"):
        yl.YourLlama({"vocab_size": 11}, yl.Pieces())
    with pytest.raises(TypeError, match="pieces"):
        yl.YourLlama(CONFIG, {})


def test_a_state_dict_with_missing_or_unexpected_keys_lists_them():
    with pytest.raises(ValueError, match=r"missing.*model\.embed_tokens\.weight"):
        yl.YourLlama(CONFIG, yl.Pieces(), {})
    extra = state() | {"model.layers.7.mlp.up_proj.weight": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"unexpected.*model\.layers\.7\.mlp\.up_proj\.weight"):
        yl.YourLlama(CONFIG, yl.Pieces(), extra)


def test_parameters_keep_the_state_dicts_dtype_and_the_placeholder_is_explicit():
    model = yl.YourLlama(CONFIG, yl.Pieces(), state(dtype=torch.float64))
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    model = yl.YourLlama(CONFIG, yl.Pieces(), dtype=torch.bfloat16, device="meta")
    assert {(p.dtype, p.device.type) for p in model.parameters()} == {(torch.bfloat16, "meta")}


def test_mix_names_the_valid_pieces():
    with pytest.raises(ValueError, match=r"take.*RoPE.*'rope'"):
        yl.mix(yl.Pieces(), yl.Pieces(), take=("rope",))
    with pytest.raises(TypeError, match="take"):
        yl.mix(yl.Pieces(), yl.Pieces(), take="RoPE")


def test_draw_next_and_sample_tokens_check_their_arguments():
    from llama_course.grade.capstone import package_pieces

    P, logits, g = package_pieces(), torch.randn(2, 11), torch.Generator().manual_seed(0)
    assert yl.draw_next(P, logits, 0.8, 0.9, g).shape == (2, 1)
    with pytest.raises(ValueError, match="temperature"):
        yl.draw_next(P, logits, 0.0, 0.9, g)
    with pytest.raises(TypeError, match="temperature"):
        yl.draw_next(P, logits, "hot", 0.9, g)
    with pytest.raises(ValueError, match="top_p"):
        yl.draw_next(P, logits, 0.8, 1.5, g)
    with pytest.raises(ValueError, match="logits"):
        yl.draw_next(P, logits[0], 0.8, 0.9, g)
    with pytest.raises(TypeError, match="generator"):
        yl.draw_next(P, logits, 0.8, 0.9, 0)
    model = yl.YourLlama(CONFIG, P, state())
    with pytest.raises(ValueError, match="max_new_tokens"):
        yl.sample_tokens(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(ValueError, match="input_ids"):
        yl.sample_tokens(model, torch.full((1, 3), 11), 2)
    with pytest.raises(TypeError, match="model"):
        yl.sample_tokens(object(), torch.zeros(1, 3, dtype=torch.long), 2)


def test_capstone_functions_are_short_and_grade_returns_its_curves():
    """Teaching-module rule: no function over ~50 lines (training_check was 70); grade() hands back
    part (c)'s curves in its return value, not on a function attribute (grade.last)."""
    import ast
    import inspect

    from llama_course.grade import capstone

    tree = ast.parse(inspect.getsource(capstone))
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 50]
    assert not long, long
    assert "grade.last" not in inspect.getsource(capstone)
    assert inspect.signature(capstone.grade).return_annotation == "Graded"
    assert {"parts", "curves"} <= set(capstone.Graded.__dataclass_fields__)
