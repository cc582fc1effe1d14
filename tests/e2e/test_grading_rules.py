"""Homework earns nothing from an implementation that answers it (llama_course.grade.rules):
transformers' own answers (refused statically and at run time, while the hidden tests' oracles
still use them), the package's source run through exec, autograd hidden in a "by hand" backward
pass, and a "differentiable" loss cut off from the graph. The key still scores full marks.

The hostile submissions live in tests/grader_cases/rules/, one folder each."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llama_course.grade.rules import file_problems, source_problems

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "grader_cases"
RULES = CASES / "rules"
needs_key = pytest.mark.skipif(not (REPO / "solutions").is_dir() or not (REPO / "tests" / "hidden").is_dir(),
                               reason="needs the instructor's tree (solutions/, tests/hidden)")


def grade(folder: Path, out: Path, *args) -> dict:
    run = subprocess.run([sys.executable, "-m", "llama_course.grade", str(folder), "--out", str(out), *map(str, args)],
                         capture_output=True, text=True, timeout=900, env={**os.environ})
    assert out.is_file(), run.stderr[-3000:]
    return json.loads(out.read_text())


def by_exercise(results: dict, prefix: str) -> tuple[float, float, list[str]]:
    """(points earned, points possible, outputs) of the rows whose exercise label starts with ``prefix``."""
    rows = [t for t in results["tests"] if t["name"].startswith(prefix)]
    assert rows, f"no rows for {prefix}"
    return sum(t["score"] for t in rows), sum(t["max_score"] for t in rows), [t["output"] for t in rows]


def chapter_args(*chapters: int) -> list:
    """The rule-bound homework's own tests of these chapters, public and hidden (rules/suites)."""
    return [a for n in chapters for a in ("--chapter", n)] + ["--tests", RULES / "suites"]


# The rule cases are graded two runs at a time instead of one each (the grader's start costs more
# than a case's tests): a run's submission holds one case per chapter. Each case is one file of its
# own chapter, and the grader checks each file on its own and runs each test in a sandbox of its
# own, so cases of one run cannot score, or lose points, for each other; each test below still
# reads only its own case's rows, and each checks why its case earned nothing.
RUNS = [("alibi_transformers", "min_p_transformers", "backward_helper", "swiglu_backward_helper",
         "balance_cut_off"),
        ("alibi_transformers_hidden", "min_p_transformers_hidden", "backward_thread")]


@pytest.fixture(scope="module")
def graded_case(tmp_path_factory):
    """graded_case(case, chapter) -> the results of the run that graded ``case`` (RUNS)."""
    results: dict[tuple, dict] = {}

    def get(case: str, chapter: int) -> dict:
        run = next(r for r in RUNS if case in r)
        if run not in results:
            sub = tmp_path_factory.mktemp("rules")
            chapters = []
            for name in run:
                files = sorted((RULES / name).glob("ch*.py"))
                assert len(files) == 1 and not (sub / files[0].name).exists(), (name, files)
                shutil.copy(files[0], sub / files[0].name)
                chapters.append(int(files[0].name[2:4]))
            results[run] = grade(sub, sub.parent / f"{sub.name}.json", *chapter_args(*chapters))
        assert (sub_file := next((RULES / case).glob("ch*.py"))).name.startswith(f"ch{chapter:02d}_"), sub_file
        return results[run]

    return get


@pytest.mark.slow
@needs_key
@pytest.mark.parametrize("case, chapter, label, why", [
    ("alibi_transformers", 4, "Homework 4.A", "imports transformers"),
    ("alibi_transformers_hidden", 4, "Homework 4.A", "tried to use transformers"),
    ("min_p_transformers", 8, "Homework 8.C", "imports transformers"),
    ("min_p_transformers_hidden", 8, "Homework 8.C", "tried to use transformers"),
])
def test_transformers_answers_earn_nothing(graded_case, case, chapter, label, why):
    """Homework 4.A by transformers' BLOOM ALiBi, 8.C by its MinPLogitsWarper: the hidden tests'
    own oracles, imported plainly (refused before grading) or under a computed name (refused by
    the worker's audit hook). The oracles still run in the grader: the key scores these rows."""
    results = graded_case(case, chapter)
    earned, possible, outputs = by_exercise(results, label)
    assert possible > 0 and earned == 0, (earned, outputs)
    assert any(why in o for o in outputs), outputs


@pytest.mark.slow
@needs_key
@pytest.mark.parametrize("case, chapter, label", [
    ("backward_helper", 3, "Homework 3.A"),
    ("backward_thread", 3, "Homework 3.A"),
    ("swiglu_backward_helper", 6, "Homework 6.A"),
    ("balance_cut_off", 12, "Homework 12.B"),
])
def test_autograd_rules(graded_case, case, chapter, label):
    """By-hand backward passes with autograd in a helper (enable_grad + autograd.grad, a raw
    thread, torch.func.vjp) earn nothing; a loss with the right value but no gradient loses the
    differentiability test."""
    results = graded_case(case, chapter)
    earned, possible, outputs = by_exercise(results, label)
    if label == "Homework 12.B":   # the values are right: only the gradient test fails
        assert 0 < earned < possible, (earned, outputs)
        failed = [t for t in results["tests"] if t["name"].startswith(label) and t["score"] < t["max_score"]]
        names = [t["name"].split(" :: ")[1].split(" (hidden case")[0] for t in failed]   # "... (hidden case 1)"
        assert names == ["test_sequence_balance_loss_balanced_costs_alpha_and_responds_to_scores_hidden"], failed
    else:
        assert possible > 0 and earned == 0, (earned, outputs)
        assert any("without autograd" in o for o in outputs), outputs


@pytest.mark.slow
@needs_key
def test_the_key_scores_full_marks_under_the_rules(tmp_path):
    """The chapters the rules touch: 3 and 6 (by hand), 4 and 8 (transformers' oracles), 12 (the
    gradient taken in the worker), graded and hidden tests."""
    results = grade(REPO / "solutions", tmp_path / "r.json", *chapter_args(3, 4, 6, 8, 12))
    lost = [(t["name"], t["output"][:300]) for t in results["tests"] if t["score"] < t["max_score"]]
    assert results["max_score"] > 0 and not lost, lost
    assert results["score"] == results["max_score"]


PACKAGE_SOFTMAX = """
    import importlib
    import pathlib
    import types

    import torch

    _package = importlib.import_module("llama_" + "course.attention")
    {how}

    def causal_mask(n):
        return torch.ones(n, n, dtype=torch.bool).tril()
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", [
    'exec(compile(pathlib.Path(_package.__file__).read_text(), __file__, "exec"),\n'
    '         _ns := {"__name__": "llama_course.mine", "__package__": "llama_course"})\n'
    '    softmax = _ns["soft" + "max"]',
    'softmax = types.FunctionType(getattr(_package, "soft" + "max").__code__.replace(co_name="mine"), vars(_package),\n'
    '                             None, (-1,))',
], ids=["exec of the package's source", "code.replace of the package's code"])
def test_the_package_run_through_exec_earns_nothing(tmp_path, how):
    """A practice exercise answered by a copy of the package's own function, made with exec of its
    source (named after the student's own file) or with code.replace: the copy is recognised by
    its bytecode when it runs ("no points for the reference", as a plain import would be)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ch04_attention.py").write_text(textwrap.dedent(PACKAGE_SOFTMAX.format(how=how)))
    results = grade(sub, tmp_path / "r.json", "--tests", CASES / "reference")
    tests = {t["name"].split(" :: ")[1]: t for t in results["tests"]}
    assert tests["test_causal_mask"]["score"] == 1, tests["test_causal_mask"]["output"]
    assert tests["test_softmax"]["score"] == 0, tests["test_softmax"]["output"]
    assert "the package's own softmax" in tests["test_softmax"]["output"]


@pytest.mark.slow
def test_the_package_function_typed_by_hand_is_the_students(tmp_path):
    """The same code in the student's own file (typed from the book, say) is the student's own."""
    import inspect

    import llama_course.attention as attention

    sub = tmp_path / "sub"
    sub.mkdir()
    source = inspect.getsource(attention.softmax).replace('"""', "'''")
    (sub / "ch04_attention.py").write_text(
        "import torch\nfrom llama_course.checks import check_tensor\n\n\n" + source
        + "\n\ndef causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n")
    results = grade(sub, tmp_path / "r.json", "--tests", CASES / "reference")
    assert results["score"] == results["max_score"] == 2, results["tests"]


@pytest.mark.parametrize("source, found", [
    ("import transformers", "imports transformers"),
    ("from transformers import MinPLogitsWarper", "imports transformers"),
    ("from transformers.models.bloom.modeling_bloom import build_alibi_tensor", "imports transformers"),
    ("import importlib\nm = importlib.import_module('transformers')", "imports transformers"),
    ("m = __import__('tokenizers')", "imports tokenizers"),
    ("import sympy", "imports sympy"),
])
def test_static_rule_finds_imports_beyond_the_allowed(source, found):
    problems = source_problems(source, {"helper"})
    assert len(problems) == 1 and found in problems[0] and problems[0].startswith("line "), problems


def test_static_rule_allows_the_standard_library_torch_the_package_and_own_files(tmp_path):
    source = ("import math, statistics, fractions\nimport torch\nimport torch.nn.functional as F\nimport numpy\n"
              "import regex\nfrom llama_course.config import LlamaConfig\nimport helper\nfrom mypkg import x\n"
              "import importlib\nm = importlib.import_module('collections')\n")
    (tmp_path / "helper.py").write_text("")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "ch03_norm.py").write_text(source)
    assert file_problems(tmp_path / "ch03_norm.py") == []
    for key in sorted((REPO / "solutions").glob("ch*.py")) + sorted((REPO / "exercises").glob("ch*.py")):
        assert file_problems(key) == [], key


def test_the_rule_cases_stay_out_of_the_student_release():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import student_release
    finally:
        sys.path.remove(str(REPO / "tools"))
    assert any("tests/grader_cases/".startswith(p) for p in student_release.INSTRUCTOR_ONLY)
    assert "tests/e2e/test_grading_rules.py" in student_release.INSTRUCTOR_ONLY
