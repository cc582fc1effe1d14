"""Generation speed: the course's generate vs transformers' generate, cached vs uncached decoding,
and decode's achieved memory bandwidth.

    python benchmarks/bench_generate.py [--new-tokens 64] [--batch 1 8] [--skip-bandwidth]

1. Greedy generation, the same random weights in both libraries (loaded from one save_pretrained
   directory), the same threads, back to back: tokens/s for each and the ratio (goal: >= 1).
   Both use torch's fused attention (the course model with set_attention_backend("sdpa")).
2. Cached vs uncached decoding (recompute the whole prefix every step) at 512 new tokens.
3. Decode of a ~100M-parameter float32 model: bytes read per step (weights + KV cache) / time,
   as a fraction of this machine's measured copy bandwidth (goal: >= 50%), measured back to back
   in rounds; and the step's matrix-vector products alone with F.linear and llama_course.linear.
"""

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from llama_course import LlamaConfig
from llama_course.checkpoint import load_hf
from llama_course.cost import best_time, decode_bytes, measure_bandwidth
from llama_course.device import get_device, synchronize
from llama_course.generate import generate, stream_generate
from llama_course.linear import linear
from llama_course.model import Llama


def timed(fn, device):
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def compare_with_transformers(device, batches, new_tokens):
    import transformers

    hf_config = transformers.LlamaConfig(vocab_size=32000, hidden_size=512, num_hidden_layers=8,
                                         num_attention_heads=8, num_key_value_heads=8, intermediate_size=1376,
                                         max_position_embeddings=1024, pad_token_id=0)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_config).to(device).eval()
    hf.generation_config.eos_token_id = None
    with tempfile.TemporaryDirectory() as path:
        hf.save_pretrained(path)
        ours = load_hf(path, device=device).set_attention_backend("sdpa")
    params = sum(p.numel() for p in ours.parameters()) / 1e6
    print(f"1. greedy generate, {params:.0f}M-parameter float32 model, {new_tokens} new tokens, prompt 32")
    for batch in batches:
        prompt = torch.randint(1, 32000, (batch, 32), generator=torch.Generator().manual_seed(1)).to(device)
        generate(ours, prompt, 4)  # warm up both
        hf.generate(prompt, max_new_tokens=4, do_sample=False)
        a, t_ours = timed(lambda: generate(ours, prompt, new_tokens), device)
        b, t_hf = timed(lambda: hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False), device)
        same = torch.equal(a, b)
        tokens = batch * new_tokens
        print(f"   batch {batch}: course {tokens / t_ours:8.1f} tok/s, transformers {tokens / t_hf:8.1f} tok/s, "
              f"ratio {t_hf / t_ours:.2f} (same tokens: {same})")


def cached_vs_uncached(device, new_tokens=512):
    config = LlamaConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=1024)
    torch.manual_seed(0)
    model = Llama(config, device=device).eval().set_attention_backend("sdpa")
    prompt = torch.randint(0, 4096, (1, 16), generator=torch.Generator().manual_seed(2)).to(device)

    @torch.no_grad()
    def uncached():
        ids = prompt
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids

    a, t_cached = timed(lambda: generate(model, prompt, new_tokens), device)
    b, t_uncached = timed(uncached, device)
    print(f"2. {new_tokens} new tokens: cached {t_cached:.2f} s, uncached {t_uncached:.2f} s, "
          f"speed-up {t_uncached / t_cached:.1f}x (same tokens: {torch.equal(a, b)})")


def decode_bandwidth(device, steps=64, context=256, rounds=9):
    """Bytes a decode step must read / its time, as a fraction of the machine's copy bandwidth.

    The bandwidth of a shared machine drifts, so numerator and denominator are measured back to
    back in each of ``rounds`` rounds (a stream of ``steps`` decode steps, median step time; then
    measure_bandwidth) and the median of the rounds' fractions is reported. For reference, the
    same matrix-vector products with F.linear (the BLAS alone) and with llama_course.linear."""
    config = LlamaConfig(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, max_seq_len=2048)
    torch.manual_seed(0)
    model = Llama(config, device=device).eval().set_attention_backend("sdpa")
    params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, 32000, (1, context), generator=torch.Generator().manual_seed(3)).to(device)
    nbytes = decode_bytes(config, context + steps // 2, 1, bytes_per_value=4)

    def median_step():   # seconds between consecutive tokens of one stream (the first includes prefill)
        times, last = [], time.perf_counter()
        for _ in stream_generate(model, prompt, steps + 1):
            synchronize(device)
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return statistics.median(times[1:])

    median_step()  # warm up
    rounds = [(median_step(), measure_bandwidth(device)) for _ in range(rounds)]
    fractions = sorted(nbytes / step / 1e9 / bandwidth for step, bandwidth in rounds)
    step = statistics.median(step for step, _ in rounds)
    bandwidth = statistics.median(bandwidth for _, bandwidth in rounds)
    print(f"3. decode, {params / 1e6:.0f}M float32 parameters, context ~{context}, {nbytes / 1e6:.0f} MB/step: "
          f"{step * 1e3:.1f} ms/step = {nbytes / step / 1e9:.1f} GB/s; copy bandwidth {bandwidth:.1f} GB/s")
    print(f"   decode / bandwidth, back to back in {len(rounds)} rounds: "
          f"median {100 * statistics.median(fractions):.0f}% "
          f"(rounds {', '.join(f'{100 * f:.0f}' for f in fractions)}%; goal >= 50%)")

    matrices = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    vectors = {n: torch.randn(1, n, device=device) for n in {w.shape[1] for w in matrices}}
    matvec_bytes = sum(w.numel() for w in matrices) * 4
    with torch.no_grad():
        for name, fn in (("F.linear (the BLAS)", F.linear), ("llama_course.linear", linear)):
            seconds = best_time(lambda: [fn(vectors[w.shape[1]], w) for w in matrices], device)
            print(f"   the step's {len(matrices)} matrix-vector products alone, {name}: {seconds * 1e3:.1f} ms "
                  f"= {matvec_bytes / seconds / 1e9:.1f} GB/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--skip-bandwidth", action="store_true")
    args = parser.parse_args()
    device = get_device()
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    compare_with_transformers(device, args.batch, args.new_tokens)
    cached_vs_uncached(device)
    if not args.skip_bandwidth:
        decode_bandwidth(device)


if __name__ == "__main__":
    main()
