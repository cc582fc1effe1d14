"""exercises/ is generated from solutions/ and stays in sync; every exercise is graded."""

import ast
import re
import shutil
from pathlib import Path

import pytest

from llama_course.grade.stubs import NOT_IMPLEMENTED, exercise_labels, is_untouched_stub, main, make_stub, stale_stubs

REPO = Path(__file__).resolve().parents[2]
SOLUTION = ('def f(x):\n    """Doc."""\n    # BEGIN SOLUTION Exercise 9.9 f (Chapter 9, section 9.1 "X")\n'
            '    return x\n    # END SOLUTION\n')


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
            pattern = (r"(Exercise \d+\.\d+|Homework \d+\.[A-Z]) \w[\w.]*( \(\w+\))? "
                       r"\(Chapter \d+, (beyond )?section \d+\.\d+ \"[^\"]+\"\)$")
            assert re.match(pattern, label), label


def test_every_exercise_has_graded_tests_and_vice_versa():
    graded = set()
    for path in [*(REPO / "tests" / "graded").glob("test_ch*.py"), *(REPO / "tests" / "hidden").glob("test_ch*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and str(node.value.value).startswith(("Exercise ", "Homework ")):
                graded.add(node.value.value)
    labelled = {label.split(" (Chapter ")[0] for path in (REPO / "solutions").glob("ch*.py")
                for label in exercise_labels(path.read_text())}
    assert labelled == graded


def test_make_stub_keeps_the_rest_and_rejects_bad_markers():
    stub = make_stub(SOLUTION, "ch09_x.py")
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




def make_tree(tmp_path, solution=SOLUTION):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "ch09_x.py").write_text(solution)
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises")]) == 0
    return tmp_path / "exercises" / "ch09_x.py"


def test_stubs_refuse_to_run_without_solutions(tmp_path, capsys):
    """A student release has no solutions/: `make exercises` must not touch the student's files."""
    exercises = tmp_path / "exercises"
    exercises.mkdir()
    work = exercises / "ch04_attention.py"
    work.write_text("def softmax(x):\n    return x.softmax(-1)  # my work\n")
    assert main([str(tmp_path / "solutions"), str(exercises)]) == 2
    assert main([str(tmp_path / "solutions"), str(exercises), "--check"]) == 2
    assert "no solutions" in capsys.readouterr().err
    assert work.read_text().endswith("# my work\n") and [p.name for p in exercises.iterdir()] == [work.name]


def test_stubs_never_overwrite_or_remove_edited_work(tmp_path, capsys):
    stub = make_tree(tmp_path)
    assert is_untouched_stub(stub.read_text())
    edited = stub.read_text().replace("raise NotImplementedError(", "return x  # mine\n    raise NotImplementedError(")
    stub.write_text(edited)
    assert not is_untouched_stub(edited)
    (tmp_path / "solutions" / "ch09_x.py").write_text(SOLUTION.replace("Doc.", "New doc."))  # the key changes
    orphan = tmp_path / "exercises" / "ch08_y.py"
    orphan.write_text("def g():\n    return 1  # my own file\n")
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises")]) == 1  # says it kept files
    err = capsys.readouterr().err
    assert stub.read_text() == edited and orphan.read_text().endswith("# my own file\n")
    assert "kept" in err and stub.name in err and orphan.name in err
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises"), "--force"]) == 0
    assert "New doc." in stub.read_text() and not orphan.exists()


def test_untouched_stubs_follow_the_key(tmp_path):
    stub = make_tree(tmp_path)
    (tmp_path / "solutions" / "ch09_x.py").write_text(SOLUTION.replace("Doc.", "New doc."))
    shutil.copy(stub, tmp_path / "exercises" / "ch08_old.py")  # an untouched stub whose solution is gone
    stub.write_text(stub.read_text().split("# generated stub, sha256")[0])  # the unsigned (older) format
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises")]) == 1  # unsigned but stale: kept
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises"), "--force"]) == 0
    (tmp_path / "solutions" / "ch09_x.py").write_text(SOLUTION)  # back to the first key: regenerated silently
    assert main([str(tmp_path / "solutions"), str(tmp_path / "exercises")]) == 0
    assert "New doc." not in stub.read_text() and not (tmp_path / "exercises" / "ch08_old.py").exists()


def test_long_labels_wrap_to_the_line_width():
    label = 'Exercise 9.9 f (Chapter 9, section 9.1 "' + "A very long section title " * 6 + '")'
    stub = make_stub(SOLUTION.replace('Exercise 9.9 f (Chapter 9, section 9.1 "X")', label), "ch09_x.py")
    assert max(map(len, stub.splitlines())) <= 120 and stub.count(NOT_IMPLEMENTED) == 1
    namespace = {}
    exec(stub, namespace)
    with pytest.raises(NotImplementedError) as error:
        namespace["f"](1)
    assert str(error.value) == f"{label}: {NOT_IMPLEMENTED}"
