"""The grader end to end, in a separate process, as a student runs it."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_course.grade.points import split

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "grader_cases"


def grade(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "llama_course.grade", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def total(stdout: str) -> tuple[float, float]:
    earned, possible = re.search(r"^Total\s+([\d.]+) / ([\d.]+)", stdout, re.M).groups()
    return float(earned), float(possible)


# The grader end to end on three chapters, not twelve (a minute and a half of grading each time):
# a tokenizer (Ch 2), a model checked against transformers (Ch 7) and the parallel chapter (Ch 13),
# practice and homework. Every chapter's key passes its graded tests in `make test` (tests/graded
# --impl=solutions) and its hidden tests in tests/e2e/test_release.py.
CHAPTERS = (2, 7, 13)


def chapter_options() -> list[str]:
    return [option for chapter in CHAPTERS for option in ("--chapter", str(chapter))]


def chapters_graded(results: dict) -> set[int]:
    """The chapters of the labels in a results.json ("Exercise 7.2 ...", "Homework 13.A ...")."""
    return {int(t["name"].split()[1].split(".")[0]) for t in results["tests"]}


@pytest.mark.slow
def test_solutions_score_full_marks(tmp_path):
    run = grade(REPO / "solutions", *chapter_options(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    earned, possible = total(run.stdout)
    assert possible > 0 and earned == possible, run.stdout
    results = json.loads((tmp_path / "results.json").read_text())  # default: the current directory
    assert results["score"] == possible
    assert {"name", "score", "max_score", "output"} <= set(results["tests"][0])
    assert all(t["score"] == t["max_score"] for t in results["tests"])
    assert chapters_graded(results) == set(CHAPTERS)
    assert any(t["tags"] == ["homework"] for t in results["tests"])  # homework is graded too


@pytest.mark.slow
def test_stubs_score_zero_without_a_traceback(tmp_path):
    out = tmp_path / "out" / "results.json"
    run = grade(REPO / "exercises", *chapter_options(), "--out", out, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    earned, possible = total(run.stdout)
    assert earned == 0 and possible > 0
    results = json.loads(out.read_text())
    assert results["score"] == 0 and len(results["tests"]) > 0
    assert chapters_graded(results) == set(CHAPTERS)
    assert all("not implemented yet" in t["output"] for t in results["tests"])
    assert run.stdout.count("not implemented yet") >= 2  # one line per exercise in the table


@pytest.mark.slow
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


@pytest.mark.slow
def test_chapter_filter_and_bad_path(tmp_path):
    run = grade(REPO / "solutions", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0 and "Exercise 1.1" in run.stdout
    run = grade(tmp_path / "missing", cwd=tmp_path)
    assert run.returncode == 2 and "is not a folder" in run.stderr


@pytest.mark.slow
def test_a_missing_file_fails_its_tests_only(tmp_path):
    (tmp_path / "subm").mkdir()
    run = grade(tmp_path / "subm", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert total(run.stdout)[0] == 0
    assert "does not exist" in json.loads((tmp_path / "results.json").read_text())["tests"][0]["output"]


@pytest.mark.slow
def test_syntax_error_is_reported_with_its_line(tmp_path):
    (tmp_path / "subm").mkdir()
    (tmp_path / "subm" / "ch01_anatomy.py").write_text("import torch\n\ndef ffn_hidden_dim(:\n")
    run = grade(tmp_path / "subm", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    output = json.loads((tmp_path / "results.json").read_text())["tests"][0]["output"]
    assert "could not import ch01_anatomy.py" in output and "SyntaxError" in output
    assert "line 3" in output and "line 3" in run.stdout  # under the table, not cut off


@pytest.mark.slow
def test_grading_a_class(tmp_path):
    for student in ("ada", "bob/exercises", "__MACOSX/ada", ".git"):
        (tmp_path / "subs" / student).mkdir(parents=True)
    shutil.copy(REPO / "solutions" / "ch01_anatomy.py", tmp_path / "subs" / "ada")
    shutil.copy(REPO / "exercises" / "ch01_anatomy.py", tmp_path / "subs" / "bob" / "exercises")
    (tmp_path / "subs" / "bob" / ".DS_Store").write_bytes(b"\0junk")
    run = grade("--class", tmp_path / "subs", "--out-dir", tmp_path / "grades", "--chapter", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = list(csv.reader((tmp_path / "grades" / "class.csv").open()))
    assert rows[0][:4] == ["student", "score", "max_score", "Exercise 1.1 ffn_hidden_dim"] and rows[0][-1] == "error"
    maxima, ada, bob = rows[1], rows[2], rows[3]
    assert len(rows) == 4  # __MACOSX and .git are not students
    assert maxima[0] == "(maximum)" and float(maxima[1]) > 0 and float(maxima[3]) == float(split("Exercise 1.1").total)
    assert ada[0] == "ada" and ada[1] == ada[2] == maxima[1] and ada[-1] == ""
    assert bob[0] == "bob" and bob[1] == "0" and bob[2] == maxima[1]  # graded from bob/exercises
    assert (tmp_path / "grades" / "ada.json").exists()
    again = grade("--class", tmp_path / "subs", "--out-dir", tmp_path / "grades", cwd=tmp_path)
    assert again.returncode == 2 and "not empty" in again.stderr  # old grades are never reused


@pytest.mark.slow
def test_a_killed_grader_leaves_an_error_row_not_a_score(tmp_path):
    """Without the sandbox user (--same-user, as on a laptop), student code can kill the grader
    after forging its results file: the class row must be an error with the reason."""
    sub = tmp_path / "subs" / "eve"
    sub.mkdir(parents=True)
    (sub / "ch98_hostile.py").write_text(
        "import json, os, signal\n"
        "def answer():\n"
        "    out = os.environ['GRADER_CASE_OUT']\n"
        "    open(out, 'w').write(json.dumps({'score': 2, 'max_score': 2, 'tests': []}))\n"
        "    pid = os.getpid()\n"
        "    for _ in range(2):  # the forkserver, then the grader\n"
        "        pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "def other():\n"
        "    return 1\n")
    grades = tmp_path / "grades"
    run = grade("--class", tmp_path / "subs", "--out-dir", grades, "--tests", CASES / "hostile", "--same-user",
                cwd=tmp_path, env={"GRADER_CASE_OUT": str(grades / "eve.json")})
    assert run.returncode == 1
    rows = list(csv.reader((grades / "class.csv").open()))
    eve = rows[-1]
    assert eve[0] == "eve" and eve[1] == eve[2] == "" and "grading failed (exit code -9)" in eve[-1], rows
    assert "ERROR" in run.stdout and not (grades / "eve.json").exists()


SEMANTICS = """
import time
def first():
    return 0
def first_list():
    return list(range(41))
def second():
    return first() + 1
def hang():
    while True:
        time.sleep(0.1)
def hw():
    return 3
"""


@pytest.mark.slow
def test_semantics_and_feedback(tmp_path):
    (tmp_path / "subm").mkdir()
    (tmp_path / "subm" / "ch97_semantics.py").write_text(SEMANTICS)
    run = grade(tmp_path / "subm", "--tests", CASES / "semantics", "--timeout", "4", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert total(out) == (1, 9)  # the homework check passes; the skipped test keeps its point in the maximum
    for label in ("Exercise 97.1 first", "Exercise 97.2 second", "Exercise 97.3 skipped", "Exercise 97.4 hangs",
                  "Homework 97.A hw"):
        assert re.search(rf"^{re.escape(label)}\s+\d", out, re.M), label  # one row per exercise
    assert "first() should return 1 (the worked example)" in out  # full messages under the table
    assert "Use -v" not in out and "-vv" not in out
    assert "uses your Exercise 97.1, which fails" in out
    assert "grading error: this graded test was skipped (needs a GPU)" in out
    assert "not run: your hang timed out in an earlier test of this exercise" in out  # one timeout per exercise
    assert "public checks only" in out and "hidden tests" in out
    assert f"The full report (your code's output too): {tmp_path / 'results.json'}" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["max_score"] == 9
    assert any(t["tags"] == ["homework"] for t in results["tests"])


@pytest.mark.slow
def test_a_hanging_import_costs_one_timeout(tmp_path):
    (tmp_path / "subm").mkdir()
    (tmp_path / "subm" / "ch97_semantics.py").write_text("while True:\n    pass\n")
    run = grade(tmp_path / "subm", "--tests", CASES / "semantics", "--timeout", "5", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    outputs = [t["output"] for t in json.loads((tmp_path / "results.json").read_text())["tests"]]
    assert sum("did not finish within the test's 5 s" in o for o in outputs) == 1
    assert sum("importing ch97_semantics.py timed out in an earlier test" in o for o in outputs) == len(outputs) - 1


def test_device_parametrized_tests_share_their_points():
    from llama_course.grade import grader

    class Item:
        def __init__(self, nodeid, params):
            self.nodeid, self.callspec = nodeid, type("Spec", (), {"params": params})()

        def get_closest_marker(self, name):
            return pytest.mark.graded("Exercise 4.1 softmax", weight=3).mark

    collector = grader._Collector()   # Exercise 4.1 is worth 1 point (the table): two tests of equal weight
    collector.pytest_collection_modifyitems([Item("t::a[cpu]", {"device": "cpu"}),
                                             Item("t::a[cuda]", {"device": "cuda"}), Item("t::b[3d]", {"shape": 3})])
    points = {r.name: r.max_score for r in collector.results.values()}
    assert points == {"a[cpu]": 0.25, "a[cuda]": 0.25, "b[3d]": 0.5}


@pytest.mark.slow
def test_list_works_in_a_student_release(tmp_path):
    """No solutions/, no tests/hidden: sections come from the stubs; homework is marked."""
    release = tmp_path / "release"
    shutil.copytree(REPO / "llama_course", release / "llama_course", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "exercises", release / "exercises")
    (release / "tests" / "graded").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conftest.py", release / "tests")
    for name in ("__init__.py", "_checks.py", "test_ch04_attention.py"):   # a package: tests/hidden shares names
        shutil.copy(REPO / "tests" / "graded" / name, release / "tests" / "graded")
    shutil.copy(CASES / "semantics" / "test_ch97_semantics.py", release / "tests" / "graded")
    run = grade("--list", cwd=release, env={"PYTHONPATH": str(release)})
    assert run.returncode == 0, run.stderr
    assert re.search(r'^Exercise 4\.1\s+softmax\s+practice\s+4\.3 "Softmax"\s+1\s+1$', run.stdout, re.M), run.stdout
    homework = r'^Homework 4\.A\s+alibi_bias\s+homework\s+4\.4 "The causal mask"\s+6\s+1$'   # "beyond section 4.4"
    assert re.search(homework, run.stdout, re.M), run.stdout    # 6 points, of which the public checks carry 1
    assert re.search(r"^Homework 97\.A\s+hw\s+homework\s+1\s+1$", run.stdout, re.M), run.stdout
    assert "grading here can check the Public points only" in run.stdout


def test_staging_skips_a_file_past_the_size_limit_and_says_why(tmp_path, monkeypatch):
    """A submission holding a file past the limit used to crash the grader (chmod of a file never
    copied); now the file is left out, and a .py file past the limit fails to import with the reason."""
    from llama_course.grade import grader

    monkeypatch.setattr(grader, "SUBMISSION_BYTES", 100)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ch01_anatomy.py").write_text("x = 1\n")
    (sub / "ch02_tokens.py").write_text("# " + "y" * 200 + "\n")
    (sub / "weights.bin").write_bytes(b"\0" * 500)
    (tmp_path / "out").mkdir()
    out = grader.stage(sub, tmp_path / "out")
    assert (out / "ch01_anatomy.py").read_text() == "x = 1\n"
    assert not (out / "weights.bin").exists()
    assert "was not graded" in (out / "ch02_tokens.py").read_text()


def test_one_rule_says_whether_a_run_has_the_hidden_tests(tmp_path):
    """The table's 'not checked here', the homework note and --list's footer all ask one helper,
    which uses the folder rule of points.is_hidden: they cannot disagree about a run."""
    from llama_course.grade import grader
    from llama_course.grade.points import HIDDEN_FOLDER

    homework = [grader.TestResult("test_x", "Homework 3.B fold_norm_weights", 1.0, "homework", score=1.0)]
    graded, hidden = tmp_path / "graded", tmp_path / HIDDEN_FOLDER
    for dirs, has_hidden in (([graded], False), ([graded, hidden], True), ([hidden / "sub"], False)):
        assert grader.runs_hidden_tests(dirs) is has_hidden, dirs
        assert (grader.unchecked_points(dirs) == {}) is has_hidden, dirs
        assert (grader.homework_note(homework, dirs) == "") is has_hidden, dirs
