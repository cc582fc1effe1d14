"""A graded suite for the grader's own tests: each test calls one misbehaving function of
submission/ch99_misbehave.py. Only the well-behaved ones may earn points."""

import pytest
import torch

from llama_course.grade.points import problem

POINTS = {"Exercise 99.1": problem("misbehaving code", 13)}  # one point a test (llama_course.grade.points)

EX = "Exercise 99.1 misbehaving code"


@pytest.mark.graded(EX, weight=1)
def test_good(impl):
    assert impl.good(41) == 42


@pytest.mark.graded(EX, weight=1)
def test_exits(impl):
    assert impl.exits() == 42


@pytest.mark.graded(EX, weight=1)
def test_hard_exit(impl):
    assert impl.hard_exit() == 42


@pytest.mark.graded(EX, weight=1)
def test_hangs(impl):
    assert impl.hangs() == 42


@pytest.mark.graded(EX, weight=1)
def test_noisy(impl):
    assert impl.noisy() == 42  # prints megabytes, but answers correctly


@pytest.mark.graded(EX, weight=1)
def test_wrong_shape(impl):
    assert impl.wrong_shape().shape == (2, 3)


@pytest.mark.graded(EX, weight=1)
def test_patches_torch(impl):
    assert torch.allclose(impl.patches_torch(), torch.ones(3))


@pytest.mark.graded(EX, weight=1)
def test_good_after_patch(impl):
    assert torch.equal(impl.ones(3), torch.ones(3))


@pytest.mark.graded(EX, weight=1)
def test_writes_results(impl):
    assert impl.writes_results() == 42


@pytest.mark.graded(EX, weight=1)
def test_spawns_writer(impl):
    assert impl.spawns_writer() == 42


@pytest.mark.graded(EX, weight=1)
def test_liar(impl):
    assert impl.liar() == 42


@pytest.mark.graded(EX, weight=1)
def test_raises_value_error(impl):
    with pytest.raises(ValueError, match="d_model"):
        impl.checks_input(-1)


@pytest.mark.graded(EX, weight=1)
def test_remote_object(impl):
    counter = impl.Counter(5)
    assert counter.step(2) == 7
    assert list(counter.upto(3)) == [0, 1, 2]
    assert len(counter) == 7
