"""A graded suite for the reference-use check (tests/e2e/test_hostile_submissions.py): two Chapter 4
exercises, graded from a submission's ch04_attention.py."""

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.graded("Exercise 4.1 softmax", weight=1)
def test_softmax(impl):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(impl.softmax(x), F.softmax(x, dim=-1))


@pytest.mark.graded("Exercise 4.2 causal_mask", weight=1)
def test_causal_mask(impl):
    assert impl.causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
