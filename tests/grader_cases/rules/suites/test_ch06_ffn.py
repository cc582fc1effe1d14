"""Homework 6.A's tests alone, public (tests/graded) and hidden (tests/hidden), for the rule tests
(tests/e2e/test_grading_rules.py): the real tests, without the rest of the chapter's."""

import importlib
import sys
from pathlib import Path

LABEL, TESTS = "Homework 6.A", Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS))  # the test files import graded._checks
for _kind in ("graded", "hidden"):
    _module = importlib.import_module(f"{_kind}.{Path(__file__).stem}")
    for _name, _test in vars(_module).items():
        _marks = getattr(_test, "pytestmark", []) if _name.startswith("test_") else []
        if any(m.name == "graded" and m.args[0].startswith(LABEL) for m in _marks):
            globals()[f"{_name}_{_kind}"] = _test
    PACKAGE_MODULES = getattr(_module, "PACKAGE_MODULES", ["llama_course"])
