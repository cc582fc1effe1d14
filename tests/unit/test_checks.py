"""The argument predicates: wrong type -> TypeError, wrong value -> ValueError, the name in the message."""

import math

import numpy as np
import pytest
import torch

from llama_course.checks import (
    argument_check,
    check_bool,
    check_finite,
    check_int,
    check_number,
    check_one_of,
    check_positive_int,
    check_positive_number,
    check_same_device,
    check_tensor,
    trusted,
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


def test_trusted_skips_checks_only_inside_and_is_restored_after_an_error():
    @argument_check
    def check_even(name, value):
        if value % 2:
            raise ValueError(f"{name} must be even, got {value}")

    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        check_tensor("x", 3)
    with pytest.raises(ValueError, match="n must be even"):
        check_even("n", 3)
    with trusted():
        assert check_tensor("x", 3) == 3 and check_int("k", "7") == "7"   # passed through, unread
        assert check_even("n", 3) is None
    with pytest.raises(RuntimeError), trusted():
        raise RuntimeError("an error inside the block")
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):   # checking again after it
        check_tensor("x", 3)


def test_a_model_forward_leaves_checks_on_and_its_layers_still_check_alone():
    from llama_course import LlamaConfig
    from llama_course.model import Llama

    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    model(torch.tensor([[1, 2, 3]]))                              # runs its layers inside trusted()
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        model.norm(torch.ones(1, 32, dtype=torch.long))           # a module called on its own checks
    with pytest.raises(ValueError, match="input_ids must be in"):
        model(torch.tensor([[1, 2, 99]]))                         # forward checks its own inputs
