"""The capstone (Chapter 14): the key's exercises get full marks, the stubs 0, a planted bug is named.

instructor only: not in the student release (it reads solutions/, the key).

Oracles: transformers' LlamaForCausalLM and generate (parts a, b), the package's tokenizer and
Llama trained with the same budget (c), the package's nucleus filter (d) -- none of them is the
code under test; the planted bugs are edits of the key whose piece we know.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llama_course.grade.capstone import QUICK, grade

REPO = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


def key_copy(tmp_path: Path, name: str = "student") -> Path:
    folder = tmp_path / name
    shutil.copytree(REPO / "solutions", folder)
    return folder


def plant(folder: Path, file: str, old: str, new: str) -> None:
    path = folder / file
    text = path.read_text()
    assert old in text, f"{old!r} is not in {file}: the planted bug needs updating"
    path.write_text(text.replace(old, new, 1))


def scores(parts) -> dict:
    return {p.key: (p.score, p.points) for p in parts}


def test_the_key_gets_full_marks(tmp_path):
    lines = []
    parts = grade(key_copy(tmp_path), "abcd", QUICK, out=lines.append).parts
    assert scores(parts) == {"a": (30, 30), "b": (25, 25), "c": (30, 30), "d": (15, 15)}, "\n".join(lines)
    assert not any(p.culprit for p in parts)
    served = [line for line in lines if line.startswith("  ") and ".py: " in line]
    assert len(served) == 12 and all("student/ch" in line for line in served), served  # every piece: the copy's


def test_the_stubs_score_zero_and_name_a_piece(tmp_path):
    folder = tmp_path / "exercises"
    shutil.copytree(REPO / "exercises", folder)
    lines = []
    parts = grade(folder, "abcd", QUICK, out=lines.append).parts
    assert sum(p.score for p in parts) == 0, "\n".join(lines)
    assert all(p.culprit and not p.culprit.startswith("(") for p in parts), [p.culprit for p in parts]
    assert any("not implemented yet" in c.message for p in parts for c in p.checks)


@pytest.mark.parametrize("bug, piece", [
    (("ch05_rope.py", 'if layout == "interleaved":', "if True:  # planted: always interleaved"), "RoPE"),
    (("ch04_attention.py", "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", "q @ k.transpose(-2, -1)"),
     "attention"),
], ids=["rope-wrong-layout", "missing-sqrt-d"])
def test_a_planted_bug_is_named(tmp_path, bug, piece):
    folder = key_copy(tmp_path)
    plant(folder, *bug)
    lines = []
    (part,) = grade(folder, "a", QUICK, out=lines.append).parts
    # every check fails but the hidden one-token check, blind to both bugs: RoPE turns position 0 by no
    # angle, and the softmax of one score is 1 whatever its scale
    failing = [c for c in part.checks if c.name != "hidden: one-token sequences"]
    assert all(c.score == 0 for c in failing) and part.culprit == piece, "\n".join(lines)
    assert f"the first of your pieces to disagree: {piece}" in "\n".join(lines)


def test_without_the_key_the_package_names_the_piece(tmp_path, monkeypatch):
    """The student release has no solutions/: the package's functions are the reference, and the
    student's block, model and KV cache (which the package has no function for) stay theirs."""
    from llama_course.grade import capstone

    monkeypatch.setattr(capstone, "reference_pieces", capstone.package_pieces)
    folder = key_copy(tmp_path)
    plant(folder, "ch04_attention.py", "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", "q @ k.transpose(-2, -1)")
    lines = []
    (part,) = grade(folder, "a", QUICK, out=lines.append).parts
    assert [c.score for c in part.checks] == [0, 0, 0, 5] and part.culprit == "attention", "\n".join(lines)


def test_a_missing_piece_is_reported_not_replaced(tmp_path):
    folder = key_copy(tmp_path)
    (folder / "ch09_gqa.py").unlink()
    lines = []
    (part,) = grade(folder, "b", QUICK, out=lines.append).parts
    text = "\n".join(lines)
    assert "GQA        MISSING: student/ch09_gqa.py does not exist" in text
    assert part.checks[0].score == 0 and part.culprit == "GQA", text


@pytest.mark.parametrize("relative", [False, True], ids=["absolute-path", "relative-path"])
def test_calling_the_package_answer_costs_the_points(tmp_path, monkeypatch, relative):
    folder = key_copy(tmp_path)
    plant(folder, "ch03_norm.py", "    h = x.float()\n", "    import llama_course.norm\n"
          "    return llama_course.norm.rms_norm(x, weight, eps)\n")
    if relative:  # as `make capstone` passes it: exercises/, relative to the working folder
        monkeypatch.chdir(tmp_path)
        folder = Path(folder.name)
    lines = []
    (part,) = grade(folder, "a", QUICK, out=lines.append).parts
    assert part.score == 0, "\n".join(lines)
    assert "llama_course.norm.rms_norm (ch03_norm.py line" in part.checks[0].message


def test_the_command(tmp_path):
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "llama_course.grade", "capstone", str(key_copy(tmp_path)), "--quick",
                          "--parts", "a", "--json", str(out)], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(out.read_text())["score"] == 30
    assert "capstone: 30 / 30 points" in run.stdout


def test_the_release_leaves_out_this_key_reading_test():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import student_release
    finally:
        sys.path.remove(str(REPO / "tools"))
    assert student_release.instructor_only("tests/e2e/test_capstone.py", REPO)
    assert not student_release.instructor_only("llama_course/grade/capstone.py", REPO)
    assert "BEGIN SOLUTION" not in (REPO / "llama_course" / "grade" / "capstone.py").read_text()


# -- the grader's rule on every part (part (c)'s tokenizer and training included) ------------------------------


def test_a_package_piece_under_the_students_name_scores_zero(tmp_path):
    """ch02_tokens.py that hands in the package's train_bpe as its own (an import, no def)."""
    folder = key_copy(tmp_path)
    path = folder / "ch02_tokens.py"
    path.write_text(path.read_text() + "\nfrom llama_course.tokenizer.bpe import train_bpe  # noqa\n")
    lines = []
    (part,) = grade(folder, "c", QUICK, out=lines.append).parts
    text = "\n".join(lines)
    assert [c.score for c in part.checks] == [0, 0, 0, 5], text  # the hidden loss check uses no tokenizer
    assert "llama_course.tokenizer.bpe.train_bpe" in part.checks[0].message, text
    assert "tokenizer  NOT YOURS" in text


def test_calling_the_package_tokenizer_costs_part_c(tmp_path):
    folder = key_copy(tmp_path)
    plant(folder, "ch02_tokens.py", "    return BPETokenizer(vocab, merges, special_tokens, pattern)\n",
          "    return BPETokenizer(vocab, merges, special_tokens, pattern)\n\n\n"
          "def _unused():\n    pass\n")
    plant(folder, "ch02_tokens.py", "def train_bpe(text: str, vocab_size: int, special_tokens=(), pattern=None) "
          "-> BPETokenizer:\n", "def train_bpe(text: str, vocab_size: int, special_tokens=(), pattern=None) "
          "-> BPETokenizer:\n    import llama_course.tokenizer.bpe as b\n"
          "    return b.train_bpe(text, vocab_size, special_tokens, pattern)\n")
    lines = []
    (part,) = grade(folder, "c", QUICK, out=lines.append).parts
    text = "\n".join(lines)
    assert [c.score for c in part.checks] == [0, 0, 0, 5], text  # the hidden loss check uses no tokenizer
    assert all("llama_course.tokenizer.bpe.train_bpe (ch02_tokens.py line" in c.message for c in part.checks[:3]), text


def test_a_file_that_breaks_the_import_rule_costs_its_pieces(tmp_path):
    folder = key_copy(tmp_path)
    path = folder / "ch06_ffn.py"
    path.write_text("import transformers  # noqa\n" + path.read_text())
    lines = []
    parts = grade(folder, "ab", QUICK, out=lines.append).parts
    text = "\n".join(lines)
    assert sum(p.score for p in parts) == 0, text
    assert "no points for anything in ch06_ffn.py" in text and "imports transformers" in text


# -- hidden tests with points (tests/hidden/capstone_checks.py) -------------------------------------------------


def test_a_bug_only_the_hidden_tests_see_costs_their_points(tmp_path):
    """RoPE that stops turning after position 31: the public checks (8 positions) pass, the hidden
    40-position check fails, names RoPE, and costs its share of part (a)'s hidden 10 points."""
    folder = key_copy(tmp_path)
    plant(folder, "ch05_rope.py", "rope_cos_sin(positions, x.shape[-1], base)",
          "rope_cos_sin(positions.clamp(max=31), x.shape[-1], base)")
    lines = []
    (part,) = grade(folder, "a", QUICK, out=lines.append).parts
    text = "\n".join(lines)
    assert (part.score, part.points) == (25, 30), text
    assert [c.score for c in part.checks] == [10, 10, 0, 5], text
    assert part.checks[2].name.startswith("hidden: MQA") and part.culprit == "RoPE", text


def test_without_the_hidden_tests_the_part_says_what_is_not_checked(tmp_path, monkeypatch):
    from llama_course.grade import capstone

    monkeypatch.setattr(capstone, "HIDDEN", tmp_path / "absent.py")
    monkeypatch.setattr(capstone.hidden_checks, "__defaults__", (tmp_path / "absent.py",))
    lines = []
    (part,) = grade(key_copy(tmp_path), "a", QUICK, out=lines.append).parts
    assert (part.score, part.points) == (20, 20)
    assert "hidden tests: 10 more points, not checked here" in "\n".join(lines)


def test_the_release_leaves_out_the_capstones_hidden_tests():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import student_release
    finally:
        sys.path.remove(str(REPO / "tools"))
    assert (REPO / "tests" / "hidden" / "capstone_checks.py").is_file()
    assert student_release.instructor_only("tests/hidden/capstone_checks.py", REPO)


# -- the device of what the capstone makes (Sizes(device=...)): checked on the meta device, no GPU needed ------


class Stop(Exception):
    pass


def meta_capstone(tmp_path):
    import dataclasses

    from llama_course.grade.capstone import Capstone

    return Capstone(key_copy(tmp_path), dataclasses.replace(QUICK, device="meta"), out=lambda *_: None, hidden=False)


def test_part_d_samples_on_the_models_device(tmp_path, monkeypatch):
    """Part (d)'s prompt and model are on Sizes.device (here meta), not the CPU."""
    from llama_course import your_llama as yl

    seen = {}

    def spy(model, prompt, *args, **kwargs):
        seen.update(model=next(model.parameters()).device.type, prompt=prompt.device.type)
        raise Stop

    monkeypatch.setattr(yl, "sample_tokens", spy)
    capstone = meta_capstone(tmp_path)
    with pytest.raises(Stop):
        capstone.sampling_check({})(capstone.bench)
    assert seen == {"model": "meta", "prompt": "meta"}


def test_part_c_proxy_trains_on_the_sizes_device(tmp_path, monkeypatch):
    """The stand-in that names part (c)'s piece trains on Sizes.device (here meta), its batch too."""
    from llama_course.grade import capstone as grading

    seen = []

    def spy(model, loss_fn, x, steps):
        seen.append((next(model.parameters()).device.type, x.device.type))
        raise Stop

    monkeypatch.setattr(grading, "adam_losses", spy)
    capstone = meta_capstone(tmp_path)
    with pytest.raises(Stop):
        capstone.training_proxy(capstone.corpus()[0])
    assert seen == [("meta", "meta")]


# -- the grader's sandbox (the command's default) -------------------------------------------------------------


def test_where_the_sandbox_cannot_be_had_nothing_is_graded(tmp_path, monkeypatch):
    """sandbox.confine refusing (e.g. root with the course in a folder others cannot enter): the command
    grades nothing, says why, and results.json scores 0; no student code ran."""
    from llama_course.grade import capstone, sandbox

    def refuse(*args, **kwargs):
        raise sandbox.ConfinementError("the course's folder is closed to other users")

    monkeypatch.setattr(sandbox, "confine", refuse)
    monkeypatch.setattr(capstone, "Bench", None)  # any attempt to load the student's pieces here would fail
    out = tmp_path / "results.json"
    assert capstone.main([str(key_copy(tmp_path)), "--quick", "--gradescope", str(out)]) == 2
    results = json.loads(out.read_text())
    assert results["score"] == 0 and results["tests"] == []
    assert "grading refused: the course's folder is closed to other users" in results["output"]


TAMPER = """
import llama_course.grade.capstone as grading
grading.close = lambda *args, **kwargs: None          # every comparison passes, where this runs
grading.CheckFailed = type("Never", (Exception,), {})
"""


def test_in_the_sandbox_student_code_cannot_reach_the_verdicts(tmp_path):
    """A ch03_norm.py whose rms_norm forgets the weight and that patches the grader's comparisons:
    in the sandbox the patch reaches only the worker's copy of the grader, and every logits check
    of part (a) fails (the checkpoints' norm weights are not 1), naming RMSNorm."""
    folder = key_copy(tmp_path)
    plant(folder, "ch03_norm.py", "    return (weight * h.to(x.dtype)).to(x.dtype)\n", "    return h.to(x.dtype)\n")
    (folder / "ch03_norm.py").write_text((folder / "ch03_norm.py").read_text() + TAMPER)
    run = subprocess.run([sys.executable, "-m", "llama_course.grade", "capstone", str(folder), "--quick",
                          "--parts", "a", "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                         cwd=REPO, timeout=1200)
    assert "sandbox: " in run.stdout, run.stdout + run.stderr
    part = json.loads((tmp_path / "r.json").read_text())["parts"][0]
    assert part["score"] == 0 and part["culprit"] == "RMSNorm", run.stdout + run.stderr
