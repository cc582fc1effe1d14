"""A graded suite for the hostile-submission tests (tests/e2e/test_hostile_submissions.py): the
submission's answer() must return 42 and other() 1. The submissions are written by the tests."""

import pytest

EX = "Exercise 98.1 answer"


@pytest.mark.graded(EX, points=1)
def test_answer(impl):
    assert impl.answer() == 42


@pytest.mark.graded("Exercise 98.2 other", points=1)
def test_other(impl):
    assert impl.other() == 1
