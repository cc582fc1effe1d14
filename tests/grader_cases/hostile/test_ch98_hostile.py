"""A graded suite for the hostile-submission tests (tests/e2e/test_hostile_submissions.py): the
submission's answer() must return 42 and other() 1. The submissions are written by the tests."""

import pytest

from llama_course.grade.points import problem

POINTS = {"Exercise 98.1": problem("answer", 1), "Exercise 98.2": problem("other", 1)}

EX = "Exercise 98.1 answer"


@pytest.mark.graded(EX, weight=1)
def test_answer(impl):
    assert impl.answer() == 42


@pytest.mark.graded("Exercise 98.2 other", weight=1)
def test_other(impl):
    assert impl.other() == 1
