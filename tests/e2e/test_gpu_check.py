"""benchmarks/gpu_check.py, the one prepared run for a CUDA machine, kept from rotting: its CPU
smoke mode runs here, and each cause of slowness or breakage that is specific to a GPU gets a test
that can run on a CPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llama_course import Llama, LlamaConfig, generate
from llama_course.linear import linear

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_quick_mode_on_cpu(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert out.with_suffix(".log").read_text().strip(), "the log beside the JSON is empty"
    failed = {name: v.get("error") for name, v in results.items() if isinstance(v, dict) and v.get("ok") is False}
    assert not failed, f"sections failed: {failed}"
    assert results["env"]["torch"] == torch.__version__ and results["env"]["date"]
    parity = results["parity"]
    assert parity["float32_rel_err"] < 1e-5, parity        # same weights, float32: rounding only
    assert parity["cached_vs_full_rel_err"] < 1e-5, parity
    assert parity["greedy_same_tokens"] is True
    for batch in ("batch_1", "batch_8"):
        row = results["decode"][batch]
        assert row["ms_per_step"] > 0 and 0 < row["fraction_of_copy"] and math.isfinite(row["achieved_gbs"])
        assert results["generate"][batch]["same_tokens"] is True
        assert results["generate"][batch]["ratio"] > 0
    assert set(results["prefill"]) >= {"explicit", "sdpa"}
    assert set(results["goals"]) == {"decode_batch1_fraction_of_copy>=0.7", "generate_ratio>=1.0_at_batch_1_and_8",
                                     "parity_float32_rel_err<=1e-5"}


def test_cpu_thread_split_is_never_used_off_the_cpu(monkeypatch):
    """llama_course.linear splits few-row products across CPU threads with torch.bmm; on any other
    device (a GPU; here the meta device stands in) it must be plain F.linear."""
    def no_bmm(*args, **kwargs):
        raise AssertionError("linear() used the CPU thread split on a non-CPU device")

    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(torch, "bmm", no_bmm)
    x, w = torch.empty(1, 1, 1024, device="meta"), torch.empty(1024, 1024, device="meta")
    assert linear(x, w).shape == (1, 1, 1024)
    with pytest.raises(AssertionError, match="thread split"):   # the same call on the CPU does split
        linear(torch.randn(1, 1, 1024), torch.randn(1024, 1024))


SYNCING = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


def test_decode_steps_do_not_wait_for_the_device(monkeypatch):
    """On a GPU every read of a tensor's value on the host (``.item()``, ``bool(t)``, ``.tolist()``)
    waits for all queued work: the CPU can no longer run ahead and queue the next step's kernels,
    and decode becomes launch-bound. Greedy decode of unpadded prompts needs no such read between
    its steps; one read after the last step (were there NaN logits?) costs one wait per call."""
    config = LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64)
    torch.manual_seed(0)
    model = Llama(config).eval()
    prompt = torch.randint(0, 64, (2, 5))
    reads = []
    calls = {"forward": 0}
    original_forward = model.forward

    def counting_forward(*args, **kwargs):   # first the prefill, then each decode step
        calls["forward"] += 1
        return original_forward(*args, **kwargs)

    def spy(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            if calls["forward"] > 1:
                caller = sys._getframe(1)
                reads.append((calls["forward"], f"Tensor.{name} at {Path(caller.f_code.co_filename).name}:"
                                                f"{caller.f_lineno}"))
            return original(self, *args, **kwargs)
        return wrapper

    monkeypatch.setattr(model, "forward", counting_forward)   # nn.Module.__call__ calls it
    for name in SYNCING:
        monkeypatch.setattr(torch.Tensor, name, spy(name))
    out = generate(model, prompt, 6)
    assert calls["forward"] == 6, calls         # prefill + 5 decode steps (the 6th token needs no step)
    assert out.shape == (2, 11)
    between_steps = [where for forwards, where in reads if forwards < calls["forward"]]
    assert not between_steps, f"host reads of device values in the decode loop: {sorted(set(between_steps))}"
    after_last = [where for forwards, where in reads if forwards == calls["forward"]]
    assert len(after_last) <= 1, f"more than one host read after the last decode step: {after_last}"
