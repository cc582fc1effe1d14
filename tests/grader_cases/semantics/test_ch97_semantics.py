"""A graded suite for the grader's semantics and feedback (tests/e2e/test_grader.py): dependencies,
long assertion messages, a skip, a hanging exercise with two tests, and a homework public check."""

import pytest

from llama_course.grade.points import problem

POINTS = {"Exercise 97.1": problem("first", 3), "Exercise 97.2": problem("second", 2),
          "Exercise 97.3": problem("skipped", 1), "Exercise 97.4": problem("hangs", 2),
          "Homework 97.A": problem("hw", 1)}  # a synthetic chapter's own points table (llama_course.grade.points)


@pytest.mark.graded("Exercise 97.1 first", weight=2)
def test_first(impl):
    assert impl.first() == 1, "first() should return 1 (the worked example)"


@pytest.mark.graded("Exercise 97.1 first", weight=1)
def test_first_list(impl):
    assert impl.first_list() == list(range(40))


@pytest.mark.graded("Exercise 97.2 second", weight=2, depends=("Exercise 97.1",))
def test_second(impl):
    assert impl.second() == 2


@pytest.mark.graded("Exercise 97.3 skipped", weight=1)
def test_skipped(impl):
    pytest.skip("needs a GPU")


@pytest.mark.graded("Exercise 97.4 hangs", weight=1)
def test_hang_a(impl):
    assert impl.hang() == 0


@pytest.mark.graded("Exercise 97.4 hangs", weight=1)
def test_hang_b(impl):
    assert impl.hang() == 0


@pytest.mark.graded("Homework 97.A hw", weight=1, kind="homework")
def test_homework_public_check(impl):
    assert impl.hw() == 3
