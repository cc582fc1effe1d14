"""The reference package on a real GPU: one prepared run that checks and measures everything.

    python benchmarks/gpu_check.py                        # on a CUDA machine: a few minutes
    python benchmarks/gpu_check.py --device cpu --quick   # seconds: `make test` runs it so it cannot rot
    make gpu-check                                        # the first line, JSON in benchmarks/results/

It needs only torch and transformers (and pytest for the test section) in the Python that runs it,
and the repository itself: the package is imported from this checkout, not from an install.
It writes one JSON of results (``--out``; default ``benchmarks/results/gpu_check-<device>.json``)
and a log beside it (same name, ``.log``). Every section records its figures or its error, so one
failure does not hide the rest:

env       device name, compute capability, torch/CUDA/transformers versions, date, commit
ceilings  this device's measured copy bandwidth (STREAM-style: bytes read + written) and dense
          matrix-product rate (bf16 on a GPU), beside the datasheet figures
tests     the unit and graded tests (the ``device`` fixture adds ``cuda`` on a CUDA machine; bf16
          paths included), the meta-device test, the graded tests against the package
parity    a transformers LlamaForCausalLM and the course's Llama loaded from its save_pretrained
          directory, on the device: logits (float32 and bf16), cached decode vs full forward,
          greedy generation token for token
decode    a Llama-2-7B-shaped model (seeded random weights, bf16): ms per token at batch 1 and 8,
          bytes read per step / time as a fraction of the measured copy bandwidth and of the
          datasheet; and one decode step replayed as a CUDA graph (kernel time without the
          Python/launch overhead), to show how much of a step is overhead
generate  course generate vs transformers generate on the same weights, greedy: tokens/s ratio
prefill   model-FLOPs utilisation of a 2048-token prefill, explicit vs fused (sdpa) attention
train     the Chapter 11 lab's GPU-sized config ("base"): training tokens/s and MFU with bf16
          autocast, eager and with torch.compile

Goals (from the course's GPU issue): decode at batch 1 >= 70% of the measured copy bandwidth;
course/transformers tokens/s >= 1.0. The JSON's "goals" says which hold.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package of this checkout, installed or not

import torch  # noqa: E402

DATASHEET = {  # dense bf16 TFLOP/s and HBM TB/s, vendors' datasheets (SXM parts)
    "H200": (989.0, 4.8), "H100": (989.0, 3.35), "A100": (312.0, 2.039),
}


# ------------------------------------------------------------------------------------ plumbing

class Log:
    """Print and keep every line (the log file is written beside the JSON)."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)


def section(results: dict, name: str, log: Log, fn, *args) -> None:
    """Run one section; store its figures, or its error and traceback, under results[name]."""
    log(f"== {name}")
    started = time.perf_counter()
    try:
        results[name] = {"ok": True, **fn(log, *args)}
    except Exception as err:  # a section's failure is a result, not the end of the run
        log(traceback.format_exc())
        results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    results[name]["seconds"] = round(time.perf_counter() - started, 2)


def sig(x: float, digits: int = 3) -> float:
    """Round to significant figures: a small fraction (a loaded CPU) must not round to 0.0."""
    return float(f"{x:.{digits}g}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn, device: torch.device, repeats: int) -> float:
    """Best of ``repeats`` wall-clock times of fn(), the device drained before and after."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def datasheet(device: torch.device) -> tuple[float, float] | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in DATASHEET.items() if k in name), None)


# ------------------------------------------------------------------------------------ sections

def env(log: Log, device: torch.device) -> dict:
    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": str(device), "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cpu_threads": torch.get_num_threads(),
    }
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), bf16=torch.cuda.is_bf16_supported())
    else:
        info.update(name=platform.processor() or platform.machine())
    log(json.dumps(info))
    return info


def ceilings(log: Log, device: torch.device, quick: bool) -> dict:
    n = (16 if quick else 2048) * 2**20 // 4                       # float32 numbers to copy
    src = torch.ones(n, device=device)                              # written: no zero-page reads
    dst = torch.empty_like(src)
    copy_gbs = 2 * n * 4 / best_seconds(lambda: dst.copy_(src), device, 5) / 1e9
    size = 256 if quick else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    tflops = 2 * size**3 / best_seconds(lambda: a @ b, device, 5) / 1e12
    sheet = datasheet(device)
    out = {"copy_gbs": float(f"{copy_gbs:.4g}"), "matmul_tflops": float(f"{tflops:.4g}"),
           "matmul_dtype": str(dtype)[6:],
           "datasheet_tflops": sheet[0] if sheet else None, "datasheet_tbs": sheet[1] if sheet else None}
    log(json.dumps(out))
    return out


def run_tests(log: Log, device: torch.device, quick: bool) -> dict:
    """The suite in a subprocess (pytest's own process, so a crash there is reported, not fatal)."""
    if quick:
        return {"skipped": "quick mode: make test runs the suite itself"}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"suite": ["tests", "--impl=solutions"], "graded_package": ["tests/graded", "--impl=package"]}
        for name, args in runs.items():
            xml = Path(tmp) / f"{name}.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
                   f"--junitxml={xml}", "--timeout=300"]
            with contextlib.suppress(ImportError):
                import xdist  # noqa: F401
                cmd += ["-n", str(min(8, os.cpu_count() or 1)), "--dist", "load"]
            env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=420, env=env)
            log(proc.stdout[-3000:], proc.stderr[-2000:])
            out[name] = junit_summary(xml) if xml.exists() else {"returncode": proc.returncode}
            out[name]["returncode"] = proc.returncode
    return out


def junit_summary(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for s in suites for case in s
              if case.find("failure") is not None or case.find("error") is not None]
    cuda_cases = sum(1 for s in suites for case in s if "cuda" in (case.get("name") or ""))
    return {**counts, "cuda_parametrized": cuda_cases, "failed": failed[:50]}


def build_pair(device: torch.device, quick: bool, dtype: torch.dtype, tmp: str):
    """transformers' LlamaForCausalLM with seeded random weights, saved, and the course's Llama
    loaded from that directory: the same weights in both libraries."""
    import transformers

    from llama_course.checkpoint import load_hf

    sizes = (dict(vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=344) if quick else
             dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, intermediate_size=11008))  # Llama-2 7B's shape
    config = transformers.LlamaConfig(**sizes, max_position_embeddings=4096, rms_norm_eps=1e-5,
                                      pad_token_id=0, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        hf = transformers.LlamaForCausalLM(config).to(dtype).eval()
    hf.generation_config.eos_token_id = None
    hf.save_pretrained(tmp)
    ours = load_hf(tmp, dtype=dtype, device=device).eval()
    return hf, ours


def parity(log: Log, device: torch.device, quick: bool) -> dict:
    """Small model, both libraries on the device: float32 logits, bf16 logits, cache, generation."""
    from llama_course import KVCache, generate
    from llama_course.grade.testing import realistic_weights_

    out = {}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        hf, _ = build_pair(device, True, torch.float32, tmp)
        torch.manual_seed(1)
        realistic_weights_(hf, std=0.2)            # weights large enough to expose convention errors
        hf.save_pretrained(tmp)
        from llama_course.checkpoint import load_hf
        ours = load_hf(tmp, device=device).eval()
        ids = torch.randint(1, 512, (2, 24), generator=torch.Generator().manual_seed(2)).to(device)
        ref = hf(ids).logits
        scale = ref.abs().max().item()               # errors are reported relative to the largest logit
        out["logit_scale"] = scale
        out["float32_rel_err"] = (ours(ids) - ref).abs().max().item() / scale
        cache = KVCache(ours.config, 2, 32, device=device)
        steps = [ours(ids[:, :16], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(16, 24)]
        out["cached_vs_full_rel_err"] = (torch.cat(steps, 1) - ours(ids)).abs().max().item() / scale
        out["greedy_same_tokens"] = bool(torch.equal(
            generate(ours, ids[:, :8], 16), hf.generate(ids[:, :8], max_new_tokens=16, do_sample=False)))
        if device.type != "cpu":   # bf16 as each library's users load it; error against float32 logits
            ours16, hf16 = load_hf(tmp, dtype=torch.bfloat16, device=device), hf.to(torch.bfloat16)
            out["bf16_rel_err_vs_float32"] = {
                "course": (ours16(ids).float() - ref).abs().max().item() / scale,
                "transformers": (hf16(ids).logits.float() - ref).abs().max().item() / scale}
    log(json.dumps(out))
    return out


def decode_step_seconds(model, config, batch: int, steps: int, device: torch.device, prompt: int = 128) -> float:
    """Seconds per decode step after a ``prompt``-token prefill, averaged over ``steps`` steps."""
    from llama_course import KVCache

    dtype = next(model.parameters()).dtype
    ids = torch.randint(1, config.vocab_size, (batch, prompt), device=device)
    cache = KVCache(config, batch, prompt + steps + 8, device=device, dtype=dtype)
    with torch.no_grad():
        token = model(ids, cache=cache)[:, -1:].argmax(-1)                      # prefill: (B, 1)
        for _ in range(3):                                                     # warm-up steps
            token = model(token, cache=cache)[:, -1:].argmax(-1)
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            token = model(token, cache=cache)[:, -1:].argmax(-1)               # (B, 1)
        sync(device)
    return (time.perf_counter() - start) / steps


def graphed_step_seconds(model, config, batch: int, device: torch.device, prompt: int = 128) -> float:
    """One decode step captured as a CUDA graph and replayed (always at the same position: a
    measurement of the step's kernels without Python and launch overhead, not a generator)."""
    from llama_course import KVCache

    dtype = next(model.parameters()).dtype
    cache = KVCache(config, batch, prompt + 8, device=device, dtype=dtype)
    token = torch.ones(batch, 1, dtype=torch.long, device=device)
    with torch.no_grad():
        model(torch.ones(batch, prompt, dtype=torch.long, device=device), cache=cache)
        length = cache.length
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):                                        # warm-up off the default stream
            for _ in range(3):
                cache.length = length
                model(token, cache=cache)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        cache.length = length
        with torch.cuda.graph(graph):
            model(token, cache=cache)
    return best_seconds(lambda: [graph.replay() for _ in range(20)], device, 3) / 20


def decode(log: Log, device: torch.device, quick: bool, model, ceil: dict) -> dict:
    from llama_course.cost import decode_bytes

    config, out = model.config, {}
    dtype = next(model.parameters()).dtype
    nbytes = torch.finfo(dtype).bits // 8
    for batch in (1, 8):
        seconds = decode_step_seconds(model, config, batch, 4 if quick else 64, device)
        read = decode_bytes(config, 128 + 32, batch, nbytes)                  # mid-run context
        row = {"ms_per_step": round(seconds * 1e3, 3), "tokens_per_s": round(batch / seconds, 1),
               "gb_read_per_step": round(read / 1e9, 3), "achieved_gbs": round(read / seconds / 1e9, 1),
               "fraction_of_copy": sig(read / seconds / 1e9 / ceil["copy_gbs"])}
        if ceil.get("datasheet_tbs"):
            row["fraction_of_datasheet"] = sig(read / seconds / (ceil["datasheet_tbs"] * 1e12))
        if device.type == "cuda":
            try:
                graphed = graphed_step_seconds(model, config, batch, device)
            except Exception as err:  # e.g. a host-device sync inside the step cannot be captured
                row["graphed_error"] = f"{type(err).__name__}: {err}"
            else:
                row.update(graphed_ms_per_step=round(graphed * 1e3, 3),
                           graphed_fraction_of_copy=sig(read / graphed / 1e9 / ceil["copy_gbs"]))
        out[f"batch_{batch}"] = row
        log(f"batch {batch}: {json.dumps(row)}")
    return out


def compare_generate(log: Log, device: torch.device, quick: bool, hf, model) -> dict:
    from llama_course import generate

    new_tokens, out = (4 if quick else 64), {}
    for batch in (1, 8):
        prompt = torch.randint(1, model.config.vocab_size, (batch, 32),
                               generator=torch.Generator().manual_seed(batch)).to(device)
        with torch.no_grad():
            ours = best_seconds(lambda: generate(model, prompt, new_tokens), device, 2)
            theirs = best_seconds(lambda: hf.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                                      do_sample=False), device, 2)
            same = torch.equal(generate(model, prompt, new_tokens),
                               hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False))
        row = {"course_tokens_per_s": round(batch * new_tokens / ours, 1),
               "transformers_tokens_per_s": round(batch * new_tokens / theirs, 1),
               "ratio": round(theirs / ours, 3), "same_tokens": bool(same)}
        out[f"batch_{batch}"] = row
        log(f"batch {batch}: {json.dumps(row)}")
    return out


def prefill(log: Log, device: torch.device, quick: bool, model, ceil: dict) -> dict:
    from llama_course.cost import prefill_flops

    length = 64 if quick else 2048
    ids = torch.randint(1, model.config.vocab_size, (1, length), device=device)
    flops, out = prefill_flops(model.config, length), {"tokens": length}
    for backend in ("explicit", "sdpa"):
        model.set_attention_backend(backend)
        with torch.no_grad():
            seconds = best_seconds(lambda: model(ids), device, 3)
        tflops = flops / seconds / 1e12
        row = {"ms": round(seconds * 1e3, 2), "tflops": float(f"{tflops:.4g}"),
               "mfu_of_measured": sig(tflops / ceil["matmul_tflops"])}
        if ceil.get("datasheet_tflops"):
            row["mfu_of_datasheet"] = sig(tflops / ceil["datasheet_tflops"])
        out[backend] = row
        log(f"{backend}: {json.dumps(row)}")
    model.set_attention_backend("sdpa")
    return out


def train_speed(log: Log, device: torch.device, quick: bool, ceil: dict) -> dict:
    """Tokens/s of the lab's training loop, from the difference of two runs (warm-up, compilation
    and the final evaluation cancel out)."""
    from llama_course import Llama, LlamaConfig
    from llama_course.cost import flops_per_token
    from llama_course.train import MODEL_CONFIGS, TrainConfig, train

    shape = dict(MODEL_CONFIGS["tiny" if quick else "base"])
    config = LlamaConfig(vocab_size=4096, **shape)
    batch, context = (2, 32) if quick else (32, 512)
    data = torch.randint(0, config.vocab_size, (200_000,), generator=torch.Generator().manual_seed(0))
    out = {"config": "tiny" if quick else "base", "batch": batch, "context": context}
    for compiled in ((False,) if quick else (False, True)):
        def run(steps: int) -> float:
            torch.manual_seed(0)
            model = Llama(config, device=device)
            cfg = TrainConfig(steps=steps, batch_size=batch, context_length=context, warmup_steps=1,
                              eval_interval=10**6, eval_batches=1, progress=False, compile=compiled)
            sync(device)
            start = time.perf_counter()
            train(model, data[:150_000], data[150_000:], cfg, device=device)
            sync(device)
            return time.perf_counter() - start

        few, many = (1, 3) if quick else (5, 35)
        seconds = (run(many) - run(few)) / (many - few)
        if seconds <= 0:  # a loaded machine can make the short run the slower one (quick mode)
            out["compiled" if compiled else "eager"] = {"tokens_per_s": None, "note": "timing noise"}
            continue
        tokens_per_s = batch * context / seconds
        tflops = 3 * flops_per_token(config, context // 2) * tokens_per_s / 1e12   # forward + backward
        row = {"tokens_per_s": round(tokens_per_s), "tflops": float(f"{tflops:.4g}"),
               "mfu_of_measured": sig(tflops / ceil["matmul_tflops"])}
        if ceil.get("datasheet_tflops"):
            row["mfu_of_datasheet"] = sig(tflops / ceil["datasheet_tflops"])
        out["compiled" if compiled else "eager"] = row
        log(f"{'compiled' if compiled else 'eager'}: {json.dumps(row)}")
    return out


# ------------------------------------------------------------------------------------ main

def goals(results: dict) -> dict:
    def get(*keys):
        value = results
        for key in keys:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return value if isinstance(value, (int, float)) else math.nan

    fraction = get("decode", "batch_1", "fraction_of_copy")
    ratios = [get("generate", f"batch_{b}", "ratio") for b in (1, 8)]
    return {"decode_batch1_fraction_of_copy>=0.7": fraction >= 0.7,
            "generate_ratio>=1.0_at_batch_1_and_8": all(r >= 1.0 for r in ratios),
            "parity_float32_rel_err<=1e-5": get("parity", "float32_rel_err") <= 1e-5}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the script")
    parser.add_argument("--out", type=Path, help="JSON path (default benchmarks/results/gpu_check-<device>.json)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available here (use --device cpu --quick)")
    out = args.out or ROOT / "benchmarks" / "results" / f"gpu_check-{device.type}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    log, results = Log(), {}
    section(results, "env", log, env, device)
    section(results, "ceilings", log, ceilings, device, args.quick)
    section(results, "tests", log, run_tests, device, args.quick)
    section(results, "parity", log, parity, device, args.quick)
    ceil = results["ceilings"] if results["ceilings"]["ok"] else {"copy_gbs": math.nan, "matmul_tflops": math.nan}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with tempfile.TemporaryDirectory() as tmp:
        try:
            hf, model = build_pair(device, args.quick, dtype, tmp)
        except Exception as err:
            log(traceback.format_exc())
            results["model"] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        else:
            model.set_attention_backend("sdpa")
            results["model"] = {"ok": True, "parameters": sum(p.numel() for p in model.parameters()),
                                "dtype": str(dtype)[6:]}
            section(results, "decode", log, decode, device, args.quick, model, ceil)
            section(results, "generate", log, compare_generate, device, args.quick, hf, model)
            section(results, "prefill", log, prefill, device, args.quick, model, ceil)
            del hf, model
            if device.type == "cuda":
                torch.cuda.empty_cache()
    section(results, "train", log, train_speed, device, args.quick, ceil)
    results["goals"] = goals(results)
    log("goals:", json.dumps(results["goals"]))
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".log").write_text("\n".join(log.lines) + "\n", encoding="utf-8")
    log(f"wrote {out}")
    failed = [name for name, value in results.items() if isinstance(value, dict) and value.get("ok") is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
