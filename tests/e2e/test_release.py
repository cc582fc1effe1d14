"""The student release is a student's repository: its own README and Makefile, no key, no hidden
tests, no homework answer anywhere, and nothing in it that can overwrite a student's work."""
# instructor only: not in the student release

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from llama_course.grade.stubs import BEGIN, END, make_stub

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import student_release  # noqa: E402

INSTRUCTOR_TARGETS = {"exercises", "autograder", "student-release", "colab-cells", "lock"}
# Targets run for real in the unpacked release (with the shared .venv linked in), and targets only
# listed with `make -n` because they take minutes (the whole suite, the book, the capstone), start
# a server (lab), download (install-cuda) or need a CUDA GPU (gpu-check): their commands must not
# write exercises/.
RUN = {"help", "install", "lint", "grade", "clean"}
DRY = {"book", "lab", "test", "check", "test-unit", "test-package", "test-notebooks", "test-book", "test-site",
       "test-site-if-browser", "install-cuda", "gpu-check", "capstone", "book-zh", "translations"}


STUDENTS = "https://github.com/example-course/llama-course-students"   # the repository the students get


def unpack_release(tmp_path: Path, repo: Path = REPO, repository: str = STUDENTS) -> Path:
    archive = student_release.write_tarball(tmp_path / "release.tar.gz", repository, repo)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    return tmp_path / "unpacked" / student_release.PREFIX


def makefile_targets(text: str) -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*)::?(?!=)", text, re.M))


def test_release_is_a_students_repository(tmp_path):
    release = unpack_release(tmp_path)
    files = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert not any(f.startswith(("solutions/", "tests/hidden/", "tests/grader_cases/")) for f in files)
    for entry in student_release.INSTRUCTOR_ONLY:
        assert entry.rstrip("/") not in files and not any(f.startswith(entry) for f in files), entry
    assert not [f for f in files if student_release.MARKER in (release / f).read_text(errors="replace")[:2000]]
    assert {"exercises/ch01_anatomy.py", "tests/graded/test_ch04_attention.py", "llama_course/__init__.py",
            "tools/install_torch.sh", "book/ch04_attention.ipynb", "_toc.yml", ".ci/run"} <= files
    assert os.access(release / "tools" / "install_torch.sh", os.X_OK) and os.access(release / ".ci" / "run", os.X_OK)
    readme = (release / "README.md").read_text()
    assert readme == (REPO / "tools" / "student" / "README.md").read_text()
    for step in ("make install", "make book", "make grade", "exercises/", "TORCH=cpu", "download.pytorch.org/whl/cpu"):
        assert step in readme, step
    assert not re.search(r"make (exercises|autograder|student-release|lock)|solutions/", readme)
    makefile = (release / "Makefile").read_text()
    assert not makefile_targets(makefile) & INSTRUCTOR_TARGETS and "INSTRUCTOR" not in makefile
    assert makefile.count(".PHONY:") == 1
    phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M)[1].split()
    assert set(phony) == makefile_targets(makefile)
    assert makefile_targets(makefile) == RUN | DRY  # a new target must be classified above


@pytest.mark.slow
def test_every_make_target_keeps_the_students_edit(tmp_path):
    release = unpack_release(tmp_path)
    assert (Path(sys.prefix) / "bin" / "ruff").exists(), "run the tests from the course's venv (make install)"
    os.symlink(sys.prefix, release / ".venv")  # the environment running this test, as if installed there
    exercise = release / "exercises" / "ch01_anatomy.py"
    # the student's version: Exercise 1.1 answered (the key's lines), the rest still stubs
    key = (REPO / "solutions" / "ch01_anatomy.py").read_text()
    block = r"\n[ \t]*# BEGIN SOLUTION Exercise 1\.1 .*\n((?:.*\n)*?)[ \t]*# END SOLUTION\n"
    answered = re.sub(block, r"\n\1", key, count=1)
    assert answered != key
    edited = make_stub(answered, "ch01_anatomy.py")
    exercise.write_text(edited)
    env = {**os.environ, "PYTHONPATH": str(release)}

    def make(*args):
        return subprocess.run(["make", "-o", ".venv/.installed-stamp", *args], cwd=release, env=env,
                              capture_output=True, text=True, timeout=900)

    for target in sorted(DRY):
        run = make("-n", target)
        assert run.returncode == 0, target + run.stderr
        assert "stubs" not in run.stdout and "exercises" not in run.stdout, (target, run.stdout)
    for target in sorted(RUN):
        run = make(target, "CHAPTER=1") if target == "grade" else make(target)
        if target != "lint":  # lint's verdict is `make lint`'s business; here only the edit matters
            assert run.returncode == 0, target + run.stdout + run.stderr
        if target == "grade":  # the student's answer is what got graded
            tests = json.loads((release / "results.json").read_text())["tests"]
            mine = [t for t in tests if t["name"].startswith("Exercise 1.1 ")]
            assert mine and all(t["score"] == t["max_score"] > 0 for t in mine), mine
            assert all(t["score"] == 0 for t in tests if t["name"].startswith("Exercise 1.2 "))
        assert exercise.read_text() == edited, f"make {target} changed the student's exercise"
    for instructor in sorted(INSTRUCTOR_TARGETS):  # no such rule here ("exercises" is just the folder)
        run = make(instructor)
        assert "No rule to make target" in run.stderr or "Nothing to be done" in run.stdout, run.stdout + run.stderr
    stubs = subprocess.run([sys.executable, "-m", "llama_course.grade.stubs"], cwd=release, env=env,
                           capture_output=True, text=True)
    assert stubs.returncode == 2 and "no solutions" in stubs.stderr
    assert exercise.read_text() == edited and (release / "exercises" / "ch02_tokens.py").is_file()


# ---------------------------------------------------------------------------------------------
# Homework never reaches the release.

def homework_blocks(solutions: Path) -> list[tuple[str, str, list[str]]]:
    """(label, function name, answer lines) of every `# BEGIN SOLUTION Homework ...` block."""
    blocks = []
    for path in sorted(solutions.glob("ch[0-9][0-9]_*.py")):
        lines, current = path.read_text(encoding="utf-8").splitlines(), None
        for line in lines:
            begin = BEGIN.match(line)
            if begin and begin["label"].split()[:1] == ["Homework"]:
                label = begin["label"].strip()
                current = (label, label.split()[2], [])
                blocks.append(current)
            elif END.match(line):
                current = None
            elif current is not None:
                current[2].append(line)
    return blocks


def leaks(release: Path, blocks) -> list[str]:
    """Where the release holds a homework answer: a file with three of the answer's distinctive
    lines (all of them when it has fewer; one common line such as a softmax can legitimately
    appear in the package), or a definition of a homework function outside exercises/."""
    found = []
    texts = {p.relative_to(release).as_posix(): p.read_text(encoding="utf-8", errors="replace")
             for p in release.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".txt", ".toml")}
    for label, name, answer in blocks:
        distinctive = [line.strip() for line in answer
                       if len(line.strip()) >= 20 and not line.strip().startswith(("#", '"""', "return ", "raise "))]
        for path, text in texts.items():
            present = [line for line in distinctive if line in text]
            if present and len(present) >= min(3, len(distinctive)):
                found.append(f"{path}: {len(present)} lines of {label}: {present[0]}")
            if re.search(rf"^\s*def {re.escape(name)}\(", text, re.M) and not path.startswith("exercises/"):
                found.append(f"{path}: defines {name} ({label})")
    return found


HOMEWORK_ONLY = """
def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if (m := i.get_closest_marker("graded")) and m.kwargs.get("kind") == "homework"]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
"""


def homework_points(release: Path, hidden: Path, impl: str) -> tuple[int, int]:
    """(passed, run) of the hidden tests of homework, run inside the release (its package, its public test
    helpers) against one implementation."""
    tests = release / "tests" / "hidden"
    shutil.copytree(hidden, tests, dirs_exist_ok=True)
    report = release / "hidden.xml"
    (release / "_homework_only.py").write_text(HOMEWORK_ONLY)   # practice may be answered by the package
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "_homework_only", "-q",
                    "tests/hidden", f"--impl={impl}", f"--junitxml={report}", "-o", "addopts="], cwd=release,
                   capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(release)})
    shutil.rmtree(tests)
    (release / "_homework_only.py").unlink()
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes = [not any(child.tag in ("failure", "error", "skipped") for child in case) for case in cases]
    return sum(outcomes), len(outcomes)


def check_release(repo: Path, tmp_path: Path, impls=("package", "exercises"), key: bool = True) -> list[str]:
    """Every problem with the release of this instructor tree (empty when it is clean): answers
    in its files, hidden-test points for its package or its stubs, and (the check's own check)
    a key that does not pass the hidden tests there."""
    release = unpack_release(tmp_path, repo)
    blocks = homework_blocks(repo / "solutions")
    problems = leaks(release, blocks)
    hidden = repo / "tests" / "hidden"
    if blocks and hidden.is_dir():
        for impl in impls:
            passed, run = homework_points(release, hidden, impl)
            if passed:
                problems.append(f"the hidden tests give {passed} of {run} points to the release's {impl}")
        if key:
            passed, run = homework_points(release, hidden, str(repo / "solutions"))
            if not run or passed != run:
                problems.append(f"the key passes only {passed} of {run} hidden tests in the release")
    return problems


@pytest.mark.slow
def test_release_holds_no_homework_answer_and_scores_no_homework_points(tmp_path):
    assert check_release(REPO, tmp_path) == []


FAKE_SOLUTION = '''"""A fake chapter for the release checks."""


def interleave(a, b):
    """Homework 99.A: [a0, b0, a1, b1, ...] of two lists of equal length."""
    # BEGIN SOLUTION Homework 99.A interleave (Chapter 99, section 99.1 "Fake")
    woven_together_result = [item for pair in zip(a, b) for item in pair]
    return woven_together_result
    # END SOLUTION
'''
FAKE_PUBLIC = '''import pytest


@pytest.mark.graded("Homework 99.A interleave", weight=1, kind="homework")
def test_interleave_worked_example(impl):
    assert impl.interleave([1], [2]) == [1, 2]
'''
FAKE_HIDDEN = '''import pytest

PACKAGE_MODULES = ["llama_course", "llama_course.weave"]


@pytest.mark.graded("Homework 99.A interleave", weight=3, kind="homework")
def test_interleave_hidden(impl):
    assert impl.interleave([1, 3, 5], [2, 4, 6]) == [1, 2, 3, 4, 5, 6]
'''


@pytest.fixture
def fake_instructor_tree(tmp_path):
    """A small instructor tree (git repository) with one homework problem and its hidden test."""
    repo = tmp_path / "instructor"
    for entry in ("Makefile", "tools/student/README.md", "tests/conftest.py", "llama_course"):
        source, target = REPO / entry, repo / entry
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    for path, text in {"solutions/ch99_fake.py": FAKE_SOLUTION, "tests/graded/test_ch99_fake.py": FAKE_PUBLIC,
                       "tests/hidden/test_ch99_fake.py": FAKE_HIDDEN,
                       "exercises/ch99_fake.py": make_stub(FAKE_SOLUTION, "ch99_fake.py")}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


@pytest.mark.slow
def test_the_release_checks_pass_a_clean_tree_and_catch_a_leak(fake_instructor_tree, tmp_path):
    repo = fake_instructor_tree
    assert homework_blocks(repo / "solutions")[0][:2] == ("Homework 99.A interleave (Chapter 99, section 99.1 "
                                                          '"Fake")', "interleave")
    assert check_release(repo, tmp_path / "clean") == []
    # an instructor puts the answer into the package: the release now leaks it, and earns points
    (repo / "llama_course" / "weave.py").write_text(
        "def interleave(a, b):\n    woven_together_result = [item for pair in zip(a, b) for item in pair]\n"
        "    return woven_together_result\n")
    problems = check_release(repo, tmp_path / "leaky", impls=("package",), key=False)
    assert any("llama_course/weave.py: 1 lines of Homework 99.A" in p for p in problems), problems
    assert any("llama_course/weave.py: defines interleave" in p for p in problems), problems
    assert any("points to the release's package" in p for p in problems), problems


# ---------------------------------------------------------------------------------------------
# The students' repository: one setting names it, nothing speaks to the instructor, it pushes.

INSTRUCTOR_WORDS = re.compile(r"make (exercises|autograder|student-release|colab-cells|lock)\b|instructor'?s edition"
                              r"|holds? the key to|the key to every|[Kk]eep (it|this repository) private")
# what a student reads: the book, the README, the Makefile, the exercises and the set-up files
READ = ("book/", "exercises/", "binder/", ".ci/", ".github/", "README.md", "Makefile", "_config.yml", "_toc.yml")


def texts(release: Path) -> dict[str, str]:
    return {p.relative_to(release).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in release.rglob("*") if p.is_file() and ".git" not in p.relative_to(release).parts
            and p.suffix in (".md", ".ipynb", ".yml", ".py", ".txt", ".toml", ".cfg", "")}


def test_the_release_points_to_the_students_repository_and_speaks_to_students(tmp_path):
    release = unpack_release(tmp_path)
    instructors_url = student_release.instructors_repository(REPO)[0]
    found = texts(release)
    assert instructors_url and not [path for path, text in found.items() if instructors_url in text]
    config = yaml.safe_load((release / "_config.yml").read_text())["repository"]
    assert (config["url"], config["branch"]) == (STUDENTS, "main")
    assert f"!git clone --depth 1 --branch main {STUDENTS} course" in found["book/labs.md"]
    notebooks = sorted(release.glob("book/ch[0-9][0-9]_*.ipynb"))
    assert notebooks
    for path in notebooks:
        cell = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        source = "".join(cell["source"])
        assert f'REPOSITORY = "{STUDENTS}"' in source and 'BRANCH = "main"' in source, path.name
    assert not (release / "book" / "instructors.md").exists() and "instructors" not in found["_toc.yml"]
    speaking = {path: m[0] for path, text in found.items()
                if path.startswith(READ) and (m := INSTRUCTOR_WORDS.search(text))}
    assert speaking == {}, speaking
    # the instructor's tree does say these things: the check can fail
    assert INSTRUCTOR_WORDS.search((REPO / "book" / "instructors.md").read_text())
    assert INSTRUCTOR_WORDS.search((REPO / "book" / "ch04_attention.ipynb").read_text())


def test_the_release_is_a_history_on_main_that_pushes_into_an_empty_repository(tmp_path):
    release = unpack_release(tmp_path)

    def git(*args, cwd=release):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)

    assert git("rev-parse", "--abbrev-ref", "HEAD").stdout.strip() == "main"
    assert len(git("rev-list", "--all").stdout.split()) == 1
    assert git("status", "--porcelain").stdout == ""          # every file of the release is committed
    tracked = set(git("ls-files").stdout.split())
    assert "exercises/ch01_anatomy.py" in tracked and not any(f.startswith("solutions/") for f in tracked)
    origin = tmp_path / "origin.git"
    assert git("init", "-q", "--bare", str(origin), cwd=tmp_path).returncode == 0   # the new, empty repository
    assert git("remote", "add", "origin", str(origin)).returncode == 0
    push = git("push", "-u", "origin", "main")
    assert push.returncode == 0, push.stderr
    clone = git("clone", "-q", "--branch", "main", str(origin), str(tmp_path / "clone"), cwd=tmp_path)
    assert clone.returncode == 0, clone.stderr
    assert set(git("ls-files", cwd=tmp_path / "clone").stdout.split()) == tracked


def test_the_release_needs_the_students_repository(tmp_path, capsys):
    for argv in ([], ["--repository", "git@github.com:org/course.git"], ["--repository", "course"]):
        with pytest.raises(SystemExit) as stop:
            student_release.main([*argv, "--out", str(tmp_path / "r.tar.gz")])
        assert stop.value.code == 2
        assert "https://github.com/your-org/llama-course" in capsys.readouterr().err
    assert not (tmp_path / "r.tar.gz").exists()
    with pytest.raises(TypeError, match="repository"):
        student_release.check_repository(None)



def test_a_chapter_notebook_whose_install_cell_is_not_recognised_stops_the_release(fake_instructor_tree, tmp_path,
                                                                                    capsys):
    """A chapter notebook's Colab install cell that lacks the comment the release rewrites (an edited
    cell) would ship naming the instructor's target and branch: the release is not written, and the
    error names the notebook."""
    repo = fake_instructor_tree
    shutil.copy(REPO / "_config.yml", repo / "_config.yml")
    notebook = json.loads((REPO / "book" / "ch04_attention.ipynb").read_text())
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    source = "".join(cell["source"])
    assert student_release.CELL_COMMENT in source
    cell["source"] = source.replace(student_release.CELL_COMMENT, "# Install the course.\n").splitlines(True)
    (repo / "book").mkdir()
    (repo / "book" / "ch04_attention.ipynb").write_text(json.dumps(notebook, indent=1) + "\n")
    out = tmp_path / "release.tar.gz"
    with pytest.raises(RuntimeError, match=r"book/ch04_attention\.ipynb.*install cell"):
        student_release.write_tarball(out, STUDENTS, repo)
    assert not out.exists()
    # the command says so and fails, no traceback
    assert student_release.main(["--repository", STUDENTS, "--out", str(out), "--source", str(repo)]) == 1
    assert "book/ch04_attention.ipynb" in capsys.readouterr().err and not out.exists()


# ---------------------------------------------------------------------------------------------
# The release's own tests pass there, and its grader says what it checked.

def release_env(release: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(release)}


def functions_that_only_skip(junit: Path) -> dict[str, str]:
    """{test function: one skip reason} of the test functions in a junit report all of whose cases
    were skipped: in the release they test nothing there."""
    outcomes: dict[str, list] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name').split('[')[0]}"
        skipped = case.find("skipped")
        outcomes.setdefault(name, []).append(None if skipped is None else skipped.get("message", ""))
    return {name: reasons[0] for name, reasons in outcomes.items() if all(r is not None for r in reasons)}


# Graded tests of a function the package does not have (homework, and exercise-only helpers such as
# count_pairs): run with --impl=package they skip, in both trees. The release cannot run them
# against anything (answers never ship); the instructor's suite runs them against the key.
NOTHING_TO_RUN_AGAINST = re.compile(r"the package has no \w+; ")


@pytest.mark.slow
def test_the_release_passes_its_own_tests(tmp_path):
    """The release's tests that need what an instructor's tree has (the key, the hidden tests, the
    grader's case suites): tests/book and tests/graded, run there as its `make test-unit` and
    `make test-package` do, and none of them skips every case (a test that only skips in the
    release proves nothing there), except graded tests of functions the package does not have.
    (Its whole `make test`, notebooks, book and browser included, takes tens of minutes: run by
    hand, see the commits that added this test; its tests/unit and the rest of tests/e2e test the
    package and grader that the instructor's suite tests already.)"""
    release = unpack_release(tmp_path)
    junit = tmp_path / "release.xml"
    args = ["tests/book", "tests/graded", "tests/unit/test_feedback_text.py", "--impl=package", f"--junitxml={junit}"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                         cwd=release, env=release_env(release), capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", run.stdout.splitlines()[-1]) and "error" not in run.stdout.splitlines()[-1]
    only_skip = functions_that_only_skip(junit)
    assert {name: why for name, why in only_skip.items() if not NOTHING_TO_RUN_AGAINST.match(why)} == {}
    assert all(name.startswith("tests.graded.") for name in only_skip), only_skip


WRONG_CH04 = [  # (the key's line, a student's mistake)
    ("    return softmax(scores.float(), dim=-1).to(q.dtype) @ v",
     "    return softmax(scores.float(), dim=-1) @ v.float()"),                # bf16 in, float32 out
    ("    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)\n", ""),    # an all -inf row gives NaN
]


@pytest.mark.slow
def test_the_release_grader_separates_what_it_checked_and_keeps_feedback_short(tmp_path):
    release = unpack_release(tmp_path)
    submission = tmp_path / "submission"
    submission.mkdir()
    shutil.copy(REPO / "solutions" / "ch13_parallel.py", submission)            # all right: public checks pass
    wrong = (REPO / "solutions" / "ch04_attention.py").read_text()
    for right, mistake in WRONG_CH04:
        assert right in wrong
        wrong = wrong.replace(right, mistake)
    (submission / "ch04_attention.py").write_text(wrong)
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "llama_course.grade", str(submission), "--chapter", "4",
                          "--chapter", "13", "--out", str(out), "--same-user"], cwd=release, env=release_env(release),
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {line.split("  ")[0]: line for line in run.stdout.splitlines() if line.startswith(("Exercise", "Homework"))}
    for label in ("Homework 13.A pipeline_bubble_fraction", "Homework 13.B all_to_all_counts"):
        assert re.search(r"public checks pass \(1 of (\d+) points; \d+ more from hidden tests the instructor runs\)",
                         rows[label]), rows[label]
    assert not [row for label, row in rows.items() if label.startswith("Homework") and "all tests pass" in row]
    assert re.search(r"^Not checked here: [\d.]+ more points from hidden tests", run.stdout, re.M)
    tests = json.loads(out.read_text())["tests"]
    failed = {t["name"]: t["output"] for t in tests if t["score"] < t["max_score"]}
    dtype = [o for name, o in failed.items() if "test_sdpa_returns_q_dtype" in name]
    nan = [o for name, o in failed.items() if "test_softmax_is_stable" in name]
    assert dtype and nan, failed
    assert dtype[0].splitlines()[0].endswith("bf16 inputs: attention must return bf16 (q's dtype), got torch.float32")
    assert "NaN" in nan[0].splitlines()[0]
    assert max(len(o) for o in failed.values()) <= 1500, {n: len(o) for n, o in failed.items()}
    assert "tensor([" not in "".join(failed.values())
