"""Explicit attention (the course's math, L x L scores materialised) vs torch's fused
F.scaled_dot_product_attention, at several sequence lengths, on the current device.

    python benchmarks/bench_attention.py [--lengths 256 512 1024 2048] [--heads 8] [--head-dim 64]

Both run back to back in the same process for time (median of repeats); peak memory is measured
per run: torch.cuda.max_memory_allocated on CUDA; on the CPU, the peak resident memory of a fresh
child process running one call, minus a child that only builds the inputs.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from llama_course.attention import causal_mask, scaled_dot_product_attention
from llama_course.device import get_device, synchronize


def inputs(length, heads, head_dim, device, dtype):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, heads, length, head_dim, generator=g).to(device, dtype) for _ in range(3)]


def run(backend, q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask, backend=backend)


def timed(backend, q, k, v, mask, repeats, device):
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        run(backend, q, k, v, mask)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])  # the first call warms up


def cpu_peak_bytes(backend, length, heads, head_dim):
    """Peak RSS of a child that runs one call, minus one that only builds the inputs.
    (Linux keeps a child's peak RSS at least at its parent's RSS when it was forked: call this
    before the parent allocates anything large.)"""
    def child(mode):
        code = (f"import sys; sys.argv=['x']; import benchmarks.bench_attention as b, torch;"
                f"q,k,v=b.inputs({length},{heads},{head_dim},torch.device('cpu'),torch.float32);"
                f"m=b.causal_mask({length});"
                + ("" if mode == "none" else f"b.run({mode!r},q,k,v,m)"))
        process = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)) or ".")
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise RuntimeError(f"child failed for {mode}")
        return usage.ru_maxrss * 1024  # kilobytes on Linux
    return child(backend) - child("none")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()
    device = get_device()
    dtype = getattr(torch, args.dtype)
    print(f"device {device}, {args.dtype}, batch 1, {args.heads} heads of {args.head_dim}, causal; "
          f"torch {torch.__version__}")
    cpu_peaks = {}
    if device.type == "cpu":  # first, while this process is small: a child inherits its peak RSS
        cpu_peaks = {L: [cpu_peak_bytes(b, L, args.heads, args.head_dim) for b in ("explicit", "sdpa")]
                     for L in args.lengths}
    print(f"{'L':>6} {'explicit ms':>12} {'sdpa ms':>9} {'time ratio':>10} {'explicit MB':>12} {'sdpa MB':>8} "
          f"{'memory ratio':>12}")
    for length in args.lengths:
        q, k, v = inputs(length, args.heads, args.head_dim, device, dtype)
        mask = causal_mask(length, device=device)
        t_explicit = timed("explicit", q, k, v, mask, args.repeats, device)
        t_sdpa = timed("sdpa", q, k, v, mask, args.repeats, device)
        if device.type == "cuda":
            peaks = []
            for backend in ("explicit", "sdpa"):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                run(backend, q, k, v, mask)
                torch.cuda.synchronize()
                peaks.append(torch.cuda.max_memory_allocated() - base)
        elif device.type == "cpu":
            peaks = cpu_peaks[length]
        else:
            peaks = [float("nan"), float("nan")]
        mb = [p / 2**20 for p in peaks]
        print(f"{length:>6} {1e3 * t_explicit:>12.2f} {1e3 * t_sdpa:>9.2f} {t_explicit / t_sdpa:>10.2f} "
              f"{mb[0]:>12.1f} {mb[1]:>8.1f} {mb[0] / mb[1] if mb[1] > 0 else float('inf'):>12.1f}")


if __name__ == "__main__":
    main()
