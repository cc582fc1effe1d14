"""The grader fails closed: it hides by file modes, checks as the worker's user that the hidden
paths are unreadable, refuses where it cannot confine, and writes any student text safely."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from llama_course.grade import grader, sandbox

REPO = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.geteuid() == 0),
                             reason="switching to another uid needs root on Linux")
UID = sandbox.UID_BASE + 4242  # a uid no file and no process uses


@as_root
def test_hidden_paths_are_closed_by_mode_and_checked_as_the_worker():
    with tempfile.TemporaryDirectory() as folder:  # under /tmp: a folder every user can enter
        os.chmod(folder, 0o755)
        check_closing(Path(folder))


def check_closing(tmp_path):
    hidden, secret, public = tmp_path / "hidden", tmp_path / "key.py", tmp_path / "public.py"
    hidden.mkdir(mode=0o755)
    (hidden / "test_x.py").write_text("expected = 42\n")
    secret.write_text("answer = 42\n")
    public.write_text("x = 1\n")
    for f in (hidden / "test_x.py", secret, public):
        f.chmod(0o644)
    paths = [str(hidden), str(secret), str(public)]
    assert sandbox.readable_by(UID, UID, paths) == paths            # world-readable: the worker reads all
    assert sandbox.close_to_others([str(hidden), str(secret)]) == [str(hidden), str(secret)]
    assert sandbox.readable_by(UID, UID, paths) == [str(public)]    # closed ones are not
    assert hidden.stat().st_mode & 0o777 == 0o750 and secret.stat().st_mode & 0o777 == 0o640
    assert sandbox.close_to_others([str(hidden)]) == []             # already closed: nothing to change


@as_root
def test_a_closed_folder_above_the_course_refuses_instead_of_running_as_root(tmp_path, monkeypatch):
    closed = tmp_path / "home"
    monkeypatch.setattr(sandbox, "closed_folder", lambda path: closed)
    closed.mkdir(mode=0o700)
    with pytest.raises(sandbox.ConfinementError, match=r"closed to other users.*chmod o\+x"):
        sandbox.confine([])
    confinement, warnings = sandbox.confine([], own=True)       # the course's own exercises/: yours
    assert confinement.uid is None and "closed to other users" in warnings[0]
    upload = tmp_path / "upload"                                 # somebody else's code: refused
    upload.mkdir()
    shutil.copy(REPO / "exercises" / "ch01_anatomy.py", upload)
    out = tmp_path / "results.json"
    assert grader.main([str(upload), "--out", str(out), "--chapter", "1"]) == 2
    results = json.loads(out.read_text())
    assert results["tests"] == [] and results["score"] == 0
    assert results["output"].startswith("grading refused:") and str(closed) in results["output"]


@as_root
def test_a_hidden_path_the_worker_can_still_read_refuses(tmp_path, monkeypatch):
    leaky = tmp_path / "hidden"
    leaky.mkdir()
    monkeypatch.setattr(sandbox, "readable_by", lambda uid, gid, paths: [str(leaky)])
    with pytest.raises(sandbox.ConfinementError, match="can still read"):
        sandbox.confine([leaky])


def test_class_grading_as_an_ordinary_user_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "alice").mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert grader.main(["--class", str(tmp_path), "--out-dir", str(tmp_path / "grades")]) == 2
    assert "grading refused" in capsys.readouterr().err and not (tmp_path / "grades").exists()


def test_student_text_is_written_safely():
    text = grader.safe_text("bad \ud800 surrogate, \x1b[2J escape, \x07 bell, 中文\nnext\tline")
    text.encode("utf-8")                                      # no lone surrogate left
    assert "\\ud800" in text and "\\x1b" in text and "\\x07" in text
    assert "中文\nnext\tline" in text
    json.loads(json.dumps({"output": grader._cut(text)}, ensure_ascii=False))


def hidden_result(**kw):
    base = dict(name="test_scores[0.2727272727272727-3]", exercise="Homework 13.A", max_score=2.0, kind="homework",
                hidden=True, failure="AssertionError: assert 0.5 == 0.2727272727272727 ± 1e-12\n  where inputs=[3, 7]",
                error_type="AssertionError", student_output="expected = 0.2727272727272727  # read from the tests")
    return grader.TestResult(**{**base, **kw})


def test_hidden_feedback_reveals_no_oracle(monkeypatch):
    monkeypatch.delenv("HIDDEN_VISIBILITY", raising=False)
    results = [hidden_result(), hidden_result(name="test_scores[0.5-4]", score=2.0),
               hidden_result(name="test_shape[7]", failure="AssertionError: shape (2, 3) != (2, 4)"),
               hidden_result(name="test_raise[x]", failure="ValueError: inputs were [3, 7]", error_type="ValueError"),
               grader.TestResult("test_public[1]", "Homework 13.A", 1.0, "homework", failure="assert 1 == 2")]
    data = grader.results_json(results, [])
    text = json.dumps(data)
    assert "0.2727" not in text and "[3, 7]" not in text and "read from the tests" not in text
    names = [t["name"] for t in data["tests"]]
    assert names[:4] == ["Homework 13.A :: test_scores (hidden case 1)", "Homework 13.A :: test_scores (hidden case 2)",
                         "Homework 13.A :: test_shape (hidden case 1)", "Homework 13.A :: test_raise (hidden case 1)"]
    outputs = [t["output"] for t in data["tests"]]
    assert outputs[0].startswith("wrong values") and outputs[1] == "passed"
    assert outputs[2].startswith("wrong shape") and outputs[3].startswith("your code raised ValueError")
    assert "assert 1 == 2" in outputs[4] and data["tests"][4]["visibility"] == "visible"   # public: full detail
    assert all(t["visibility"] == "after_published" for t in data["tests"][:4])
    assert "2 of 8 points come from 4 hidden tests" in data["output"]
    monkeypatch.setenv("HIDDEN_VISIBILITY", "visible")
    assert all(t["visibility"] == "visible" for t in grader.results_json(results, [])["tests"])
    monkeypatch.setenv("HIDDEN_VISIBILITY", "sometimes")
    with pytest.raises(ValueError, match="HIDDEN_VISIBILITY"):
        grader.results_json(results, [])


@as_root
def test_a_closed_standard_library_is_imported_from_a_readable_copy(tmp_path):
    """A Python under a closed home folder (pyenv, uv, conda in /root): the worker's uid cannot read
    its standard library, so the grader copies it and the worker imports from the copy."""
    home = tmp_path / "home"
    lib = home / "lib" / "python3"
    lib.mkdir(parents=True)
    (lib / "course_probe_module.py").write_text("ANSWER = 42\n")
    home.chmod(0o700)
    copy = sandbox._readable_copy(str(lib))
    code = ("import importlib, os, sys\n"
            f"from llama_course.grade.sandbox import move_imports\nsys.path.insert(0, {str(lib)!r})\n"
            f"os.setgroups([]); os.setgid({UID}); os.setuid({UID})\n"
            f"if sys.argv[1] == 'moved': move_imports((({str(lib)!r}, {copy!r}),))\n"
            "import course_probe_module; print(course_probe_module.ANSWER, course_probe_module.__file__)\n")
    moved = subprocess.run([sys.executable, "-c", code, "moved"], capture_output=True, text=True, cwd="/")
    assert moved.returncode == 0 and moved.stdout.split() == ["42", f"{copy}/course_probe_module.py"], moved.stderr
    unmoved = subprocess.run([sys.executable, "-c", code, "as is"], capture_output=True, text=True, cwd="/")
    assert unmoved.returncode != 0 and "ModuleNotFoundError" in unmoved.stderr  # the copy is what made it work
    assert oct(os.stat(copy).st_mode & 0o777) == "0o755" and os.stat(copy).st_uid == 0


@pytest.fixture
def open_tmp():
    """A temporary folder other users can enter (pytest's own tmp_path is inside a 0700 folder)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


@as_root
def test_site_packages_the_worker_cannot_read_refuses_naming_it(open_tmp, monkeypatch):
    closed = open_tmp / "home"
    packages = closed / "venv" / "site-packages"
    packages.mkdir(parents=True)
    closed.chmod(0o700)
    paths = {**sysconfig.get_paths(), "purelib": str(packages), "platlib": str(packages)}
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    with pytest.raises(sandbox.ConfinementError, match=f"cannot read {packages}.*closed folder on the way: {closed}"):
        sandbox.readable_environment(UID, UID)


@as_root
def test_a_preflight_import_that_fails_as_the_worker_refuses_naming_the_module(open_tmp, monkeypatch):
    closed, readable = open_tmp / "closed", open_tmp / "readable"
    closed.mkdir(mode=0o700)
    readable.mkdir(mode=0o755)
    (closed / "course_missing_for_the_worker.py").write_text("")
    (readable / "course_readable_module.py").write_text("")
    os.chmod(readable / "course_readable_module.py", 0o644)
    monkeypatch.setattr(sandbox, "PREFLIGHT_IMPORTS", ("course_readable_module", "course_missing_for_the_worker"))
    monkeypatch.setenv("PYTHONPATH", f"{readable}:{closed}")  # both found as root; one unreadable to the worker
    with pytest.raises(sandbox.ConfinementError, match="cannot import course_missing_for_the_worker"):
        sandbox._preflight(UID, UID, ())
    monkeypatch.setattr(sandbox, "PREFLIGHT_IMPORTS", ("course_readable_module",))
    sandbox._preflight(UID, UID, ())                          # what the worker can import passes


@pytest.mark.slow
@as_root
def test_an_honest_answer_that_imports_the_standard_library_scores_full_marks(tmp_path):
    """The key of Chapter 1 with `import statistics, fractions` inside a graded function: full marks
    as root (on a machine whose Python is under /root, as this VM's is, through the readable copy)."""
    key = (REPO / "solutions" / "ch01_anatomy.py")
    if not key.exists():
        pytest.skip("the key is not in a student release")
    source = key.read_text().replace(
        "def ffn_hidden_dim(", "def _mean_of_two():\n    import fractions\n    import statistics\n\n"
        "    return statistics.mean([fractions.Fraction(1), fractions.Fraction(3)])\n\n\ndef ffn_hidden_dim(", 1)
    source = source.replace("\n    return ", "\n    assert _mean_of_two() == 2\n    return ", 1)
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "ch01_anatomy.py").write_text(source)
    out = tmp_path / "results.json"
    assert grader.main([str(upload), "--out", str(out), "--chapter", "1"]) == 0
    results = json.loads(out.read_text())
    assert results["score"] == results["max_score"] > 0, [t for t in results["tests"] if t["score"] < t["max_score"]]


@as_root
def test_a_worker_holds_no_pipe_to_roots_helpers(open_tmp):
    """Forked from the forkserver, a worker used to inherit pipes to processes running as root (the
    resource tracker unlinks any /dev/shm name written to it). Now its only pipe or socket is the
    grader's connection (student code that needs a tracker starts its own, as its own user)."""
    student = open_tmp / "ch98_fds.py"
    student.write_text(
        "import os\n"
        "def pipes():\n"
        "    seen = [os.readlink(f'/proc/self/fd/{fd}') for fd in os.listdir('/proc/self/fd')\n"
        "            if os.path.exists(f'/proc/self/fd/{fd}')]\n"
        "    return [target for target in seen if target.startswith(('pipe:', 'socket:'))]\n")
    student.chmod(0o644)
    confinement, _ = sandbox.confine([])
    worker = sandbox.Sandbox(student, confinement=confinement)
    try:
        pipes = worker.module.pipes()
        assert len(pipes) == 1 and pipes[0].startswith("socket:"), pipes   # the connection to the grader only
    finally:
        worker.close()


def test_hidden_feedback_kinds_and_case_numbers_per_exercise():
    said = [grader.hidden_feedback(hidden_result(failure=f"AssertionError: {text}")) for text in
            ("the information in row 2 differs", "inferred length 3 != 4", "output has nan at (0, 1)", "got inf")]
    assert [s.split(" on this")[0] for s in said] == ["wrong values", "wrong values", "NaN or infinite values",
                                                      "NaN or infinite values"]
    rows = grader.results_json([hidden_result(exercise="Homework 12.A"), hidden_result(exercise="Homework 13.A"),
                                hidden_result(exercise="Homework 13.A")], [])["tests"]
    assert [row["name"] for row in rows] == ["Homework 12.A :: test_scores (hidden case 1)",
                                             "Homework 13.A :: test_scores (hidden case 1)",
                                             "Homework 13.A :: test_scores (hidden case 2)"]
