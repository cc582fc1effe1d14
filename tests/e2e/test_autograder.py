"""The Gradescope zip: one assignment's tests, hidden tests included, no answers; setup.sh picks a
Python the pins install on and installs no book tooling; run_autograder grades a Chapter 4
submission, found at any depth of the upload, out of Chapter 4's points."""
# instructor only: not in the student release

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from llama_course.grade.autograder import GRADING_PYTHON_FLOOR, build, collect
from llama_course.grade.points import chapter_totals

REPO = Path(__file__).resolve().parents[2]


def assignment_points(chapter: int) -> float:
    """The points of one chapter's assignment: its problems' points in the points table
    (tests/e2e/test_points.py checks that the grader divides each problem's across its tests)."""
    return float(sum(chapter_totals(chapter).values()))


def unpack(archive: Path, root: Path) -> Path:
    with zipfile.ZipFile(archive) as z:
        z.extractall(root / "source")
        for info in z.infolist():  # zipfile drops the mode bits: restore them as Gradescope does
            mode = info.external_attr >> 16
            if mode:
                os.chmod(root / "source" / info.filename, stat.S_IMODE(mode))
    return root


def test_zip_holds_one_assignment_and_no_answers(tmp_path):
    archive = build(tmp_path / "autograder.zip", [4])
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        for script in ("setup.sh", "run_autograder"):
            assert stat.S_IMODE(z.getinfo(script).external_attr >> 16) & 0o111
        setup = z.read("setup.sh").decode()
    assert {"pyproject.toml", "requirements-grade.txt", "tools/install_torch.sh", "llama_course/grade/grader.py",
            "llama_course/grade/sandbox.py", "tests/conftest.py", "tests/graded/test_ch04_attention.py"} <= names
    graded = {n for n in names if n.startswith("tests/graded/test_ch")}
    assert graded == {"tests/graded/test_ch04_attention.py"}, graded  # Chapter 4 only
    hidden = {p.relative_to(REPO).as_posix() for p in (REPO / "tests" / "hidden").glob("test_ch04_*.py")}
    assert hidden <= names
    assert not any(n.startswith(("solutions/", "exercises/", "book/")) or "__pycache__" in n for n in names)
    assert "requirements.lock" not in names and "requirements.lock" not in setup
    unpack(archive, tmp_path / "autograder")
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(tmp_path / "autograder" / "source" / script)], check=True)


def test_zip_includes_the_hidden_tests_of_its_chapters_only(tmp_path):
    """Hidden tests travel with the assignment they belong to (a fake tree with tests/hidden)."""
    repo = tmp_path / "repo"
    for entry in ("pyproject.toml", "README.md", "requirements-grade.txt", "tools/install_torch.sh",
                  "tests/conftest.py", "tests/graded/test_ch04_attention.py", "tests/graded/test_ch05_rope.py",
                  "llama_course/__init__.py"):
        (repo / entry).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / entry, repo / entry)
    (repo / "tests" / "hidden").mkdir()
    for name in ("test_ch04_attention.py", "test_ch05_rope.py", "_oracles.py"):
        (repo / "tests" / "hidden" / name).write_text("# hidden\n")
    (repo / "solutions").mkdir()
    (repo / "solutions" / "ch04_attention.py").write_text("# the key\n")
    with zipfile.ZipFile(build(tmp_path / "a.zip", [4], repo=repo)) as z:
        names = set(z.namelist())
    assert {"tests/hidden/test_ch04_attention.py", "tests/hidden/_oracles.py"} <= names
    assert "tests/hidden/test_ch05_rope.py" not in names and "tests/graded/test_ch05_rope.py" not in names
    assert not any(n.startswith("solutions/") for n in names)
    with pytest.raises(ValueError, match="chapter"):
        build(tmp_path / "b.zip", [42], repo=repo)


def test_collect_finds_files_at_any_depth(tmp_path):
    upload = tmp_path / "submission"
    (upload / "__MACOSX" / "hw").mkdir(parents=True)
    (upload / "__MACOSX" / "hw" / "ch04_attention.py").write_text("junk\n")
    (upload / "my homework" / "exercises").mkdir(parents=True)
    (upload / "my homework" / "exercises" / "ch04_attention.py").write_text("# deep\n")
    (upload / ".hidden").mkdir()
    (upload / ".hidden" / "ch05_rope.py").write_text("junk\n")
    (upload / "old").mkdir()
    (upload / "old" / "deeper").mkdir()
    (upload / "old" / "deeper" / "ch04_attention.py").write_text("# older, deeper copy\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("folder/ch05_rope.py", "# from a zip\n")
        z.writestr("../../ch06_ffn.py", "# escapes\n")
        z.writestr("__MACOSX/folder/ch07_model.py", "junk\n")
    (upload / "work.zip").write_bytes(buffer.getvalue())
    out = tmp_path / "flat"
    notes = collect(upload, out)
    assert sorted(p.name for p in out.iterdir()) == ["ch04_attention.py", "ch05_rope.py"]
    assert (out / "ch04_attention.py").read_text() == "# deep\n"  # the shallowest copy wins
    assert (out / "ch05_rope.py").read_text() == "# from a zip\n"
    assert any("ignored" in n and "deeper" in n for n in notes)
    assert not (tmp_path / "ch06_ffn.py").exists()
    assert stat.S_IMODE(out.stat().st_mode) == 0o755 and stat.S_IMODE((out / "ch05_rope.py").stat().st_mode) == 0o644


@pytest.mark.slow
def test_run_autograder_grades_chapter_4_out_of_its_points():
    """A Gradescope upload of a zipped folder (exercises/ inside, macOS junk beside it) in a fake
    /autograder tree: graded out of Chapter 4's points, and the key scores them all. The tree is in
    a folder every user can enter, as /autograder is (pytest's own tmp_path is closed to others,
    where a grader running as root refuses to grade)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        _grade_chapter_4(Path(folder))


def _grade_chapter_4(tmp_path: Path) -> None:
    root = unpack(build(tmp_path / "autograder.zip", [4]), tmp_path / "autograder")
    upload = root / "submission" / "homework-4" / "exercises"
    upload.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / "ch04_attention.py", upload)
    shutil.copy(REPO / "solutions" / "ch05_rope.py", upload)  # another chapter: not part of this assignment
    (root / "submission" / "__MACOSX").mkdir()
    (root / "submission" / "__MACOSX" / "ch04_attention.py").write_text("not python\x00")
    # relative paths, as an instructor types them, are taken from where run_autograder is run
    python = os.path.relpath(sys.executable, tmp_path)
    env = {**os.environ, "AUTOGRADER_ROOT": "autograder", "AUTOGRADER_PYTHON": python}
    env.pop("PYTHONPATH", None)  # run_autograder must find the package in the zip by itself
    missing = subprocess.run(["bash", str(root / "source" / "run_autograder")], cwd=tmp_path, capture_output=True,
                             text=True, env={**env, "AUTOGRADER_PYTHON": "no/such/python"}, timeout=60)
    assert missing.returncode == 1 and "no Python at" in missing.stderr
    assert "no Python at" in json.loads((root / "results" / "results.json").read_text())["output"]
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    points = assignment_points(4)
    assert points > 0
    assert results["max_score"] == points, (results["max_score"], points)
    assert results["score"] == points, [t for t in results["tests"] if t["score"] < t["max_score"]]
    assert results["tests"] and all(t["name"].startswith(("Exercise 4.", "Homework 4.")) for t in results["tests"])


def test_setup_sh_installs_python_and_only_the_grading_pins(tmp_path):
    """setup.sh on a fake Ubuntu 22.04 (python3 is 3.10, too old): it adds the deadsnakes PPA,
    makes the venv with Python 3.12, installs torch's CPU build through tools/install_torch.sh and
    then requirements-grade.txt, and nothing else. The fakes log every command."""
    assert (3, 10) < tuple(map(int, GRADING_PYTHON_FLOOR.split(".")))  # so 3.10 must be refused
    root = unpack(build(tmp_path / "autograder.zip", [4]), tmp_path / "autograder")
    log = run_setup(tmp_path, root, {"python3": (3, 10, 12)})
    commands = [" ".join(entry) for entry in log]
    assert any(c.startswith("add-apt-repository -y ppa:deadsnakes/ppa") for c in commands), commands
    assert any(c.startswith("apt-get install") and "python3.12" in c for c in commands)
    venv = [e for e in log if e[1:3] == ["-m", "venv"]]
    assert venv and Path(venv[0][0]).name == "python3.12"
    pip = [e[4:] for e in log if e[1:4] == ["-m", "pip", "install"]]
    assert pip == [["--quiet", "--disable-pip-version-check", "--no-deps", "torch==2.13.0", "--index-url",
                    "https://download.pytorch.org/whl/cpu"],                  # torch alone from its CPU index,
                   ["--quiet", "--disable-pip-version-check", "torch==2.13.0"],  # its dependencies from PyPI
                   ["--quiet", "--disable-pip-version-check", "-r", "requirements-grade.txt"]], pip
    # an image whose Python is new enough (Ubuntu 24.04: python3 is 3.12) needs no PPA
    log = run_setup(tmp_path / "noble", unpack(build(tmp_path / "b.zip", [4]), tmp_path / "noble" / "ag"),
                    {"python3": (3, 12, 3)})
    assert not any(e[0] == "add-apt-repository" for e in log)
    assert Path([e for e in log if e[1:3] == ["-m", "venv"]][0][0]).name == "python3"


FAKE_PYTHON = '''#!{real}
import json, os, sys
VERSION = {version!r}
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps([sys.argv[0], *args]) + "\\n")
here = os.path.dirname(os.path.abspath(sys.argv[0]))
if args[:1] == ["--version"]:
    print("Python %d.%d.%d" % VERSION)
elif args[:1] == ["-c"] and "import torch" in args[1]:
    if not os.path.exists(os.path.join(here, "torch-installed")):
        sys.exit(1)
    print("2.13.0 cpu")
elif args[:1] == ["-c"] and "version_info" in args[1]:
    sys.version_info = VERSION
    exec(args[1])
elif args[:2] == ["-m", "venv"]:
    os.makedirs(os.path.join(args[2], "bin"))
    with open(__file__) as me, open(os.path.join(args[2], "bin", "python"), "w") as copy:
        copy.write(me.read())
    os.chmod(os.path.join(args[2], "bin", "python"), 0o755)
elif args[:3] == ["-m", "pip", "install"] and any(a.startswith("torch==") for a in args):
    open(os.path.join(here, "torch-installed"), "w").close()
'''

FAKE_TOOL = '''#!{real}
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
if os.path.basename(sys.argv[0]) == "apt-get" and "install" in sys.argv and "python3.12" in sys.argv:
    with open(os.path.join(os.environ["FAKE_BIN"], "python3.12"), "w") as python:
        python.write(os.environ["FAKE_PYTHON312"])
    os.chmod(os.path.join(os.environ["FAKE_BIN"], "python3.12"), 0o755)
'''


def run_setup(tmp_path: Path, root: Path, pythons: dict) -> list[list[str]]:
    """Run setup.sh with PATH holding only fakes (apt-get, add-apt-repository, the given Pythons)
    and the few real programs a shell script needs."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    for tool in ("bash", "basename", "dirname", "mkdir", "cat", "uname", "rm", "env", "true"):
        os.symlink(shutil.which(tool), bin_ / tool)
    for name in ("apt-get", "add-apt-repository"):
        (bin_ / name).write_text(FAKE_TOOL.format(real=sys.executable))
        (bin_ / name).chmod(0o755)
    for name, version in pythons.items():
        (bin_ / name).write_text(FAKE_PYTHON.format(real=sys.executable, version=version))
        (bin_ / name).chmod(0o755)
    log = tmp_path / "log.jsonl"
    env = {"PATH": str(bin_), "FAKE_LOG": str(log), "FAKE_BIN": str(bin_), "AUTOGRADER_ROOT": str(root),
           "FAKE_PYTHON312": FAKE_PYTHON.format(real=sys.executable, version=(3, 12, 3))}
    run = subprocess.run([str(bin_ / "bash"), str(root / "source" / "setup.sh")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_capstone_zip_is_its_own_assignment(tmp_path):
    """The capstone's zip: the package and the capstone's hidden tests, no chapter's tests, no answers;
    its run_autograder runs the capstone, not the chapter grader."""
    with zipfile.ZipFile(build(tmp_path / "capstone.zip", capstone=True)) as z:
        names = set(z.namelist())
        run = z.read("run_autograder").decode()
    assert {"llama_course/grade/capstone.py", "llama_course/your_llama.py", "llama_course/grade/sandbox.py",
            "tests/hidden/capstone_checks.py", "requirements-grade.txt"} <= names
    assert not any(n.startswith(("tests/graded/", "solutions/", "exercises/")) for n in names), names
    assert not any(n.startswith("tests/hidden/test_ch") for n in names)
    assert "llama_course.grade capstone" in run and "--upload" in run and "--gradescope" in run
    with pytest.raises(ValueError, match="capstone"):
        build(tmp_path / "both.zip", [4], capstone=True)


@pytest.mark.slow
def test_run_autograder_grades_the_capstone():
    """The capstone's assignment in a fake /autograder tree (a folder every user can enter), at the
    smallest sizes (CAPSTONE_ARGS=--quick): the key's exercises/ folder gets 100 of 100, every row
    full, and the output lists which of the student's files served each piece; the stubs get 0."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        key = _grade_capstone(Path(folder) / "key", REPO / "solutions")
        stubs = _grade_capstone(Path(folder) / "stubs", REPO / "exercises")
    assert key["score"] == 100 and sum(t["max_score"] for t in key["tests"]) == 100, key["output"]
    assert all(t["score"] == t["max_score"] for t in key["tests"])
    assert {t["name"].split(" :: ")[0] for t in key["tests"]} == {f"Capstone ({p})" for p in "abcd"}
    served = [line for line in key["output"].splitlines() if line.startswith("  ") and ".py: " in line]
    assert len(served) == 12 and all("submission/ch" in line for line in served), key["output"]
    assert "sandbox: " in key["output"]
    assert stubs["score"] == 0 and sum(t["max_score"] for t in stubs["tests"]) == 100, stubs["output"]
    hidden = [t for t in stubs["tests"] if " :: hidden: " in t["name"]]
    assert hidden and all(t["visibility"] == "after_published" and "not shown" in t["output"] for t in hidden)


def _grade_capstone(tmp_path: Path, exercises: Path) -> dict:
    root = unpack(build(tmp_path / "capstone.zip", capstone=True), tmp_path / "autograder")
    upload = root / "submission" / "my capstone" / "exercises"
    shutil.copytree(exercises, upload)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
           "CAPSTONE_ARGS": "--quick"}
    env.pop("PYTHONPATH", None)  # run_autograder must find the package in the zip by itself
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((root / "results" / "results.json").read_text())
