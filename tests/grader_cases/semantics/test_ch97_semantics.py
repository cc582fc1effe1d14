"""A graded suite for the grader's semantics and feedback (tests/e2e/test_grader.py): dependencies,
long assertion messages, a skip, a hanging exercise with two tests, and a homework public check."""

import pytest


@pytest.mark.graded("Exercise 97.1 first", points=2)
def test_first(impl):
    assert impl.first() == 1, "first() should return 1 (the worked example)"


@pytest.mark.graded("Exercise 97.1 first", points=1)
def test_first_list(impl):
    assert impl.first_list() == list(range(40))


@pytest.mark.graded("Exercise 97.2 second", points=2, depends=("Exercise 97.1",))
def test_second(impl):
    assert impl.second() == 2


@pytest.mark.graded("Exercise 97.3 skipped", points=1)
def test_skipped(impl):
    pytest.skip("needs a GPU")


@pytest.mark.graded("Exercise 97.4 hangs", points=1)
def test_hang_a(impl):
    assert impl.hang() == 0


@pytest.mark.graded("Exercise 97.4 hangs", points=1)
def test_hang_b(impl):
    assert impl.hang() == 0


@pytest.mark.graded("Homework 97.A hw", points=1, kind="homework")
def test_homework_public_check(impl):
    assert impl.hw() == 3
