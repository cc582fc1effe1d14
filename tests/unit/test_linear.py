"""llama_course.linear: nn.Linear's result, with few-row CPU products split across the threads."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from llama_course.linear import MAX_ROWS, MIN_WEIGHTS, Linear, linear


class OpLog(TorchDispatchMode):
    """The ATen ops a call runs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield lambda n: torch.set_num_threads(n)
    torch.set_num_threads(before)


def assert_close_to(got, reference):
    """float32 sums in another order: equal up to rounding relative to the output's scale."""
    scale = reference.abs().max().item()
    torch.testing.assert_close(got.double(), reference.double(), rtol=1e-5, atol=1e-6 * scale)


def ops_of(fn):
    with OpLog() as log:
        fn()
    return log.ops


@pytest.mark.parametrize("shape", [(1, 768), (1, 1, 768), (8, 1, 768), (2, 3, 768), (MAX_ROWS, 768)])
@pytest.mark.parametrize("n_threads", [2, 4])
def test_equals_f_linear_and_uses_the_split(shape, n_threads, threads):
    threads(n_threads)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(1024, 768, generator=g)
    x = torch.randn(*shape, generator=g)
    assert "bmm" in ops_of(lambda: linear(x, weight))
    assert_close_to(linear(x, weight), F.linear(x.double(), weight.double()))


@pytest.mark.parametrize("case", ["many rows", "one thread", "rows not divisible", "small matrix",
                                  "non-contiguous weight"])
def test_falls_back_to_f_linear(case, threads):
    threads(1 if case == "one thread" else 2)
    g = torch.Generator().manual_seed(1)
    d_out = {"rows not divisible": 1023, "small matrix": 64}.get(case, 1024)
    weight = torch.randn(d_out, 768, generator=g)
    if case == "non-contiguous weight":
        weight = torch.randn(768, d_out, generator=g).T
    x = torch.randn(MAX_ROWS + 1 if case == "many rows" else 1, 768, generator=g)
    if case == "small matrix":
        assert weight.numel() < MIN_WEIGHTS
    assert "bmm" not in ops_of(lambda: linear(x, weight))
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight))


def test_bias_gradients_and_dtype(threads):
    threads(2)
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(1024, 512, generator=g, requires_grad=True)
    bias = torch.randn(1024, generator=g, requires_grad=True)
    x = torch.randn(3, 512, generator=g, requires_grad=True)
    y = linear(x, weight, bias)
    (y * torch.arange(1024.0)).sum().backward()
    grads = [t.grad.clone() for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    (F.linear(x.double(), weight.double(), bias.double()) * torch.arange(1024.0)).sum().backward()
    for got, t in zip(grads, (x, weight, bias)):
        assert_close_to(got, t.grad)
    xb, wb = x.detach().bfloat16(), weight.detach().bfloat16()
    half = linear(xb, wb)
    assert half.dtype == torch.bfloat16
    # the oracle: the same bf16 numbers multiplied in float64, so what is left is bf16 rounding
    # (2^-9 relative per rounding; under 2^-8 measured here)
    reference = F.linear(xb.double(), wb.double())
    torch.testing.assert_close(half.double(), reference, rtol=2**-7, atol=1e-4 * reference.abs().max().item())


def test_module_is_an_nn_linear_with_the_same_state_dict():
    torch.manual_seed(3)
    ours = Linear(768, 1024, bias=False)
    reference = torch.nn.Linear(768, 1024, bias=False)
    reference.load_state_dict(ours.state_dict())
    assert isinstance(ours, torch.nn.Linear) and list(ours.state_dict()) == ["weight"]
    x = torch.randn(1, 1, 768)
    assert_close_to(ours(x), reference(x))
