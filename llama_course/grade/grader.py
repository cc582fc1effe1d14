"""The exercise grader.

    python -m llama_course.grade [PATH] [--chapter N ...] [--out FILE] [--timeout SECONDS]

Grades the chNN_*.py files in PATH (default: exercises/) with the graded tests in tests/graded,
prints a table per exercise (points earned / possible, first failure) and writes Gradescope's
results.json (``score``, ``tests[]`` with ``name``, ``score``, ``max_score``, ``output``).

The grader never imports the student's code: every test talks to a fresh worker process
(llama_course.grade.sandbox), so nothing that code does -- raise, hang, exit, print, write files,
patch torch -- can change another test's score or the results file, which is written only
after every worker is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .plugin import REPO, SANDBOX

OUTPUT_CHARS = 4000  # of failure text and student output per test in results.json


@dataclass
class TestResult:
    name: str
    exercise: str
    max_score: float
    score: float = 0.0
    failure: str = ""
    student_output: str = ""
    seen: set = field(default_factory=set)

    @property
    def first_line(self) -> str:
        if "NotImplementedError" in self.failure and "not implemented yet" in self.failure:
            return "not implemented yet"
        lines = [line.strip() for line in self.failure.splitlines() if line.strip()]
        return lines[0] if lines else ""


class _Collector:
    """pytest plugin that records each graded test's outcome in the grader's process."""

    def __init__(self):
        self.results: dict[str, TestResult] = {}
        self.errors: list[str] = []

    def pytest_collection_modifyitems(self, items):
        for item in items:
            marker = item.get_closest_marker("graded")
            if marker is None:
                continue
            exercise = marker.args[0] if marker.args else marker.kwargs["exercise"]
            points = float(marker.kwargs.get("points", marker.args[1] if len(marker.args) > 1 else 1))
            self.results[item.nodeid] = TestResult(item.nodeid.split("::", 1)[-1], exercise, points)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"could not collect {report.nodeid}: {report.longreprtext[-2000:]}")

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
        if report.failed:
            result.score = 0.0
            if not result.failure:
                result.failure = _describe_failure(call, report)
        sandbox = item.stash.get(SANDBOX, None)
        if sandbox is not None:
            result.student_output = sandbox.output


def _describe_failure(call, report) -> str:
    if call.excinfo is None:
        return _cut(report.longreprtext)
    error = call.excinfo.value
    text = f"{type(error).__name__}: {error}"
    for note in getattr(error, "__notes__", ()):
        text += f"\n{note}"
    return _cut(text)


def run(path: Path, tests: Path, chapters: list[int], timeout: float) -> tuple[list[TestResult], list[str]]:
    """Run the graded tests against the student folder; return per-test results and grader errors."""
    targets = [str(tests)]
    if chapters:
        targets = sorted(str(p) for n in chapters for p in tests.glob(f"test_ch{n:02d}_*.py"))
        if not targets:
            return [], [f"no graded tests for chapter(s) {chapters} in {tests}"]
    collector = _Collector()
    args = [*targets, f"--impl={path}", "--isolate", f"--impl-timeout={timeout}",
            "-p", "llama_course.grade.plugin", "-p", "no:cacheprovider",
            "-q", "--tb=short", f"--rootdir={REPO}", "-o", "addopts="]
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


def table(results: list[TestResult]) -> str:
    """The per-exercise summary a student reads."""
    exercises: dict[str, list[TestResult]] = {}
    for result in results:
        exercises.setdefault(result.exercise, []).append(result)
    width = max([len(name) for name in exercises] + [len("Exercise")])
    lines = [f"{'Exercise':<{width}}  {'Points':>9}  First failure", "-" * (width + 40)]
    for name, group in exercises.items():
        earned, possible = sum(r.score for r in group), sum(r.max_score for r in group)
        failing = next((r for r in group if r.score < r.max_score), None)
        note = f"{failing.name}: {failing.first_line}" if failing else "all tests pass"
        lines.append(f"{name:<{width}}  {_num(earned):>4} / {_num(possible):<4}  {note[:100]}")
    earned, possible = sum(r.score for r in results), sum(r.max_score for r in results)
    lines += ["-" * (width + 40), f"{'Total':<{width}}  {_num(earned):>4} / {_num(possible):<4}"]
    return "\n".join(lines)


def _cut(text: str) -> str:
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + f"\n[... cut at {OUTPUT_CHARS} characters]"


def _num(x: float) -> str:
    return f"{x:g}"


def results_json(results: list[TestResult], errors: list[str]) -> dict:
    """Gradescope's results.json."""
    tests = []
    for r in results:
        output = "passed" if r.score == r.max_score else r.failure
        if r.student_output:
            output += f"\n--- your code printed ---\n{_cut(r.student_output)}"
        tests.append({"name": f"{r.exercise} :: {r.name}", "score": r.score, "max_score": r.max_score,
                      "output": output, "visibility": "visible"})
    summary = "\n".join(errors) if errors else "graded %d tests" % len(tests)
    return {"score": sum(r.score for r in results), "max_score": sum(r.max_score for r in results),
            "output": summary, "tests": tests}


def write_atomically(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".results-", suffix=".json",
                                     delete=False, encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    os.replace(handle.name, path)


def grade_class(submissions: Path, out_dir: Path, chapters: list[int], timeout: float) -> int:
    """Grade every sub-folder of ``submissions`` (one per student), each in its own process; write
    out_dir/<student>.json and out_dir/class.csv; print one row per student."""
    import csv
    import subprocess

    students = sorted(p for p in submissions.iterdir() if p.is_dir())
    if not students:
        print(f"no student folders in {submissions}", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, exercises = [], []
    for student in students:
        out = out_dir / f"{student.name}.json"
        command = [sys.executable, "-m", "llama_course.grade", str(student), "--out", str(out), "--timeout", str(timeout)]
        for chapter in chapters:
            command += ["--chapter", str(chapter)]
        subprocess.run(command, capture_output=True, text=True)
        results = json.loads(out.read_text()) if out.exists() else {"score": 0, "max_score": 0, "tests": []}
        per_exercise: dict[str, float] = {}
        for test in results["tests"]:
            name = test["name"].split(" :: ")[0]
            per_exercise[name] = per_exercise.get(name, 0.0) + test["score"]
            if name not in exercises:
                exercises.append(name)
        rows.append((student.name, results["score"], results.get("max_score", 0), per_exercise))
    with open(out_dir / "class.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "score", "max_score", *exercises])
        for name, score, possible, per in rows:
            writer.writerow([name, _num(score), _num(possible), *(_num(per.get(e, 0)) for e in exercises)])
    width = max(len(r[0]) for r in rows + [("student",)])
    print(f"{'student':<{width}}  {'points':>11}")
    for name, score, possible, _ in rows:
        print(f"{name:<{width}}  {_num(score):>5} / {_num(possible):<5}")
    print(f"\nper-exercise scores: {out_dir / 'class.csv'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade", description="Grade the course exercises.")
    parser.add_argument("path", nargs="?", default="exercises", type=Path,
                        help="folder with your chNN_*.py files (default: exercises/)")
    parser.add_argument("--chapter", type=int, action="append", default=[], help="grade only this chapter (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("results.json"), help="where to write results.json")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds each test may spend in your code")
    parser.add_argument("--tests", type=Path, default=REPO / "tests" / "graded", help=argparse.SUPPRESS)
    parser.add_argument("--class", dest="class_dir", type=Path, metavar="SUBMISSIONS",
                        help="grade every sub-folder of SUBMISSIONS (one per student); results go to --out-dir")
    parser.add_argument("--out-dir", type=Path, default=Path("grades"), help="with --class: where results go")
    args = parser.parse_args(argv)
    if args.class_dir is not None:
        if not args.class_dir.is_dir():
            parser.error(f"{args.class_dir} is not a folder")
        return grade_class(args.class_dir, args.out_dir, args.chapter, args.timeout)
    if not args.path.is_dir():
        parser.error(f"{args.path} is not a folder")
    if not args.tests.is_dir():
        parser.error(f"no graded tests at {args.tests}")
    out = args.out.resolve()  # fixed before any student code runs
    results, errors = run(args.path.resolve(), args.tests.resolve(), args.chapter, args.timeout)
    print(f"Grading {args.path}\n")
    print(table(results) if results else "no graded tests ran")
    for error in errors:
        print(f"\ngrader error: {error}", file=sys.stderr)
    write_atomically(out, results_json(results, errors))
    print(f"\nresults written to {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
