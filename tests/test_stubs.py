"""exercises/ is generated from solutions/ and stays in sync; every exercise is graded."""

import ast
import re
from pathlib import Path

import pytest

from llama_course.grade.stubs import NOT_IMPLEMENTED, exercise_labels, make_stub, stale_stubs

REPO = Path(__file__).resolve().parents[1]


def test_exercises_are_in_sync_with_solutions():
    stale = stale_stubs(REPO / "solutions", REPO / "exercises")
    assert not stale, f"run `make exercises`: stale {stale}"


def test_every_solution_block_becomes_a_stub_that_parses():
    for path in sorted((REPO / "exercises").glob("ch[0-9][0-9]_*.py")):
        text = path.read_text()
        ast.parse(text)
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
        labels = exercise_labels((REPO / "solutions" / path.name).read_text())
        assert labels and text.count(NOT_IMPLEMENTED) == len(labels)
        for label in labels:  # each names the exercise and its book section
            assert re.match(r"Exercise \d+\.\d+ \w[\w. ]* \(Chapter \d+, section \d+\.\d+ \"[^\"]+\"\)$", label), label


def test_every_exercise_has_graded_tests_and_vice_versa():
    graded = set()
    for path in (REPO / "tests" / "graded").glob("test_ch*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and str(node.value.value).startswith("Exercise "):
                graded.add(node.value.value)
    labelled = {" ".join(label.split()[:3]) for path in (REPO / "solutions").glob("ch*.py")
                for label in exercise_labels(path.read_text())}
    assert labelled == graded


def test_make_stub_keeps_the_rest_and_rejects_bad_markers():
    source = 'def f(x):\n    """Doc."""\n    # BEGIN SOLUTION Exercise 9.9 f (Chapter 9, section 9.1 "X")\n    return x\n    # END SOLUTION\n'
    stub = make_stub(source, "ch09_x.py")
    namespace = {}
    exec(stub, namespace)
    with pytest.raises(NotImplementedError, match=r"Exercise 9\.9 f .*not implemented yet"):
        namespace["f"](1)
    assert '"""Doc."""' in stub and "return x" not in stub
    with pytest.raises(ValueError, match="never closed"):
        make_stub("# BEGIN SOLUTION Exercise 1.1 a\nx = 1\n")
    with pytest.raises(ValueError, match="without BEGIN"):
        make_stub("# END SOLUTION\n")
    with pytest.raises(ValueError, match="needs a label"):
        make_stub("# BEGIN SOLUTION\n# END SOLUTION\n")
