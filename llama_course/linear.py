"""A linear layer whose few-row products use every CPU core (Chapter 8, "Decode on a CPU").

    y = x W^T (+ b)        x (..., d_in), W (d_out, d_in)  -- exactly nn.Linear

A decode step multiplies every weight matrix by one vector per sequence: a few rows against a
large matrix, so its time is the time to read W. One core cannot read memory as fast as the
machine can: on the 2-core machine that wrote this page a matrix-vector product in the CPU BLAS
(MKL) read about 17 GB/s on one core and no faster on two, while two processes, one per core,
read 32 GB/s together. So for a few rows on a CPU we split W's output rows into one slab per
thread and multiply the slabs as a batch; torch.bmm hands each batch entry to its own thread, and
every core streams its own slab of W, which is what llama.cpp does with its threads. The
arithmetic of each output is the same dot product; only who computes it changes.

Everything else (many rows, GPUs, one thread, a row count the threads do not divide) is plain
F.linear. benchmarks/bench_generate.py measures the difference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 16          # up to here the split measured faster (1.2-1.9x); beyond, the BLAS is as good
MIN_WEIGHTS = 2 ** 18  # smaller matrices (e.g. 256 x 256) are faster unsplit: starting threads costs more


def linear(x: torch.Tensor, weight: torch.Tensor,
           bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias); a few rows on a multi-core CPU are split
    by output rows across the threads. x (..., d_in), weight (d_out, d_in),
    bias (d_out,) -> (..., d_out)."""
    threads = torch.get_num_threads()
    d_out, d_in = weight.shape
    rows = x.numel() // d_in if x.dim() and x.shape[-1] == d_in else 0
    if (x.device.type != "cpu" or threads == 1
            or not 0 < rows <= MAX_ROWS or weight.numel() < MIN_WEIGHTS
            or d_out % threads or not weight.is_contiguous()
            or x.dtype != weight.dtype):
        return F.linear(x, weight, bias)
    slabs = weight.view(threads, d_out // threads, d_in).transpose(1, 2)
    #                                     (P, d_in, d_out/P), a view
    xs = x.reshape(1, rows, d_in).expand(threads, rows, d_in)
    #                                     (P, rows, d_in), no copy
    y = torch.bmm(xs, slabs)              # (P, rows, d_out/P)
    if rows > 1:
        y = y.transpose(0, 1)             # (rows, P, d_out/P)
    y = y.reshape(*x.shape[:-1], d_out)   # (..., d_out), slab p = columns p
    return y if bias is None else y + bias


class Linear(nn.Linear):
    """nn.Linear (same parameters, names and state dict) computed with :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
