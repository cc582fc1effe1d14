"""The argument predicates: wrong type -> TypeError, wrong value -> ValueError, the name in the message."""

import math

import numpy as np
import pytest
import torch

from llama_course.checks import (
    check_bool,
    check_finite,
    check_int,
    check_number,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_same_device,
    check_tensor,
)


def test_check_int_accepts_python_numpy_and_0d_tensor_ints():
    assert check_int("n", 3) == 3
    for value in (np.int64(3), np.int32(3), np.uint8(3), torch.tensor(3)):
        out = check_int("n", value)
        assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, "3", None, torch.tensor(3.0), torch.tensor([3])])
def test_check_int_rejects_non_ints_with_type_error(value):
    with pytest.raises(TypeError, match=r"n_heads must be an int, got"):
        check_int("n_heads", value)


def test_check_int_bounds_name_expected_and_given():
    with pytest.raises(ValueError, match=r"n must be an int >= 1, got 0"):
        check_positive_int("n", 0)
    with pytest.raises(ValueError, match=r"layer must be an int >= 0 and <= 3, got 4"):
        check_int("layer", 4, 0, 3)
    assert check_int("layer", 3, 0, 3) == 3


def test_check_number():
    assert check_number("p", np.float32(0.5), 0, 1) == 0.5
    assert check_positive_number("eps", 1e-6) == 1e-6
    for bad in (float("inf"), float("nan"), 0, -1.0):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            check_positive_number("eps", bad)
    for bad in (True, "1", None, 1j, torch.tensor(1j)):
        with pytest.raises(TypeError, match="eps must be a number"):
            check_positive_number("eps", bad)
    assert check_number("f", math.inf, low=1, finite=False) == math.inf
    with pytest.raises(ValueError, match="f must be a number >= 1, got nan"):
        check_number("f", math.nan, low=1, finite=False)
    with pytest.raises(ValueError, match=r"top_p must be a finite number > 0 and <= 1, got 1.5"):
        check_number("top_p", 1.5, 0, 1, low_open=True)


def test_check_finite_numbers_and_tensors():
    assert check_finite("x", 2.0) == 2.0
    with pytest.raises(ValueError, match="x must be finite"):
        check_finite("x", torch.tensor([1.0, float("nan")]))
    check_finite("x", torch.empty(3, device="meta"))   # no values to check


def test_check_bool_and_one_of():
    assert check_bool("tie", np.bool_(False)) is False
    with pytest.raises(TypeError, match="tie must be a bool, got int"):
        check_bool("tie", 1)
    assert check_one_of("backend", "sdpa", ("explicit", "sdpa")) == "sdpa"
    with pytest.raises(ValueError, match=r"backend must be one of \('explicit', 'sdpa'\), got 'flash'"):
        check_one_of("backend", "flash", ("explicit", "sdpa"))
    with pytest.raises(TypeError, match="backend must be one of"):
        check_one_of("backend", 1, ("explicit", "sdpa"))


def test_check_tensor_kinds_and_shapes():
    x = torch.zeros(2, 3)
    assert check_tensor("x", x, 2, floating=True) is x
    for bad in (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.cfloat)):
        with pytest.raises(TypeError, match="x must be a floating-point tensor, got torch"):
            check_tensor("x", bad, floating=True)
    for bad in (torch.zeros(2), torch.zeros(2, dtype=torch.bool)):
        with pytest.raises(TypeError, match="ids must be an integer tensor"):
            check_tensor("ids", bad, integer=True)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        check_tensor("x", [1.0])
    with pytest.raises(ValueError, match=r"x must have 3 dimensions, got shape \(2, 3\)"):
        check_tensor("x", x, 3)
    with pytest.raises(ValueError, match=r"x must have at least 3 dimensions"):
        check_tensor("x", x, min_ndim=3)
    with pytest.raises(ValueError, match=r"w must have shape \(3,\), got \(2, 3\)"):
        check_tensor("w", x, shape=(3,))


def test_device_mismatch_including_meta():
    cpu, meta = torch.zeros(2), torch.zeros(2, device="meta")
    with pytest.raises(ValueError, match="one device, got a on cpu, b on meta"):
        check_same_device(a=cpu, b=meta)
    with pytest.raises(ValueError, match="weight on meta"):
        check_tensor("weight", meta, like=cpu, like_name="x")
    assert check_same_device(a=cpu, b=None, c=cpu) == torch.device("cpu")


def test_predicates_are_pure_no_switch_turns_them_off():
    """The static rule (checks.py): a predicate depends on its arguments alone. The package has no
    context variable or global that makes checks pass without looking (the old checks.trusted())."""
    import pathlib

    import llama_course

    with pytest.raises(TypeError, match="k must be an int, got str"):
        check_int("k", "7")
    assert type(check_int("k", np.int64(7))) is int                       # always the clean value
    package = pathlib.Path(llama_course.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "contextvars" not in text and "trusted()" not in text, f"{path.name} switches checks off"


def test_a_model_forward_leaves_checks_on_and_its_layers_still_check_alone():
    from llama_course import LlamaConfig
    from llama_course.model import Llama

    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    model(torch.tensor([[1, 2, 3]]))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        model.norm(torch.ones(1, 32, dtype=torch.long))           # a module called on its own checks
    with pytest.raises(ValueError, match="input_ids must be in"):
        model(torch.tensor([[1, 2, 99]]))                         # forward checks its own inputs


def tiny_model():
    from llama_course import LlamaConfig
    from llama_course.model import Llama

    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, max_seq_len=16))


def test_forward_checks_metadata_always_and_values_unless_told_not_to():
    model = tiny_model()
    ids, mask = torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 1]])
    with pytest.raises(ValueError, match="attention_mask must hold only 0"):
        model(ids, attention_mask=mask)                                   # values read at the door
    model(ids, attention_mask=mask, check_values=False)                   # not read: the caller vouches
    for kwargs in ({}, {"check_values": False}):                          # metadata: always
        with pytest.raises(TypeError, match="input_ids must be an int64 or int32"):
            model(ids.float(), **kwargs)
        with pytest.raises(TypeError, match="attention_mask must hold integers or booleans"):
            model(ids, attention_mask=mask.float(), **kwargs)
        with pytest.raises(ValueError, match="positions must be"):
            model(ids, positions=torch.arange(4), **kwargs)
    with pytest.raises(TypeError, match="check_values must be a bool"):
        model(ids, check_values=0)


def test_generate_checks_the_prompt_and_feeds_back_its_own_tokens_without_reading_them(monkeypatch):
    import llama_course.model as model_module
    from llama_course.generate import generate

    model, reads = tiny_model(), []
    original = model_module.check_token_ids

    def spy(*args, values=True, **kwargs):
        reads.append(values)
        return original(*args, values=values, **kwargs)

    monkeypatch.setattr(model_module, "check_token_ids", spy)
    out = generate(model, torch.tensor([[1, 2, 3]]), 4)
    assert out.shape == (1, 7)
    assert reads == [True, False, False, False]                           # the prompt, then its own tokens
    with pytest.raises(ValueError, match="input_ids must be in"):
        generate(model, torch.tensor([[1, 2, 99]]), 2)
