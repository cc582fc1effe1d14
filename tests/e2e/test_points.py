"""Points have one source, llama_course/grade/points.py: the grader divides each problem's points
across its tests so that the total does not depend on how they are written, and the chapters,
`--list`, the Gradescope zip and the student release's grader all give the table's numbers.

Oracles: shares worked out by hand for a synthetic suite; the homework rule of
book/instructors.md (tiers, no problem above twice the median); the chapters' Markdown and the
grader's own output, parsed."""

import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
import zipfile
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest

from llama_course.grade import points as course_points
from llama_course.grade.plugin import Graded, graded_marker
from llama_course.grade.points import PROBLEMS, TIERS, chapter_totals, fmt, kind_of, split

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"

# Collects test folders with the grader's own collector and prints every graded test's points:
# "POINTS [[nodeid, label, hidden, points], ...]", once per argument (folders joined by ",").
COLLECT = """
import json, sys, pytest
from llama_course.grade import grader
for folders in sys.argv[1:]:
    collector = grader._Collector()
    code = pytest.main(["--collect-only", "-q", "-p", "llama_course.grade.plugin", "-p", "no:cacheprovider",
                        "--import-mode=importlib", "-o", "addopts=", *folders.split(",")], plugins=[collector])
    rows = [[k, r.exercise, r.hidden, r.max_score] for k, r in collector.results.items()]
    print("POINTS", json.dumps({"code": int(code), "errors": collector.errors, "rows": rows}))
"""


def collect(*folder_sets: list[Path], cwd: Path = REPO, env=None) -> list[dict]:
    run = subprocess.run([sys.executable, "-c", COLLECT, *(",".join(map(str, f)) for f in folder_sets)],
                         cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    found = [json.loads(line.removeprefix("POINTS ")) for line in run.stdout.splitlines()
             if line.startswith("POINTS ")]
    assert len(found) == len(folder_sets), run.stdout[-3000:] + run.stderr[-3000:]
    return found


def per_problem(rows, hidden=None) -> dict[str, float]:
    totals = {}
    for _, label, is_hidden, points in rows:
        if hidden is None or is_hidden == hidden:
            totals[label] = totals.get(label, 0.0) + points
    return totals


# ------------------------------------------------------------------ the table and its rules

def homework_points():
    return [p.points for ident, p in PROBLEMS.items() if kind_of(ident) == "homework"]


def test_no_homework_is_worth_more_than_twice_the_median():
    points = homework_points()
    assert len(points) == 23
    assert max(points) <= 2 * statistics.median(points), sorted(points)


def test_practice_carries_little_weight_and_homework_follows_its_tier():
    practice = sum(p.points for ident, p in PROBLEMS.items() if kind_of(ident) == "practice")
    total = sum(p.points for p in PROBLEMS.values())
    assert practice / total < Fraction(1, 4), (practice, total)
    for ident, problem in PROBLEMS.items():
        if kind_of(ident) == "homework":
            assert problem.points == TIERS[problem.tier] and problem.public == 1, ident
        else:
            assert problem.points == 1 and problem.public in (1, Fraction(1, 2)), ident


def test_instructors_page_lists_each_homework_in_its_tier():
    text = re.sub(r"\s+", " ", (BOOK / "instructors.md").read_text(encoding="utf-8"))
    for tier, points in TIERS.items():
        found = re.search(rf"\*{tier}\*, (\d+) points: [^(]*\(([^)]*)\)", text)
        assert found, tier
        assert int(found[1]) == points, tier
        stated = {f"Homework {n}" for n in re.split(r",\s*", found[2])}
        table = {ident for ident, p in PROBLEMS.items() if p.tier == tier}
        assert stated == table, (tier, stated ^ table)


def test_split_and_formatting():
    assert split("Homework 13.A pipeline_bubble_fraction") == split("Homework 13.A")
    s = split("Homework 13.A")
    assert (s.total, s.public, s.hidden) == (6, 1, 5)
    assert [fmt(x) for x in (3, 0.5, 1 / 3, 2 / 3, 8.000000001, Fraction(17, 2))] == ["3", "0.5", "0.33", "0.67", "8",
                                                                                        "8.5"]
    with pytest.raises(ValueError, match="label"):
        split("Homework 99.Z")
    with pytest.raises(TypeError, match="label"):
        split(4)


# ------------------------------------------------------------------ dividing a problem's points

SYNTHETIC_PUBLIC = '''
import pytest
from llama_course.grade.points import problem

POINTS = {"Homework 96.A": problem("hw", 9, public=1), "Exercise 96.1": problem("first", 2)}


@pytest.mark.graded("Homework 96.A hw", kind="homework")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_cases(impl, n):
    pass


@pytest.mark.graded("Homework 96.A hw", weight=2, kind="homework")
def test_on_devices(impl, device):
    pass


@pytest.mark.graded("Exercise 96.1 first", weight=3)
@pytest.mark.parametrize("n", range({cases}))
def test_first(impl, n):
    pass
'''
SYNTHETIC_HIDDEN = '''
import pytest
from llama_course.grade.points import problem

POINTS = {"Homework 96.A": problem("hw", 9, public=1)}


@pytest.mark.graded("Homework 96.A hw", weight=4, kind="homework")
@pytest.mark.parametrize("n", range({cases}))
def test_many(impl, n):
    pass


@pytest.mark.graded("Homework 96.A hw", kind="homework")
def test_one(impl):
    pass
'''


def synthetic_suite(root: Path, cases: int) -> list[Path]:
    folders = [root / "graded", root / "hidden"]
    for folder, text in zip(folders, (SYNTHETIC_PUBLIC, SYNTHETIC_HIDDEN)):
        folder.mkdir(parents=True)
        (folder / "test_ch96_synthetic.py").write_text(text.replace("{cases}", str(cases)))
    return folders


@pytest.mark.slow
def test_parametrized_cases_and_devices_divide_a_problems_points(tmp_path):
    """9 points, 1 public: the public tests have weights 1 (3 cases) and 2 (on every device), the
    hidden ones 4 (N cases) and 1. Each case's share is worked out by hand; the totals are the
    table's for N = 2 and N = 7 cases, and on any number of devices."""
    # one process per suite: both suites' modules have the same names, which one process imports once
    runs = [*collect(synthetic_suite(tmp_path / "a", 2)), *collect(synthetic_suite(tmp_path / "b", 7))]
    for run, cases in zip(runs, (2, 7)):
        assert run["code"] == 0 and not run["errors"], run
        points = {nodeid.split("::", 1)[1]: (hidden, p) for nodeid, _, hidden, p in run["rows"]}
        devices = [name for name in points if name.startswith("test_on_devices[")]
        assert devices and all(points[d] == (False, pytest.approx(2 / 3 / len(devices))) for d in devices)
        assert [points[f"test_cases[{n}]"] for n in (1, 2, 3)] == [(False, pytest.approx(1 / 9))] * 3
        assert [points[f"test_many[{n}]"] for n in range(cases)] == [(True, pytest.approx(8 * 4 / 5 / cases))] * cases
        assert points["test_one"] == (True, pytest.approx(8 / 5))
        assert [points[f"test_first[{n}]"] for n in range(cases)] == [(False, pytest.approx(2 / cases))] * cases
        totals = per_problem(run["rows"])
        assert totals == {"Homework 96.A hw": pytest.approx(9), "Exercise 96.1 first": pytest.approx(2)}
        assert per_problem(run["rows"], hidden=False)["Homework 96.A hw"] == pytest.approx(1)


REEXPORT = """
import sys
sys.path.insert(0, {hidden!r})
from test_ch96_synthetic import POINTS, test_many, test_one  # noqa: F401  hidden tests, run from here
"""


@pytest.mark.slow
def test_a_hidden_test_run_from_another_folder_stays_hidden_in_points_and_feedback(tmp_path):
    """A suite that imports hidden test functions into a public folder: the grader's row (its
    feedback) and its points (the hidden part of the problem) agree that each is hidden."""
    graded, hidden = synthetic_suite(tmp_path, 2)
    again = tmp_path / "again"
    again.mkdir()
    (again / "test_ch96_again.py").write_text(REEXPORT.format(hidden=str(hidden)))
    (run,) = collect([again])
    assert run["code"] == 0 and not run["errors"], run
    rows = {nodeid.split("::", 1)[1]: (flag, p) for nodeid, _, flag, p in run["rows"]}
    assert rows["test_one"] == (True, pytest.approx(8 / 5)), rows       # the hidden part's share, 8 * 1/5
    assert [rows[f"test_many[{n}]"] for n in range(2)] == [(True, pytest.approx(8 * 4 / 5 / 2))] * 2, rows


def fake_item(folder: str, points: dict):
    """A collected test as item_points sees it: node id, module (its POINTS) and file."""
    return SimpleNamespace(nodeid=f"tests/{folder}/test_ch96_x.py::test_x",
                           path=Path(f"/course/tests/{folder}/test_ch96_x.py"), module=SimpleNamespace(POINTS=points))


def test_a_test_of_a_part_worth_nothing_is_refused_not_silently_worth_zero():
    """A hidden test of a problem whose points are all public (or a public test of one whose points
    are all hidden) would earn nothing: the table and the tests disagree, and collection says so."""
    marker = Graded("Exercise 96.1 first")
    problem, item_points = course_points.problem, course_points.item_points
    all_public, all_hidden = {"Exercise 96.1": problem("first", 2)}, {"Exercise 96.1": problem("first", 2, public=0)}
    for folder, points, part in (("hidden", all_public, "hidden"), ("graded", all_hidden, "public")):
        with pytest.raises(course_points.PointsError) as error:
            item_points([fake_item(folder, points)], lambda item: marker)
        message = str(error.value)
        assert f"tests/{folder}/test_ch96_x.py::test_x" in message and "Exercise 96.1" in message, message
        assert f"0 {part} points" in message, message
    # the same tests where the table gives their part points: worth all of it
    assert item_points([fake_item("hidden", all_hidden)], lambda item: marker) == {
        "tests/hidden/test_ch96_x.py::test_x": 2.0}


def test_the_old_points_argument_of_a_marker_is_refused_not_read_as_a_weight():
    """graded(..., points=3) once gave a test 3 points; the points are now the table's, and reading
    the old argument as a weight would change the shares silently: collection stops and says so."""
    old = SimpleNamespace(nodeid="tests/graded/test_ch04_attention.py::test_x",
                          get_closest_marker=lambda name: pytest.mark.graded("Exercise 4.1 softmax", points=3).mark)
    with pytest.raises(pytest.UsageError) as error:
        graded_marker(old)
    message = str(error.value)
    assert "tests/graded/test_ch04_attention.py::test_x" in message and "weight=" in message, message
    new = SimpleNamespace(nodeid=old.nodeid,
                          get_closest_marker=lambda name: pytest.mark.graded("Exercise 4.1 softmax", weight=3).mark)
    assert graded_marker(new) == Graded("Exercise 4.1 softmax", 3.0)


@pytest.mark.slow
def test_a_graded_test_outside_the_table_stops_collection(tmp_path):
    folder = tmp_path / "graded"
    folder.mkdir()
    (folder / "test_ch95_unknown.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.graded("Exercise 95.1 nowhere")
        def test_x(impl):
            pass
    '''))
    other = tmp_path / "kind"
    other.mkdir()
    (other / "test_ch04_attention.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.graded("Homework 4.A alibi_bias")  # kind defaults to practice: disagrees
        def test_x(impl):
            pass
    '''))
    unknown, kind = collect([folder], [other])
    assert unknown["code"] == 4 and not unknown["rows"]
    assert kind["code"] == 4 and not kind["rows"]


# ------------------------------------------------------------------ the course: table, tests, book, --list, zip

@pytest.fixture(scope="module")
def course():
    """The course's graded tests collected twice by the grader: as the instructor has them
    (public and hidden) and as the student release has them (public only)."""
    tests = REPO / "tests"
    full, release = collect([tests / "graded", tests / "hidden"], [tests / "graded"])
    assert full["code"] == 0 and not full["errors"] and release["code"] == 0, (full["errors"], release["errors"])
    return full["rows"], release["rows"]


@pytest.mark.slow
def test_every_graded_test_belongs_to_the_table_and_every_problem_gets_its_points(course):
    full, release = course
    labels = {label for _, label, _, _ in full}
    assert labels == {f"{ident} {p.name}" for ident, p in PROBLEMS.items()}
    assert len({" ".join(label.split()[:2]) for label in labels}) == len(labels)  # each exercise once
    for label, points in per_problem(full).items():
        assert points == pytest.approx(float(split(label).total)), label
    hidden = per_problem(full, hidden=True)
    for ident, problem in PROBLEMS.items():   # hidden tests exactly where the table gives them points
        assert hidden.get(f"{ident} {problem.name}", 0) == pytest.approx(float(problem.hidden)), ident
    # the release (no tests/hidden): its grader can check the public part, and it is the table's
    assert per_problem(release) == pytest.approx({label: float(split(label).public) for label in labels})


def exercises_markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if "## Exercises" in "".join(c["source"]))


@pytest.mark.parametrize("path", sorted(BOOK.glob("ch[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_each_chapter_states_the_tables_points(path):
    chapter = int(path.stem[2:4])
    totals = chapter_totals(chapter)
    text = exercises_markdown(path)
    practice = re.findall(r"\*\*Practice\*\* \([^)]*?(\d+) points in all\)", text)
    homework = dict(re.findall(r"\*\*(Homework \d+\.[A-Z]) `?[\w.]+`?\*\* \((\d+) points\)", text))
    if len(totals) == 1 and not totals["practice"]:
        assert not practice and not homework, f"{path.name} states points for exercises it has not"
        return
    assert practice == [fmt(totals["practice"])], path.name
    assert homework == {k: fmt(v) for k, v in totals.items() if k != "practice"}, path.name
    assert "--list` shows each problem's points and the part of them its public checks carry" in text


LIST_ROW = re.compile(r"^((?:Exercise|Homework) \d+\.\w+) .*?\s(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)$", re.M)


@pytest.mark.slow
def test_list_of_a_student_release_gives_the_tables_points_and_the_public_part():
    run = subprocess.run([sys.executable, "-m", "llama_course.grade", "--list", "--tests", "tests/graded"],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    rows = {m[1]: (m[2], m[3]) for m in LIST_ROW.finditer(run.stdout)}
    assert rows == {ident: (fmt(p.points), fmt(p.public)) for ident, p in PROBLEMS.items()}, run.stdout
    total = sum(p.points for p in PROBLEMS.values())
    public = sum(p.public for p in PROBLEMS.values())
    assert re.search(rf"^Total\s+{fmt(total)}\s+{fmt(public)}$", run.stdout, re.M), run.stdout
    assert "grading here can check the Public points only" in run.stdout


@pytest.mark.slow
def test_gradescope_zip_grades_out_of_the_tables_points(tmp_path):
    """The zip of Chapters 12 and 13, unpacked: its own package and tests give each problem the
    table's points, and nothing of another chapter."""
    from llama_course.grade.autograder import build

    with zipfile.ZipFile(build(tmp_path / "autograder.zip", [12, 13])) as z:
        z.extractall(tmp_path / "source")
    source = tmp_path / "source"
    (run,) = collect([source / "tests" / "graded", source / "tests" / "hidden"], cwd=source,
                     env={**os.environ, "PYTHONPATH": str(source)})
    assert run["code"] == 0 and not run["errors"], run
    expected = {f"{ident} {p.name}": float(p.points) for ident, p in PROBLEMS.items()
                if ident.split()[1].split(".")[0] in ("12", "13")}
    assert per_problem(run["rows"]) == pytest.approx(expected)
