"""The notebooks' declared tolerances (book/conftest.py): what they forgive and what they do not.

Hand-worked pairs of committed and fresh outputs; the rule is |fresh - committed| <= atol + rtol·|committed|
on decimal numbers only, everything else exact.
"""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("book_conftest", REPO / "book" / "conftest.py")
book_conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(book_conftest)
compare_within, read_tolerance = book_conftest.compare_within, book_conftest.read_tolerance


def test_decimals_within_the_tolerance_pass():
    committed = "layer 0: 0.02 0.11   max 0.47\n  L_aux 3.39; validation loss 3.81\n"
    fresh = "layer 0: 0.03 0.12   max 0.47\n  L_aux 3.38; validation loss 3.82\n"
    assert compare_within(committed, fresh, rtol=0.0, atol=0.011) is None
    assert compare_within("4.8e-06 and 1.4e-05", "4.9e-06 and 1.1e-05", rtol=0.0, atol=5e-5) is None
    assert compare_within("0.21", "0.2", rtol=0.0, atol=0.02) is None        # glue drops the trailing 0


def test_decimals_outside_the_tolerance_fail_and_say_which():
    reason = compare_within("validation loss 3.81", "validation loss 3.95", rtol=0.01, atol=0.0)
    assert reason is not None and "3.95" in reason and "3.81" in reason
    assert compare_within("1.4e-05", "2.0e-04", rtol=0.0, atol=5e-5) is not None
    assert compare_within("0.5", "nan", rtol=0.5, atol=0.5) is not None      # NaN is never close


def test_integers_and_text_stay_exact():
    assert compare_within("86,368 parameters", "86,369 parameters", rtol=0.5, atol=0.5) is not None
    assert compare_within("layer 0: 0.02", "layer 1: 0.02", rtol=0.5, atol=0.5) is not None
    assert compare_within("SwiGLU < GELU < ReLU", "SwiGLU < ReLU < GELU", rtol=0.5, atol=0.5) is not None
    assert compare_within("True", "False", rtol=0.5, atol=0.5) is not None
    assert compare_within("0.02 0.11", "0.02", rtol=0.5, atol=0.5) is not None   # a number missing
    # an integer is not a decimal: 3 -> 3.0 changes the text
    assert compare_within("loss 3", "loss 3.0", rtol=0.5, atol=0.5) is not None


def test_a_tolerance_needs_its_reason_and_sane_numbers():
    assert read_tolerance({}) is None
    assert read_tolerance({"tolerance": {"atol": 0.02, "why": "training"}}) == {"rtol": 0.0, "atol": 0.02}
    for bad in ({"atol": 0.02}, {"atol": 2.0, "why": "x"}, {"rtol": "0.1", "why": "x"}, {"tol": 0.1, "why": "x"}):
        with pytest.raises(ValueError, match="tolerance"):
            read_tolerance({"tolerance": bad})
