"""next_token_loss against torch's cross-entropy (the oracle), on every device and dtype."""

import math

import pytest
import torch
import torch.nn.functional as F

from llama_course import next_token_loss

# The oracle sees the very same (already rounded) logits, and the loss is computed in float32
# from any lower precision: float32's tolerance for every dtype but float64.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 1e-5, torch.float16: 1e-5}


def oracle(logits, ids):
    return F.cross_entropy(logits[:, :-1].double().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_matches_cross_entropy(device, dtype):
    if device.type == "mps" and dtype == torch.float64:
        pytest.skip("MPS has no float64")
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 7, 50, generator=g) * 3).to(device, dtype)
    ids = torch.randint(0, 50, (3, 7), generator=g).to(device)
    loss = next_token_loss(logits, ids)
    assert loss.device.type == device.type and loss.shape == ()
    assert loss.item() == pytest.approx(oracle(logits.cpu(), ids.cpu()).item(), abs=TOL[dtype], rel=TOL[dtype])


def test_worked_example_by_hand():
    # vocabulary of 2, logits (0, log 3): p = (1/4, 3/4); targets 1 then 0
    z = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)], [5.0, 5.0]]])
    ids = torch.tensor([[0, 1, 0]])
    expected = -(math.log(3 / 4) + math.log(1 / 4)) / 2
    assert next_token_loss(z, ids).item() == pytest.approx(expected, rel=1e-6)


def test_stable_for_huge_logits(device):
    logits = torch.tensor([[[1e4, -1e4, 0.0], [0.0, 1e4, -1e4], [0.0, 0.0, 0.0]]], device=device)
    ids = torch.tensor([[2, 1, 0]], device=device)
    loss = next_token_loss(logits, ids)
    assert torch.isfinite(loss)
    # position 0 sees token 1: -log p = 1e4 - (-1e4) = 2e4; position 1 sees token 0: 1e4 - 0 = 1e4
    assert loss.item() == pytest.approx((2e4 + 1e4) / 2, rel=1e-6)


def test_bad_input():
    z = torch.zeros(1, 4, 10)
    with pytest.raises(ValueError, match="token_ids"):
        next_token_loss(z, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids must be in"):
        next_token_loss(z, torch.tensor([[0, 1, 2, 10]]))
    with pytest.raises(TypeError, match="token_ids"):
        next_token_loss(z, torch.zeros(1, 4))
    with pytest.raises(ValueError, match="logits"):
        next_token_loss(torch.zeros(4, 10), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="at least 2"):
        next_token_loss(torch.zeros(1, 1, 10), torch.zeros(1, 1, dtype=torch.long))


def test_empty_batch_non_float_logits_and_mixed_devices():
    with pytest.raises(ValueError, match="at least 1 sequence"):
        next_token_loss(torch.zeros(0, 4, 10), torch.zeros(0, 4, dtype=torch.long))
    for bad in (torch.zeros(1, 4, 10, dtype=torch.long), torch.zeros(1, 4, 10, dtype=torch.bool),
                torch.zeros(1, 4, 10, dtype=torch.cfloat)):
        with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
            next_token_loss(bad, torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="one device"):
        next_token_loss(torch.zeros(1, 4, 10), torch.zeros(1, 4, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match="one device"):
        next_token_loss(torch.zeros(1, 4, 10, device="meta"), torch.zeros(1, 4, dtype=torch.long))
