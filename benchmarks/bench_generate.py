"""Generation speed: the course's generate vs transformers' generate, cached vs uncached decoding,
and decode's achieved memory bandwidth.

    python benchmarks/bench_generate.py [--new-tokens 64] [--batch 1 8] [--skip-bandwidth]

1. Greedy generation, the same random weights in both libraries (loaded from one save_pretrained
   directory), the same threads, back to back: tokens/s for each and the ratio (goal: >= 1).
   Both use torch's fused attention (the course model with set_attention_backend("sdpa")).
2. Cached vs uncached decoding (recompute the whole prefix every step) at 512 new tokens.
3. Decode of a ~100M-parameter float32 model: bytes read per step (weights + KV cache) / time,
   as a fraction of this machine's measured copy bandwidth (goal: >= 50%).
"""

import argparse
import tempfile
import time

import torch

from llama_course import LlamaConfig, get_device
from llama_course.cost import decode_bytes, measure_accelerator
from llama_course.generate import generate
from llama_course.model import Llama


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
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
        ours = Llama.from_hf(path, device=device).set_attention_backend("sdpa")
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


def decode_bandwidth(device, steps=32, context=256):
    config = LlamaConfig(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, max_seq_len=2048)
    torch.manual_seed(0)
    model = Llama(config, device=device).eval().set_attention_backend("sdpa")
    params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, 32000, (1, context), generator=torch.Generator().manual_seed(3)).to(device)
    generate(model, prompt, 2)
    _, t_prefill_and_one = timed(lambda: generate(model, prompt, 1), device)
    _, t_all = timed(lambda: generate(model, prompt, steps + 1), device)
    per_step = (t_all - t_prefill_and_one) / steps
    nbytes = decode_bytes(config, context + steps // 2, 1, bytes_per_value=4)
    machine = measure_accelerator(device)
    achieved = nbytes / per_step / 1e9
    print(f"3. decode, {params / 1e6:.0f}M float32 parameters, context ~{context}: {per_step * 1e3:.1f} ms/step, "
          f"{nbytes / 1e6:.0f} MB/step -> {achieved:.1f} GB/s = {100 * achieved / machine.bandwidth_gbs:.0f}% "
          f"of the measured {machine.bandwidth_gbs:.1f} GB/s copy bandwidth")


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
