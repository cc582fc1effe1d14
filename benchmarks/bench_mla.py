"""Multi-head Latent Attention decode: the absorbed form vs the naive form, one layer of
DeepSeek-V3's shapes (128 heads, latent 512, rope key 64, head dims 128), on the current device.

    python benchmarks/bench_mla.py [--contexts 1024 4096 16384] [--heads 128] [--batch 1] [--dtype bfloat16]

Both forms read the same cache -- the latent c_kv and the rope key k_pe, (r + d_r) numbers per
token -- and give the same output (checked here). A decode step of the naive form expands every
cached latent into H keys and values, (B, H, S, d_n + d_v), each step; the absorbed form folds
W_UK into the query and W_UV into the output and attends in the latent space. Printed per context:
the median time of one decode step of each (back to back in this process) and their ratio; the
cache bytes per token of MLA against a per-head KV cache of the same attention (what caching the
naive form's keys and values would take); and the peak extra memory of one step (CUDA:
torch.cuda.max_memory_allocated; elsewhere the size of the tensors each form creates).
"""

import argparse
import statistics
import time

import torch

from llama_course import LlamaConfig
from llama_course.device import get_device, synchronize
from llama_course.mla import MultiHeadLatentAttention


def layer(heads, device, dtype):
    config = LlamaConfig(vocab_size=8, d_model=7168, n_layers=1, n_heads=heads, q_lora_rank=1536, kv_lora_rank=512,
                         qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(config, device=device, dtype=dtype)
    with torch.no_grad():
        for p in mla.parameters():
            p.normal_(0, 0.02)
    return mla, config


def step_inputs(mla, batch, context, device, dtype):
    g = torch.Generator().manual_seed(1)
    make = lambda *shape: torch.randn(*shape, generator=g).to(device, dtype)  # noqa: E731
    q_nope, q_pe = make(batch, mla.n_heads, 1, mla.nope_dim), make(batch, mla.n_heads, 1, mla.rope_dim)
    c_kv, k_pe = make(batch, 1, context, mla.kv_lora_rank), make(batch, 1, context, mla.rope_dim)
    return q_nope, q_pe, c_kv, k_pe


def timed(fn, args, repeats, device):
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        fn(*args)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def peak_extra(fn, args, device, fallback):
    if device.type != "cuda":
        return fallback
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn(*args)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--heads", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dtype", default=None, help="float32 on a CPU, bfloat16 elsewhere by default")
    args = parser.parse_args()
    device = get_device()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float32 if device.type == "cpu" else torch.bfloat16)
    mla, c = layer(args.heads, device, dtype)
    size = torch.finfo(dtype).bits // 8
    latent = (c.kv_lora_rank + c.qk_rope_head_dim) * size
    per_head = c.n_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim) * size
    print(f"device {device}, {dtype}, {args.heads} heads, batch {args.batch}")
    print(f"cache per token and layer: MLA {latent:,} B, per-head K/V {per_head:,} B "
          f"-> {per_head / latent:.1f}x smaller")
    print(f"{'context':>8} {'naive ms':>9} {'absorbed ms':>12} {'naive/absorbed':>15} {'naive extra MB':>15} "
          f"{'absorbed extra MB':>18} {'max |diff|':>11}")
    with torch.no_grad():
        for context in args.contexts:
            inputs = step_inputs(mla, args.batch, context, device, dtype)
            naive, absorbed = mla.naive(*inputs), mla.absorbed(*inputs)
            diff = (naive.float() - absorbed.float()).abs().max().item()
            t_naive = timed(mla.naive, inputs, args.repeats, device)
            t_absorbed = timed(mla.absorbed, inputs, args.repeats, device)
            expanded = args.batch * c.n_heads * context * (2 * c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)
            m_naive = peak_extra(mla.naive, inputs, device, expanded * size)
            m_absorbed = peak_extra(mla.absorbed, inputs, device, args.batch * c.n_heads * context * 4)
            print(f"{context:>8} {t_naive * 1e3:>9.2f} {t_absorbed * 1e3:>12.2f} {t_naive / t_absorbed:>15.2f} "
                  f"{m_naive / 2**20:>15.1f} {m_absorbed / 2**20:>18.1f} {diff:>11.2e}")


if __name__ == "__main__":
    main()
