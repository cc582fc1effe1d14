"""Gathers one homework's tests, public (tests/graded) and hidden (tests/hidden), into a suite file
of this folder for the rule tests (tests/e2e/test_grading_rules.py): the real tests, without the
rest of the chapter's."""

import importlib
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[3]


def pick(label: str, test_file: str, into: dict) -> None:
    """Put the tests of ``label`` (e.g. "Homework 3.A") from tests/graded and tests/hidden's
    ``test_file`` into the namespace ``into``, with the chapter's PACKAGE_MODULES."""
    sys.path.insert(0, str(TESTS))  # the test files import graded._checks
    for kind in ("graded", "hidden"):
        module = importlib.import_module(f"{kind}.{Path(test_file).stem}")
        for name, test in vars(module).items():
            marks = getattr(test, "pytestmark", []) if name.startswith("test_") else []
            if any(m.name == "graded" and m.args[0].startswith(label) for m in marks):
                into[f"{name}_{kind}"] = test
        into["PACKAGE_MODULES"] = getattr(module, "PACKAGE_MODULES", ["llama_course"])
