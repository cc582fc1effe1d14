"""What the grader prints for a student: short failure messages (never a tensor dump), graded tests
whose every assert says what went wrong, and a table that separates what it checked from what it
cannot (the hidden tests' points)."""

import ast
from pathlib import Path

import pytest

from llama_course.grade import grader
from llama_course.grade.grader import FEEDBACK_CHARS, short_feedback, table, unchecked_points

REPO = Path(__file__).resolve().parents[2]
GRADED_DIRS = [d for d in (REPO / "tests" / "graded", REPO / "tests" / "hidden") if d.is_dir()]


def bare_asserts(folder: Path) -> list[str]:
    """file:line of every `assert` without a message in the folder's .py files."""
    return [f"{path.name}:{node.lineno}" for path in sorted(folder.glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Assert) and node.msg is None]


@pytest.mark.parametrize("folder", GRADED_DIRS, ids=lambda d: d.name)
def test_every_assert_of_the_graded_tests_says_what_went_wrong(folder):
    """A bare `assert` gives a student "AssertionError: assert False" (or pytest's dump of the
    operands): each one needs a message, or a helper of tests/graded/_checks.py."""
    assert bare_asserts(folder) == [], "asserts without a message"


def test_the_lint_finds_a_bare_assert(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_a():\n    assert 1 == 1, 'fine'\n    assert 2 == 2\n")
    assert bare_asserts(tmp_path) == ["test_x.py:3"]


DUMP = "tensor([" + ", ".join(f"{i}.5000" for i in range(3000)) + "])"


def test_feedback_keeps_the_tests_message_and_drops_pytests_dump():
    text = ("AssertionError: bf16 inputs: attention must return bf16 (q's dtype), got torch.float32\n"
            "assert torch.float32 == torch.bfloat16\n"
            f" +  where torch.float32 = {DUMP}.dtype")
    assert short_feedback(text) == ("AssertionError: bf16 inputs: attention must return bf16 (q's dtype), "
                                     "got torch.float32")


def test_feedback_of_a_bare_assert_or_a_huge_message_is_cut_and_says_so():
    bare = short_feedback(f"AssertionError: assert False\n +  where False = f({DUMP})")
    assert bare.startswith("AssertionError: assert False") and len(bare) <= FEEDBACK_CHARS + 50
    assert bare.endswith("[...]") and DUMP not in bare
    huge = short_feedback("ValueError: " + DUMP)                  # a student's own exception message
    assert huge.startswith("ValueError: tensor([0.5000") and "[...]" in huge and len(huge) <= FEEDBACK_CHARS + 50
    lines = short_feedback("\n".join(f"line {i}" for i in range(100))).splitlines()
    assert len(lines) <= 13 and lines[-1] == "[... the rest of this message is cut]"
    assert short_feedback("AssertionError: shape (2, 3), expected (3, 2)") == \
        "AssertionError: shape (2, 3), expected (3, 2)"


def result(exercise, score, max_score, kind="homework", name="test_x"):
    failure = "" if score == max_score else "wrong"
    return grader.TestResult(name, exercise, max_score, kind, score=score, failure=failure)


def test_a_homework_row_says_what_it_checked_and_what_it_cannot():
    results = [result("Homework 3.B fold_norm_weights", 1, 1), result("Exercise 3.1 rms_norm", 3, 3, "practice")]
    text = table(results, {"Homework 3.B fold_norm_weights": 8.0})
    row = next(line for line in text.splitlines() if line.startswith("Homework 3.B"))
    assert row.endswith("public checks pass (1 of 9 points; 8 more from hidden tests the instructor runs)"), row
    assert "all tests pass" not in row
    assert next(line for line in text.splitlines() if line.startswith("Exercise 3.1")).endswith("all tests pass")
    assert "Not checked here: 8 more points from hidden tests the instructor runs (12 in all)" in text
    with pytest.raises(TypeError, match="unchecked"):   # hidden points unknown: no table that could claim a pass
        table(results, None)
    everything = table(results, {})       # the hidden tests ran: all of it was checked
    assert next(line for line in everything.splitlines() if line.startswith("Homework 3.B")).endswith("all tests pass")
    failing = table([result("Homework 3.B fold_norm_weights", 0, 1, name="test_worked")], {"Homework 3.B x": 8.0})
    assert "test_worked: wrong" in failing


def test_unchecked_points_come_from_the_points_table_only_without_hidden_tests(tmp_path):
    from llama_course.grade.points import split

    graded, hidden = tmp_path / "graded", tmp_path / "hidden"
    unchecked = unchecked_points([graded])
    assert unchecked["Homework 3.B fold_norm_weights"] == float(split("Homework 3.B").hidden) > 0
    assert "Exercise 4.1 softmax" not in unchecked                      # practice graded by public checks only
    assert unchecked_points([graded, hidden]) == {}
