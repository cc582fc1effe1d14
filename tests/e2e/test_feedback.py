"""Seeded mistakes: the graded tests' failure messages must name the symptom, without tensor dumps.

Three classic mistakes are planted in copies of the instructor's key -- attention scaled by d
instead of sqrt(d), a KV cache that concatenates instead of writing in place, and split_heads
without its transpose -- and the graded tests are run on each copy in a subprocess.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MUTANTS = {
    "wrong-attention-scale": (
        "ch04_attention.py",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
        "scores = q @ k.transpose(-2, -1) / q.shape[-1]",
        "test_sdpa_hand_example or test_sdpa_matches_torch",
        ["scores divided by sqrt(d)", "attention without a mask vs F.scaled_dot_product_attention"]),
    "cache-not-in-place": (
        "ch08_decode.py",
        "        self.keys[layer][:, :, self.length:end] = k\n        self.values[layer][:, :, self.length:end] = v\n",
        "        self.keys[layer] = torch.cat([self.keys[layer][:, :, :self.length], k], dim=2)\n"
        "        self.values[layer] = torch.cat([self.values[layer][:, :, :self.length], v], dim=2)\n",
        "test_update_writes_in_place_and_returns_everything",
        ["the cache was not written in place"]),
    "split-heads-without-transpose": (
        "ch04_attention.py",
        "return x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)",
        "return x.reshape(batch, n_heads, seq, d_model // n_heads)",
        "test_split_heads",
        ["head 2 of token 0 holds features", "expected features 4 and 5"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_seeded_mistake_gets_a_message_naming_its_symptom(tmp_path, name):
    file, original, mutated, selection, symptoms = MUTANTS[name]
    source = (REPO / "solutions" / file).read_text(encoding="utf-8")
    assert original in source, f"the key no longer contains the line this mutant changes: {original!r}"
    (tmp_path / file).write_text(source.replace(original, mutated), encoding="utf-8")
    test_file = REPO / "tests" / "graded" / f"test_{file}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--impl", str(tmp_path),
                          "-k", selection, str(test_file)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 1 and " failed" in out, f"the mutant {name} was not caught:\n{out[-2000:]}"
    messages = "\n".join(line for line in out.splitlines() if line.startswith("E "))
    for symptom in symptoms:
        assert symptom in messages, f"mutant {name}: no failure message says {symptom!r}:\n{messages[-2000:]}"
    assert not re.search(r"tensor\(\[", messages), f"mutant {name}: a failure message dumps a tensor:\n{messages}"
