"""The exercise grader.

    python -m llama_course.grade [PATH] [--chapter N ...] [--out FILE] [--timeout SECONDS]
    python -m llama_course.grade --list
    python -m llama_course.grade --class SUBMISSIONS --out-dir GRADES

Grades the chNN_*.py files in PATH (default: exercises/; a folder holding an exercises/ folder
works too; with ``--upload``, a Gradescope upload or a student's zip: files at any depth, an
exercises/ folder preferred, see autograder.collect) with the graded tests (tests/graded, plus
tests/hidden where it exists; ``--tests DIR``, repeatable, to choose), prints a table per
exercise, every failure's full message, and writes Gradescope's results.json (``score``,
``tests[]`` with ``name``, ``score``, ``max_score``, ``output``).

Integrity. The grader never imports the student's code: it copies the submission into a private
folder (refusing symbolic links that leave it), and every test talks to a fresh, confined worker
process (llama_course.grade.sandbox: as root, an unprivileged user who cannot read the key, write
the tests, the package or the results, or signal the grader). An old results file is removed
before any student code runs; the new one is written atomically after each test (when that
test's processes are gone: tests not yet run count 0 and the output says grading is unfinished,
so a grader stopped by a time limit leaves the finished scores) and last after every process of
the student's user is gone. In class grading a child grader that fails leaves no score. An exercise
earns nothing when the submission uses the package's own answer to it (plugin.reference_names).

Points. Each exercise's points are set once, in llama_course.grade.points, and divided across its
tests by their markers' weights; a test's cases (its devices among them) share its part, so the
total does not depend on the machine or on how the tests are written; a skipped graded test is a
grading error that counts as failed.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import pytest

from . import autograder, sandbox
from .plugin import REPO, SANDBOX, graded_marker, graded_points
from .points import HIDDEN_FOLDER, PROBLEMS, Split, fmt, is_hidden, label_of, problems_for, split

OUTPUT_CHARS = 20_000  # of failure text per test in results.json (a sanity bound, not a layout width)
PRINTED_CHARS = 4_000  # of the student's own printed output per test in results.json
FEEDBACK_LINES, LINE_CHARS, FEEDBACK_CHARS = 12, 300, 1_400  # of a failure's message (short_feedback)
JUNK = ("__MACOSX", "__pycache__", ".")  # archive debris and dotfiles, never graded
SUBMISSION_BYTES = 50 << 20
NOISE = re.compile(r"^\s*(Use -v to get more diff|Use -vv to get more diff|\.\.\.Full output truncated.*)\s*$")


@dataclass
class TestResult:
    name: str
    exercise: str
    max_score: float
    kind: str = "practice"
    depends: tuple = ()
    score: float = 0.0
    failure: str = ""
    student_output: str = ""
    seen: set = field(default_factory=set)
    hidden: bool = False      # points.is_hidden: feedback shows no expected value, no input
    error_type: str = ""      # the exception's type name when the test failed by raising

    @property
    def first_line(self) -> str:
        if "NotImplementedError" in self.failure and "not implemented yet" in self.failure:
            return "not implemented yet"
        lines = [line.strip() for line in self.failure.splitlines() if line.strip()]
        return lines[0] if lines else ""


class _Collector:
    """pytest plugin that records each graded test's outcome in the grader's process."""

    def __init__(self, status=None, progress=None):
        self.results: dict[str, TestResult] = {}
        self.splits: dict[str, Split] = {}  # exercise label -> its points: total, public checks, hidden tests
        self.errors: list[str] = []
        self.status = status  # a terminal to show the running test on, or None
        self.progress = progress  # called with the results after each test (its worker gone), or None
        self._shown_files: set[str] = set()

    def pytest_collection_modifyitems(self, items):
        points = graded_points(items)
        for item in items:
            graded = graded_marker(item)
            if graded is None:
                continue
            self.splits[graded.label] = split(graded.label, problems_for(item))
            self.results[item.nodeid] = TestResult(item.nodeid.split("::", 1)[-1], graded.label,
                                                   points[item.nodeid], graded.kind, graded.depends,
                                                   hidden=is_hidden(item))

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"could not collect {report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logstart(self, nodeid, location):
        if self.status is None:
            return
        if self.status.isatty():
            self.status.write(f"\r\033[K  running {nodeid.rpartition('/')[2]}")
        elif location[0] not in self._shown_files:
            self._shown_files.add(location[0])
            self.status.write(f"  running {Path(location[0]).name}\n")
        self.status.flush()

    def pytest_runtest_logfinish(self, nodeid, location):
        if self.progress is not None:
            self.progress(list(self.results.values()))

    def pytest_sessionfinish(self):
        if self.status is not None and self.status.isatty():
            self.status.write("\r\033[K")
            self.status.flush()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        result = self.results.get(item.nodeid)
        if result is None:
            return
        result.seen.add(report.when)
        if report.when == "call" and report.passed:
            result.score = result.max_score
        if report.skipped and not result.failure:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            result.score, result.failure = 0.0, (f"grading error: this graded test was skipped ({reason}); it "
                                                 f"counts as failed. Tell your instructor.")
        if report.failed:
            result.score = 0.0
            if not result.failure:
                result.failure = _describe_failure(call, report)
                if call.excinfo is not None:
                    result.error_type = call.excinfo.typename
        box = item.stash.get(SANDBOX, None)
        if box is not None:
            result.student_output = box.output


def _describe_failure(call, report) -> str:
    if call.excinfo is None or call.excinfo.typename in ("Failed", "OutcomeException"):
        text = str(call.excinfo.value) if call.excinfo is not None else report.longreprtext
    else:
        error = call.excinfo.value
        text = f"{type(error).__name__}: {error}"
        for note in getattr(error, "__notes__", ()):
            text += f"\n{note}"
    return short_feedback("\n".join(line for line in text.splitlines() if not NOISE.match(line)).strip())


def short_feedback(text: str) -> str:
    """A failure's message as a student reads it: the test's own message, without pytest's
    re-evaluation of the asserted expression under it (``assert ...``, ``+ where ...``: it prints
    whole tensors); at most FEEDBACK_LINES lines of at most LINE_CHARS characters, FEEDBACK_CHARS
    in all, every cut said."""
    lines = text.splitlines()
    explained = next((i for i, line in enumerate(lines) if i and line.startswith("assert ")), None)
    if explained is not None and lines[0].strip() not in ("AssertionError", "AssertionError:"):
        lines = lines[:explained]  # the test's message already says what went wrong
    cut = len(lines) > FEEDBACK_LINES
    lines = [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [...]" for line in lines[:FEEDBACK_LINES]]
    text = "\n".join(lines)
    if len(text) > FEEDBACK_CHARS:
        text, cut = text[:FEEDBACK_CHARS], True
    return text + ("\n[... the rest of this message is cut]" if cut else "")


def _targets(test_dirs: list[Path], chapters: list[int]) -> list[str]:
    if not chapters:
        return [str(d) for d in test_dirs]
    return sorted(str(p) for d in test_dirs for n in chapters for p in d.glob(f"test_ch{n:02d}_*.py"))


def run(path: Path, test_dirs: list[Path], chapters: list[int], timeout: float, options: list[str] = (),
        status=None, progress=None) -> tuple[list[TestResult], list[str]]:
    """Run the graded tests against the student folder; return per-test results and grader errors.
    ``options``: further pytest options (the sandbox's, from ``sandbox_options``); ``progress``:
    called with the results so far after each test."""
    targets = _targets(test_dirs, chapters)
    if not targets:
        return [], [f"no graded tests for chapter(s) {chapters} in {', '.join(map(str, test_dirs))}"]
    collector = _Collector(status, progress)
    args = [*targets, f"--impl={path}", "--isolate", f"--impl-timeout={timeout}", *options,
            "-p", "llama_course.grade.plugin", "-p", "no:cacheprovider", "--import-mode=importlib",
            "-vv", "--tb=short", f"--rootdir={REPO}", "-o", "addopts="]
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        exit_code = pytest.main(args, plugins=[collector])
    errors = list(collector.errors)
    if exit_code not in (0, 1) and not errors:
        errors.append(f"pytest exited with code {exit_code}:\n{log.getvalue()[-3000:]}")
    for result in collector.results.values():
        if "call" not in result.seen and not result.failure:
            result.score, result.failure = 0.0, "test did not run"
    return list(collector.results.values()), errors


def _collect_only(test_dirs: list[Path]) -> _Collector:
    """pytest --collect-only over ``test_dirs`` with the grading plugin: the collector, nothing run."""
    collector = _Collector()
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        pytest.main([*map(str, test_dirs), "--collect-only", "-q", "-p", "llama_course.grade.plugin",
                     "-p", "no:cacheprovider", "--import-mode=importlib", f"--rootdir={REPO}", "-o", "addopts="],
                    plugins=[collector])
    return collector


def collect(test_dirs: list[Path]) -> list[TestResult]:
    """Every graded test of ``test_dirs`` with its points, none of them run (pytest --collect-only)."""
    collector = _collect_only(test_dirs)
    if collector.errors:
        raise RuntimeError("\n".join(collector.errors))
    return list(collector.results.values())


def sandbox_options(confinement: sandbox.Confinement) -> list[str]:
    options = [f"--memory-limit={confinement.memory_limit}"]
    if confinement.uid is not None:
        options += [f"--sandbox-uid={confinement.uid}", f"--sandbox-gid={confinement.gid}"]
    options += ["--sandbox-offline"] if confinement.offline else []
    options += [f"--sandbox-cgroup={confinement.cgroup}"] if confinement.cgroup else []
    options += [f"--sandbox-move={old}:{new}" for old, new in confinement.moved]
    return options + [f"--sandbox-hide={path}" for path in confinement.hide]


# --------------------------------------------------------------------------------------------
# What a student reads
# --------------------------------------------------------------------------------------------

def _by_exercise(results: list[TestResult]) -> dict[str, list[TestResult]]:
    exercises: dict[str, list[TestResult]] = {}
    for result in results:
        exercises.setdefault(result.exercise, []).append(result)
    return exercises


def table(results: list[TestResult], unchecked: dict[str, float]) -> str:
    """The per-exercise summary a student reads: one row per exercise. ``unchecked``: {exercise:
    points of hidden tests this run did not have} (unchecked_points; {} when it ran them all): a
    row whose checks here all pass then says what it checked and what it could not, never "all
    tests pass"."""
    if not isinstance(unchecked, dict):
        raise TypeError(f"unchecked must be a dict of hidden points per exercise (unchecked_points), "
                        f"got {type(unchecked).__name__}")
    exercises = _by_exercise(results)
    width = max([len(name) for name in exercises] + [len("Exercise")])
    lines = [f"{'Exercise':<{width}}  {'Points':>11}  First failure", "-" * (width + 50)]
    for name, group in exercises.items():
        earned, possible = sum(r.score for r in group), sum(r.max_score for r in group)
        failing = next((r for r in group if r.score < r.max_score), None)
        note = f"{failing.name}: {failing.first_line}" if failing else _pass_note(possible, unchecked.get(name, 0.0))
        lines.append(f"{name:<{width}}  {_num(earned):>5} / {_num(possible):<5}  {note}")
    earned, possible = sum(r.score for r in results), sum(r.max_score for r in results)
    lines += ["-" * (width + 50), f"{'Total':<{width}}  {_num(earned):>5} / {_num(possible):<5}"]
    rest = sum(unchecked.get(name, 0.0) for name in exercises)
    if rest:
        lines.append(f"Not checked here: {_num(rest)} more points from hidden tests the instructor runs "
                     f"({_num(possible + rest)} in all)")
    return "\n".join(lines)


def _pass_note(possible: float, rest: float) -> str:
    """What a row whose tests all passed (``possible`` points) may claim, ``rest`` points of its
    hidden tests not run here."""
    if not rest:
        return "all tests pass"
    return (f"public checks pass ({_num(possible)} of {_num(possible + rest)} points; "
            f"{_num(rest)} more from hidden tests the instructor runs)")


def runs_hidden_tests(test_dirs: list[Path]) -> bool:
    """Whether a run of ``test_dirs`` has the hidden tests: one of them is a hidden folder (the
    rule of points.is_hidden)."""
    return any(d.name == HIDDEN_FOLDER for d in test_dirs)


def unchecked_points(test_dirs: list[Path]) -> dict[str, float]:
    """{exercise label: points of its hidden tests} that a run of ``test_dirs`` cannot check: {} when
    the hidden tests are among them, else each problem's hidden part from the points table."""
    if runs_hidden_tests(test_dirs):
        return {}
    return {label_of(ident): float(problem.hidden) for ident, problem in PROBLEMS.items() if problem.hidden}


def failing_exercises(results: list[TestResult]) -> set[str]:
    return {r.exercise for r in results if r.score < r.max_score}


def dependency_note(result: TestResult, failing: set[str]) -> str:
    """"uses your Exercise 4.3, which fails" for each failing exercise the test depends on."""
    notes = []
    for dependency in result.depends:
        if any(label == dependency or label.startswith(dependency + " ") for label in failing):
            notes.append(f"uses your {dependency}, which fails: fix that one first")
    return "; ".join(notes)


def failures(results: list[TestResult], out: Path) -> str:
    """Every failing test's full message, grouped by exercise (not-implemented exercises once)."""
    failing, blocks = failing_exercises(results), []
    for name, group in _by_exercise(results).items():
        bad = [r for r in group if r.score < r.max_score]
        if not bad or all(r.first_line == "not implemented yet" for r in bad):
            continue
        for r in bad:
            text = r.failure
            note = dependency_note(r, failing)
            if note:
                text += f"\n({note})"
            blocks.append(f"{name} :: {r.name}\n" + "\n".join(f"    {line}" for line in text.splitlines()))
    if not blocks:
        return ""
    return ("Failures\n========\n\n" + "\n\n".join(blocks)
            + f"\n\nThe full report (your code's output too): {out}")


def _num(x: float) -> str:
    return fmt(x)


def _total(points) -> float:
    """A sum of test shares, rid of float noise (shares of 1/3 add up to 0.9999999999999999)."""
    return round(sum(points), 9)


def safe_text(text: str) -> str:
    """Text that any terminal and any JSON reader takes: lone surrogates and control characters
    (other than newline and tab) written as escapes."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c in "\n\t" or c.isprintable() or ord(c) > 127 else repr(c)[1:-1] for c in text)


def _cut(text: str, limit: int = OUTPUT_CHARS) -> str:
    text = safe_text(text)
    return text if len(text) <= limit else text[:limit] + f"\n[... cut at {limit} characters]"


# Gradescope's visibility of a hidden test's row (its name, points and feedback); the total score,
# hidden points included, is always shown. HIDDEN_VISIBILITY=visible|hidden|after_due_date|after_published.
VISIBILITIES = {"visible": "shown now", "hidden": "never shown to students",
                "after_due_date": "shown after the due date", "after_published": "shown once grades are published"}
CRASHES = {"StudentTimeout": "your code did not finish in time", "StudentCrash": "the process running your code died"}


def hidden_feedback(r: TestResult) -> str:
    """What a failing hidden test tells the student: the kind of error, never an expected value,
    an input or a message that could carry one (the student's own exception text included)."""
    if r.first_line == "not implemented yet" or r.failure.startswith(("grading error", "not run", "test did not")):
        return r.first_line if r.first_line == "not implemented yet" else r.failure.splitlines()[0]
    if r.error_type in CRASHES:
        return f"{CRASHES[r.error_type]} on this hidden case"
    if r.error_type and r.error_type not in ("AssertionError", "Failed"):
        return f"your code raised {r.error_type} on this hidden case (hidden tests show no message or input)"
    low = r.failure.lower()
    kind = next((k for k in ("shape", "dtype", "device") if k in low), None)
    nonfinite = re.search(r"\b(nan|inf|infinite)\b", low)
    what = f"wrong {kind}" if kind else "NaN or infinite values" if nonfinite else "wrong values"
    return f"{what} on this hidden case (hidden tests show no expected value or input)"


def results_json(results: list[TestResult], errors: list[str], notes: list[str] = ()) -> dict:
    """Gradescope's results.json. Hidden tests are named by case number, not by their parameters,
    and their rows follow HIDDEN_VISIBILITY (default after_published)."""
    visibility = os.environ.get("HIDDEN_VISIBILITY", "after_published")
    if visibility not in VISIBILITIES:
        raise ValueError(f"HIDDEN_VISIBILITY must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    failing, tests, cases = failing_exercises(results), [], {}
    for r in results:
        passed = r.score == r.max_score
        output = "passed" if passed else hidden_feedback(r) if r.hidden else r.failure
        if not passed and dependency_note(r, failing):
            output += f"\n({dependency_note(r, failing)})"
        output = _cut(output)
        if r.student_output and not r.hidden:
            output += f"\n--- your code printed ---\n{_cut(r.student_output, PRINTED_CHARS)}"
        name = r.name
        if r.hidden:
            function = r.name.split("[")[0]
            cases[r.exercise, function] = cases.get((r.exercise, function), 0) + 1
            name = f"{function} (hidden case {cases[r.exercise, function]})"
        tests.append({"name": f"{r.exercise} :: {name}", "score": r.score, "max_score": r.max_score,
                      "output": output, "visibility": visibility if r.hidden else "visible", "tags": [r.kind]})
    hidden = [r for r in results if r.hidden]
    summary = [*errors, *notes] if errors or notes else [f"graded {len(tests)} tests"]
    if hidden:
        summary.append(f"{_num(sum(r.score for r in hidden))} of {_num(sum(r.max_score for r in hidden))} points "
                       f"come from {len(hidden)} hidden tests (in the total above); their rows are "
                       f"{VISIBILITIES[visibility]}.")
    return {"score": _total(r.score for r in results), "max_score": _total(r.max_score for r in results),
            "output": "\n".join(summary), "tests": tests}


def unfinished(results: list[TestResult]) -> tuple[list[TestResult], str]:
    """The results of a run still going (or killed): tests not yet run count 0 and say so; and a
    note saying how many tests finished."""
    done = [r for r in results if "call" in r.seen or r.failure]
    rest = [TestResult(r.name, r.exercise, r.max_score, r.kind, r.depends, hidden=r.hidden,
                       failure="not graded: grading stopped before this test ran (the time limit?)")
            for r in results if r not in done]
    note = (f"grading unfinished: {len(done)} of {len(results)} tests finished; their scores are below, the "
            f"others count 0. If this stays, grading was stopped (the time limit?): tell your instructor.")
    return done + rest, note


def homework_note(results: list[TestResult], test_dirs: list[Path]) -> str:
    if not any(r.kind == "homework" for r in results) or runs_hidden_tests(test_dirs):
        return ""
    return ("Homework: this run used the public checks only (no hidden tests here). Your final grade for "
            "homework comes from the hidden tests your instructor runs.")


# --------------------------------------------------------------------------------------------
# The submission and the results file
# --------------------------------------------------------------------------------------------

def _junk(name: str) -> bool:
    return name.startswith(JUNK)


def find_submission(folder: Path) -> Path:
    """The folder holding the chNN_*.py files: ``folder`` itself, else its exercises/ folder, else
    the shallowest sub-folder (archive junk ignored) that holds some."""
    if any(folder.glob("ch[0-9][0-9]_*.py")):
        return folder
    if (folder / "exercises").is_dir():
        return folder / "exercises"
    found = [p.parent for p in folder.rglob("ch[0-9][0-9]_*.py")
             if not any(_junk(part) for part in p.relative_to(folder).parts)]
    return min(found, key=lambda p: (len(p.parts), str(p))) if found else folder


def stage(folder: Path, into: Path) -> Path:
    """Copy the submission's files (no junk) into ``into``, readable by the sandbox user and
    writable by nobody but the grader. A symbolic link that leaves the submission becomes a file
    whose import fails with the reason."""
    root = folder.resolve()
    into.chmod(0o755)
    total = 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(_junk(part) for part in relative.parts) or path.is_dir():
            continue
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        real = path.resolve()
        if path.is_symlink() and (root not in real.parents or not real.is_file()):
            why = f"{relative.as_posix()} is a symbolic link to a file outside your submission; submit the file itself"
            target.write_text(f"raise ImportError({why!r})\n")
        elif real.is_file() and total + real.stat().st_size <= SUBMISSION_BYTES:
            total += real.stat().st_size
            shutil.copyfile(real, target)
        else:   # too large, or not a regular file (a FIFO, a device): not graded, and said so on import
            why = f"{relative.as_posix()} was not graded: not a regular file, or past the {SUBMISSION_BYTES} byte limit"
            if relative.suffix != ".py":
                continue
            target.write_text(f"raise ImportError({why!r})\n")
        target.chmod(0o644)
    return into


def make_private(folder: Path, gid: int) -> None:
    """Let only group ``gid`` (the worker's own) read the staged submission, and nobody but root
    write it: owner root, mode 0750 (folders) and 0640 (files)."""
    for where, folders, files in os.walk(folder):
        for name, mode in [(".", 0o750), *((f, 0o750) for f in folders), *((f, 0o640) for f in files)]:
            path = os.path.join(where, name)
            os.chown(path, 0, gid, follow_symlinks=False)
            os.chmod(path, mode)


def hidden_paths(test_dirs: list[Path]) -> list[Path]:
    """What student code must not read: the key, the hidden tests, the repository's git objects."""
    paths = [REPO / "solutions", REPO / "tests" / HIDDEN_FOLDER, *(d for d in test_dirs if d.name == HIDDEN_FOLDER),
             REPO / "_build",                                # the instructor's built zips and site
             REPO.parent / "submission_metadata.json"]       # Gradescope: earlier submissions' results
    git = REPO / ".git"
    if git.is_file():  # a worktree: .git names the real folder, whose commondir holds the objects
        gitdir = Path(git.read_text().partition("gitdir:")[2].strip())
        paths += [git, gitdir]
        common = gitdir / "commondir"
        if common.is_file():
            paths.append((gitdir / common.read_text().strip()).resolve())
    elif git.is_dir():
        paths.append(git)
    return list(dict.fromkeys(p for p in paths if os.path.lexists(p)))


def clear_results(out: Path) -> None:
    """Before any student code runs: no old score may survive a failed or killed run."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_dir() and not out.is_symlink():
        raise IsADirectoryError(f"--out {out} is a folder; give a file name")
    with contextlib.suppress(FileNotFoundError):
        out.unlink()


def write_atomically(path: Path, data: dict) -> None:
    """Write ``path`` whole or not at all; whatever stands at ``path`` (a folder someone made
    there included) is replaced."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".results-", suffix=".json",
                                     delete=False, encoding="utf-8") as handle:
        try:
            json.dump(data, handle, indent=2)
        except BaseException:
            os.unlink(handle.name)
            raise
    try:
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
        raise


# --------------------------------------------------------------------------------------------
# --list
# --------------------------------------------------------------------------------------------

LABEL = re.compile(r'((?:Exercise|Homework) [\w.]+) ([\w.]+(?: \(\w+\))?)[^"\n()]*'   # name, "apply_rope (half)"
                   r'\(Chapter (\d+), (?:beyond )?section ([\d.]+) "([^"]+)"\)')


def exercise_sections() -> dict[str, str]:
    """{"Exercise 4.1": 'section 4.3 "Softmax"'} from the key's BEGIN SOLUTION lines, or, in a
    student release without solutions/, from the stubs' NotImplementedError messages."""
    sections = {}
    for folder in (REPO / "solutions", REPO / "exercises"):
        for path in sorted(folder.glob("ch[0-9][0-9]_*.py")) if folder.is_dir() else ():
            for match in LABEL.finditer(path.read_text(encoding="utf-8")):
                sections.setdefault(match[1], f'{match[4]} "{match[5]}"')
    return sections


def list_exercises(test_dirs: list[Path]) -> int:
    """Print every exercise the graded tests know: id, name, kind, chapter section, points."""
    collector = _collect_only(test_dirs)
    for error in collector.errors:
        print(f"grader error: {error}", file=sys.stderr)
    sections, splits = exercise_sections(), collector.splits
    hidden_here = runs_hidden_tests(test_dirs)
    print(f"{'Id':<14} {'Name':<30} {'Kind':<9} {'Section':<50} {'Points':>6} {'Public':>6}")
    for label in sorted(splits, key=_label_order):
        words = label.split(maxsplit=2)
        ident, name = " ".join(words[:2]), words[2] if len(words) > 2 else ""
        section, kind = sections.get(ident, ""), "homework" if ident.startswith("Homework") else "practice"
        print(f"{ident:<14} {name:<30} {kind:<9} {section:<50} {_num(splits[label].total):>6} "
              f"{_num(splits[label].public):>6}")
    total, public = (sum((getattr(s, part) for s in splits.values()), Fraction(0)) for part in ("total", "public"))
    print(f"{'Total':<105} {_num(total):>6} {_num(public):>6}")
    print("\nPoints: each exercise's points in all. Public: the part its public checks (tests/graded) carry; "
          "the rest come from hidden tests" + ("." if hidden_here else ", which only your instructor runs: "
                                                "grading here can check the Public points only."))
    return 1 if collector.errors else 0


def _label_order(label: str):
    number = label.split()[1] if len(label.split()) > 1 else ""
    chapter, _, part = number.partition(".")
    return (int(chapter) if chapter.isdigit() else 0, label.startswith("Homework"),
            int(part) if part.isdigit() else 0, part)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade", description="Grade the course exercises.")
    parser.add_argument("path", nargs="?", default="exercises", type=Path,
                        help="folder with your chNN_*.py files (default: exercises/)")
    parser.add_argument("--chapter", type=int, action="append", default=[], help="grade only this chapter (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("results.json"), help="where to write results.json")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds each test may spend in your code")
    parser.add_argument("--tests", type=Path, action="append", default=None,
                        help="a folder of graded tests (repeatable; default: tests/graded and tests/hidden)")
    parser.add_argument("--list", action="store_true", help="list every exercise: id, name, kind, section, points")
    parser.add_argument("--memory-limit", type=float, default=sandbox.MEMORY_LIMIT / 2**30,
                        help="GiB of memory each worker may allocate (0: no limit; default %(default)g)")
    parser.add_argument("--same-user", action="store_true",
                        help="run student code as the grader's own user even as root (not for untrusted code)")
    parser.add_argument("--class", dest="class_dir", type=Path, metavar="SUBMISSIONS",
                        help="grade every sub-folder of SUBMISSIONS (one per student); results go to --out-dir")
    parser.add_argument("--out-dir", type=Path, default=Path("grades"), help="with --class: where results go (empty)")
    parser.add_argument("--upload", action="store_true",
                        help="PATH is an upload (a folder or a zip, as on Gradescope): grade its chNN_*.py files "
                             "found at any depth, zips included, preferring those in an exercises/ folder")
    parser.add_argument("--private", type=Path, action="append", default=[], help=argparse.SUPPRESS)
    return parser


def default_test_dirs() -> list[Path]:
    return [d for d in (REPO / "tests" / "graded", REPO / "tests" / HIDDEN_FOLDER) if d.is_dir()]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    test_dirs = [d.resolve() for d in (args.tests or default_test_dirs())]
    for folder in test_dirs:
        if not folder.is_dir():
            parser.error(f"no graded tests at {folder}")
    if args.list:
        return list_exercises(test_dirs)
    if args.class_dir is not None:
        if not args.class_dir.is_dir():
            parser.error(f"{args.class_dir} is not a folder")
        if not args.same_user and not (sys.platform.startswith("linux") and os.geteuid() == 0):
            print("grading refused: --class grades other people's code, which must not run as your own user "
                  "(it could read your files, the key included, and every classmate's). Run it as root "
                  "(e.g. sudo, or in a container), where each student's code runs as an unprivileged user; "
                  "or pass --same-user to accept that it runs as you.", file=sys.stderr)
            return 2
        return grade_class(args.class_dir, args.out_dir, _child_options(args, test_dirs))
    if not (args.path.is_dir() or (args.upload and args.path.is_file())):
        parser.error(f"{args.path} is not a folder")
    out = args.out.resolve()  # fixed, and cleared, before any student code runs
    try:
        clear_results(out)
    except OSError as err:
        parser.error(str(err))
    return grade_one(args.path, out, test_dirs, args)


def grade_one(path: Path, out: Path, test_dirs: list[Path], args) -> int:
    for stream in (sys.stdout, sys.stderr):  # a student's message must never crash the report
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        own = path.resolve().is_relative_to((REPO / "exercises").resolve())  # the caller's own exercises/
        confinement, warnings = sandbox.confine(hidden_paths(test_dirs) + args.private,
                                                int(args.memory_limit * 2**30), args.same_user, own)
    except sandbox.ConfinementError as err:  # fail closed: nothing is graded, and everyone is told why
        return refuse(out, f"grading refused: {err}")
    print(sandbox.describe(confinement), flush=True)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="llama-course-submission-") as staging:
        submission, files = path.resolve(), []
        if args.upload:  # as on Gradescope: chNN_*.py files at any depth, zips included
            folder = Path(staging) / "submission"
            files = autograder.collect(submission, folder)
            unreadable = [note for note in files if note.startswith("could not read")]
            if unreadable and not any(note.startswith("graded ") for note in files):
                return refuse(out, f"grading error: {unreadable[0]}")
        else:
            submission = find_submission(submission)
            folder = stage(submission, Path(staging))
            files = [f"graded {p.relative_to(path.resolve())}" for p in sorted(submission.glob("ch[0-9][0-9]_*.py"))]
        if confinement.uid is not None:  # readable by this run's worker only
            make_private(Path(staging), confinement.gid)
        files = [safe_text(note) for note in files]
        print("\n".join(files), flush=True)

        def progress(partial: list[TestResult]) -> None:
            partial, note = unfinished(partial)
            write_atomically(out, results_json(partial, [], [note, *files]))

        results, errors = run(folder, test_dirs, args.chapter, args.timeout, sandbox_options(confinement),
                              status=sys.stderr, progress=progress)
        if confinement.uid is not None:
            sandbox.end_processes_of(confinement.uid)
            sandbox.remove_files_of(confinement.uid)
    notes = [n for n in (homework_note(results, test_dirs),) if n]
    print(f"Grading {submission}\n")
    print(table(results, unchecked_points(test_dirs)) if results else "no graded tests ran")
    report = failures(results, out)
    if report:
        print(f"\n{report}")
    for note in notes:
        print(f"\n{note}")
    for error in errors:
        print(f"\ngrader error: {error}", file=sys.stderr)
    write_atomically(out, results_json(results, errors, notes + files))  # last: every student process is gone
    print(f"\nresults written to {out}")
    return 1 if errors else 0


def refuse(out: Path, message: str) -> int:
    """Grade nothing, and say why on the terminal and in results.json."""
    print(message, file=sys.stderr)
    write_atomically(out, results_json([], [message], []))
    return 2


def _child_options(args, test_dirs: list[Path]) -> list[str]:
    options = ["--timeout", str(args.timeout), "--memory-limit", str(args.memory_limit)]
    for chapter in args.chapter:
        options += ["--chapter", str(chapter)]
    for folder in test_dirs:
        options += ["--tests", str(folder)]
    return options + (["--same-user"] if args.same_user else [])


def grade_class(submissions: Path, out_dir: Path, options: list[str]) -> int:
    """Grade every sub-folder of ``submissions`` (one per student), each in its own grader process;
    write out_dir/<student>.json and out_dir/class.csv (a row of maxima first); print one row per
    student. A run that fails is an error row with its reason, never a score."""
    students = sorted(p for p in submissions.iterdir() if not _junk(p.name)
                      and (p.is_dir() or (p.is_file() and p.suffix.lower() == ".zip")))
    if not students:
        print(f"no student folders or zips in {submissions}", file=sys.stderr)
        return 2
    if out_dir.exists() and any(out_dir.iterdir()):
        print(f"{out_dir} is not empty: give an empty or new --out-dir (old grades are never reused)", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    private = [submissions.resolve(), out_dir.resolve()]
    if os.geteuid() == 0:  # no student's code may read a classmate's submission or grades
        sandbox.close_to_others([str(folder) for folder in private])
    options = [*options, *(option for folder in private for option in ("--private", str(folder)))]
    names = [student_name(p, students) for p in students]
    rows, said = [], set()
    for student, name in zip(students, names):
        row = _grade_student(student, name, out_dir / f"{name}.json", options)
        for line in row.pop("said"):  # the sandbox line and warnings, once for the class
            line = re.sub(r"runs as uid \d+", "runs as a uid of its own for each student", line)
            if re.sub(r"\(/[^)]*\)", "", line) not in said:
                said.add(re.sub(r"\(/[^)]*\)", "", line))
                print(line, file=sys.stderr if line.startswith("warning") else sys.stdout, flush=True)
        rows.append(row)
    exercises = list(dict.fromkeys(e for row in rows for e in row["maxima"]))
    maxima = next((row for row in rows if not row["error"]), None)
    with open(out_dir / "class.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "score", "max_score", *exercises, "error"])
        if maxima is not None:
            writer.writerow(["(maximum)", _num(maxima["max_score"]), _num(maxima["max_score"]),
                             *(_num(maxima["maxima"].get(e, 0)) for e in exercises), ""])
        for row in rows:
            scores = ["", ""] if row["error"] else [_num(row["score"]), _num(row["max_score"])]
            per = [("" if row["error"] else _num(row["per"].get(e, 0))) for e in exercises]
            writer.writerow([row["name"], *scores, *per, row["error"]])
    _print_class(rows, out_dir)
    return 1 if any(row["error"] for row in rows) else 0


def student_name(path: Path, students: list[Path]) -> str:
    """A student's folder name, or their zip's name without .zip unless a folder has that name."""
    if path.is_dir() or any(p.name == path.stem for p in students):
        return path.name
    return path.stem


def _grade_student(student: Path, name: str, out: Path, options: list[str]) -> dict:
    command = [sys.executable, "-m", "llama_course.grade", str(student), "--upload", "--out", str(out), *options]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="backslashreplace")
    stdout, stderr = child.communicate()
    run = subprocess.CompletedProcess(command, child.returncode, stdout, stderr)
    if os.geteuid() == 0 and "--same-user" not in options:  # whatever a killed child left behind
        sandbox.end_processes_of(sandbox.UID_BASE + child.pid)
        sandbox.remove_files_of(sandbox.UID_BASE + child.pid)
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith(("sandbox:", "warning:"))]
    row = {"name": name, "error": "", "score": 0.0, "max_score": 0.0, "per": {}, "maxima": {}, "said": said}
    if run.returncode != 0 or not out.is_file():
        reason = [line for line in (run.stderr or "").splitlines() if line.strip()]
        row["error"] = f"grading failed (exit code {run.returncode}): {reason[-1] if reason else 'no message'}"
        with contextlib.suppress(FileNotFoundError):
            out.unlink()  # a failed run leaves no score
        return row
    results = json.loads(out.read_text())
    row.update(score=results["score"], max_score=results["max_score"])
    for test in results["tests"]:
        name = test["name"].split(" :: ")[0]
        row["per"][name] = row["per"].get(name, 0.0) + test["score"]
        row["maxima"][name] = row["maxima"].get(name, 0.0) + test["max_score"]
    return row


def _print_class(rows: list[dict], out_dir: Path) -> None:
    width = max(len(r["name"]) for r in rows + [{"name": "student"}])
    print(f"{'student':<{width}}  {'points':>13}")
    for row in rows:
        points = "ERROR" if row["error"] else f"{_num(row['score']):>5} / {_num(row['max_score']):<5}"
        print(f"{row['name']:<{width}}  {points}  {row['error']}")
    print(f"\nper-exercise scores: {out_dir / 'class.csv'}")


if __name__ == "__main__":
    sys.exit(main())
