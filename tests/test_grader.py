"""The grader end to end, in a separate process, as a student runs it."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "grader_cases"


def grade(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "llama_course.grade", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def total(stdout: str) -> tuple[float, float]:
    earned, possible = re.search(r"^Total\s+([\d.]+) / ([\d.]+)", stdout, re.M).groups()
    return float(earned), float(possible)


def test_solutions_score_full_marks(tmp_path):
    run = grade(REPO / "solutions", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    earned, possible = total(run.stdout)
    assert possible > 0 and earned == possible, run.stdout
    results = json.loads((tmp_path / "results.json").read_text())  # default: the current directory
    assert results["score"] == possible
    assert {"name", "score", "max_score", "output"} <= set(results["tests"][0])
    assert all(t["score"] == t["max_score"] for t in results["tests"])


def test_stubs_score_zero_without_a_traceback(tmp_path):
    out = tmp_path / "out" / "results.json"
    run = grade(REPO / "exercises", "--out", out, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    earned, possible = total(run.stdout)
    assert earned == 0 and possible > 0
    results = json.loads(out.read_text())
    assert results["score"] == 0 and len(results["tests"]) > 0
    assert all("not implemented yet" in t["output"] for t in results["tests"])
    assert run.stdout.count("not implemented yet") >= 2  # one line per exercise in the table


def test_misbehaving_code_loses_only_its_own_points(tmp_path):
    out = tmp_path / "results.json"
    run = grade(CASES / "submission", "--tests", CASES / "graded", "--out", out, "--timeout", "5",
                cwd=tmp_path, env={"GRADER_CASE_TARGET": str(out)})
    assert run.returncode == 0, run.stderr
    time.sleep(3)  # the writer the student spawned would have written by now
    results = json.loads(out.read_text())
    scores = {t["name"].split(" :: ")[1]: t for t in results["tests"]}
    passed = {name for name, t in scores.items() if t["score"] == t["max_score"]}
    assert passed == {"test_good", "test_noisy", "test_good_after_patch", "test_raises_value_error",
                      "test_remote_object"}
    assert results["score"] == 5 and results["max_score"] == 13
    assert "sys.exit(3)" in scores["test_exits"]["output"]
    assert "died" in scores["test_hard_exit"]["output"]
    assert "timed out" in scores["test_hangs"]["output"]
    assert "hello from the student's module" in scores["test_good"]["output"]
    assert len(scores["test_noisy"]["output"]) < 10_000 and "cut at" in scores["test_noisy"]["output"]
    assert not list(tmp_path.glob(".results-*"))  # the atomic write left no temporary file
    assert "Traceback" not in run.stdout


def test_chapter_filter_and_bad_path(tmp_path):
    run = grade(REPO / "solutions", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0 and "Exercise 1.1" in run.stdout
    run = grade(tmp_path / "missing", cwd=tmp_path)
    assert run.returncode == 2 and "is not a folder" in run.stderr


def test_a_missing_file_fails_its_tests_only(tmp_path):
    (tmp_path / "subm").mkdir()
    run = grade(tmp_path / "subm", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert total(run.stdout)[0] == 0
    assert "does not exist" in json.loads((tmp_path / "results.json").read_text())["tests"][0]["output"]


def test_syntax_error_is_reported(tmp_path):
    (tmp_path / "subm").mkdir()
    (tmp_path / "subm" / "ch01_anatomy.py").write_text("def ffn_hidden_dim(:\n")
    run = grade(tmp_path / "subm", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    output = json.loads((tmp_path / "results.json").read_text())["tests"][0]["output"]
    assert "could not import ch01_anatomy.py" in output and "SyntaxError" in output


def test_grading_a_class(tmp_path):
    import shutil

    for student in ("ada", "bob"):
        (tmp_path / "subs" / student).mkdir(parents=True)
    shutil.copy(REPO / "solutions" / "ch01_anatomy.py", tmp_path / "subs" / "ada")
    shutil.copy(REPO / "exercises" / "ch01_anatomy.py", tmp_path / "subs" / "bob")
    run = grade("--class", tmp_path / "subs", "--out-dir", tmp_path / "grades", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = (tmp_path / "grades" / "class.csv").read_text().splitlines()
    assert rows[0].startswith("student,score,max_score,Exercise 1.1")
    ada, bob = rows[1].split(","), rows[2].split(",")
    assert ada[0] == "ada" and ada[1] == ada[2] != "0" and bob[0] == "bob" and bob[1] == "0"
    assert (tmp_path / "grades" / "ada.json").exists()
