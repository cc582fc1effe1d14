"""Hidden tests for Chapter 6 (instructor edition and Gradescope only).

Oracles: torch.autograd through F.silu (Homework 6.A); for Homework 6.B, each hidden unit's
contribution h_nj * W_down[:, j] computed one unit at a time, and the invariant that the full FFN
minus the pruned one equals the sum of the dropped units' contributions.
"""

import pytest
import torch
import torch.nn.functional as F
from graded._checks import assert_close, assert_equal

BACKWARD = "Homework 6.A swiglu_backward"
PRUNE = "Homework 6.B prune_ffn"


def weights(d, f, seed, dtype=torch.float32, std=0.3):
    g = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(*s, generator=g, dtype=torch.float64) * std).to(dtype) for s in ((f, d), (f, d), (d, f)))


def autograd_grads(x, w_gate, w_up, w_down, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w_gate, w_up, w_down)]
    xs, wg, wu, wd = leaves
    y = (F.silu(xs @ wg.T) * (xs @ wu.T)) @ wd.T
    y.backward(dy)
    return [t.grad for t in leaves]


@pytest.mark.graded(BACKWARD, weight=3, kind="homework")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_swiglu_backward_matches_autograd(impl, device, dtype):
    w_gate, w_up, w_down = (w.to(device) for w in weights(16, 40, seed=0, dtype=dtype))
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 5, 16, generator=g, dtype=torch.float64) * 2).to(device, dtype)
    dy = torch.randn(3, 5, 16, generator=g, dtype=torch.float64).to(device, dtype)
    got = impl.swiglu_backward(x, w_gate, w_up, w_down, dy)
    expected = autograd_grads(x, w_gate, w_up, w_down, dy)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    for name, a, e in zip(("grad_x", "grad_w_gate", "grad_w_up", "grad_w_down"), got, expected):
        assert a.dtype == dtype, f"{name}: dtype {a.dtype}, expected the inputs' {dtype}"
        assert_close(a, e, f"{name} ({dtype}, x of shape (3, 5, 16)) vs autograd", **tol)


@pytest.mark.graded(BACKWARD, weight=3, kind="homework")
def test_swiglu_backward_large_preactivations_and_no_autograd(impl, impl_source):
    w_gate, w_up, w_down = weights(8, 12, seed=2, dtype=torch.float64, std=3.0)   # SiLU far into both tails
    x = torch.randn(7, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2
    dy = torch.randn(7, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    got = impl.swiglu_backward(x, w_gate, w_up, w_down, dy)
    for name, a, e in zip(("grad_x", "grad_w_gate", "grad_w_up", "grad_w_down"), got,
                          autograd_grads(x, w_gate, w_up, w_down, dy)):
        assert_close(a, e, f"{name} with pre-activations of size ~20 vs autograd (check SiLU'(a))",
                     rtol=1e-9, atol=1e-9)
    body = impl_source("swiglu_backward").split('"""')[-1]
    for forbidden in ("autograd", ".backward("):
        assert forbidden not in body, f"swiglu_backward must compute the gradient by hand, without {forbidden}"


def contributions(x, w_gate, w_up, w_down):
    """(N, d_ff, d_model): hidden unit j's contribution to token n's output, one unit at a time."""
    xs = x.reshape(-1, x.shape[-1]).double()
    out = []
    for j in range(w_gate.shape[0]):
        a = xs @ w_gate[j].double()
        h = F.silu(a) * (xs @ w_up[j].double())                       # (N,)
        out.append(h[:, None] * w_down[:, j].double()[None, :])     # (N, d)
    return torch.stack(out, dim=1)


@pytest.mark.graded(PRUNE, weight=4, kind="homework")
def test_prune_ffn_keeps_the_most_important_units(impl):
    w_gate, w_up, w_down = weights(12, 30, seed=5)
    w_down = w_down * torch.linspace(0.2, 3.0, 30)[None, :]                     # column norms matter too
    x = torch.randn(4, 6, 12, generator=torch.Generator().manual_seed(6))
    parts = contributions(x, w_gate, w_up, w_down)                             # (24, 30, 12)
    score = parts.norm(dim=-1).mean(dim=0)                                     # mean contribution size
    for keep in (1, 7, 29, 30):
        kept = sorted(sorted(range(30), key=lambda j: -score[j].item())[:keep])
        g2, u2, d2 = impl.prune_ffn(w_gate, w_up, w_down, x, keep)
        assert g2.shape == (keep, 12) and u2.shape == (keep, 12) and d2.shape == (12, keep), \
            f"keep={keep}: shapes {tuple(g2.shape)}, {tuple(u2.shape)}, {tuple(d2.shape)}"
        assert_equal(g2, w_gate[kept], f"keep={keep}: w_gate' must be the rows of units {kept[:8]}... in order")
        assert_equal(u2, w_up[kept], f"keep={keep}: w_up' rows")
        assert_equal(d2, w_down[:, kept], f"keep={keep}: w_down' columns")
        xs = x.reshape(-1, 12)
        full = (F.silu(xs @ w_gate.T) * (xs @ w_up.T)) @ w_down.T
        pruned = (F.silu(xs @ g2.T) * (xs @ u2.T)) @ d2.T
        dropped = [j for j in range(30) if j not in kept]
        assert_close(full - pruned, parts[:, dropped].sum(dim=1).float() if dropped else torch.zeros_like(full),
                     f"keep={keep}: full FFN - pruned FFN must be the dropped units' contributions", atol=1e-4)


@pytest.mark.graded(PRUNE, weight=3, kind="homework")
def test_prune_ffn_ties_dtype_and_errors(impl):
    w_gate, w_up, w_down = weights(6, 4, seed=7)
    w_gate = torch.cat([w_gate, w_gate[1:2], w_gate[1:2]])                   # units 4 and 5 duplicate unit 1
    w_up = torch.cat([w_up, w_up[1:2], w_up[1:2]])
    w_down = torch.cat([w_down, w_down[:, 1:2], w_down[:, 1:2]], dim=1)
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(8))
    score = contributions(x, w_gate, w_up, w_down).norm(dim=-1).mean(0)
    rank_of_1 = sorted(range(6), key=lambda j: -score[j].item()).index(1)
    g2, _, _ = impl.prune_ffn(w_gate, w_up, w_down, x, rank_of_1 + 2)
    expected = sorted(sorted(range(6), key=lambda j: (-score[j].item(), j))[:rank_of_1 + 2])
    assert_equal(g2, w_gate[expected], f"ties: of the equal units 1, 4, 5 the lower indices come first "
                 f"(expected units {expected})")
    half = impl.prune_ffn(*(w.to(torch.bfloat16) for w in (w_gate, w_up, w_down)), x.to(torch.bfloat16), 3)
    assert all(t.dtype == torch.bfloat16 for t in half), "the pruned weights must keep the inputs' dtype"
    for bad in (0, 7):
        with pytest.raises(ValueError, match="keep"):
            impl.prune_ffn(w_gate, w_up, w_down, x, bad)
