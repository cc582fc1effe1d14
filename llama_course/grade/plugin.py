"""pytest plugin for graded tests: choose the implementation under test, give tests their points.

    pytest tests/graded --impl=solutions     the instructor's key (default)
    pytest tests/graded --impl=exercises     the student stubs
    pytest tests/graded --impl=PATH          any folder of chNN_*.py files
    pytest tests/graded --impl=package       the package's reference implementation
    ... --isolate                            run the implementation in a worker process per test
                                             (the grader always does; see llama_course.grade.sandbox)

A graded test file ``test_ch01_anatomy.py`` grades ``ch01_anatomy.py`` of the chosen folder and
receives it as the ``impl`` fixture. Each graded test carries its points and its exercise:

    @pytest.mark.graded("Exercise 1.1 ffn_hidden_dim", points=2)
    def test_llama_widths(impl): ...
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
_NAMED = {"solutions": REPO / "solutions", "exercises": REPO / "exercises"}
SANDBOX = pytest.StashKey()


def pytest_addoption(parser):
    group = parser.getgroup("llama_course", "graded exercises")
    group.addoption("--impl", default="solutions",
                    help="implementation to grade: solutions (default), exercises, package, or a folder path")
    group.addoption("--isolate", action="store_true",
                    help="run the implementation in a separate worker process for each test")
    group.addoption("--impl-timeout", type=float, default=60.0,
                    help="seconds each test may spend in the implementation (with --isolate)")


def pytest_configure(config):
    config.addinivalue_line("markers", "graded(exercise, points): a graded test worth `points` for `exercise`")


def available_devices() -> list[str]:
    """cpu, then every accelerator this machine has."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


@pytest.fixture(params=available_devices())
def device(request) -> torch.device:
    """Parametrizes a test over the CPU and every available accelerator."""
    return torch.device(request.param)


def impl_folder(config) -> Path | None:
    """The folder named by --impl, or None for the package itself."""
    choice = config.getoption("--impl")
    if choice == "package":
        return None
    folder = _NAMED.get(choice, Path(choice))
    if not folder.is_dir():
        raise pytest.UsageError(f"--impl={choice}: {folder} is not a folder")
    return folder.resolve()


def _module_name(request) -> str:
    match = re.fullmatch(r"test_(ch\d\d_\w+)", request.module.__name__.rpartition(".")[2])
    if not match:
        raise pytest.UsageError(f"{request.module.__name__}: graded test files are named test_chNN_topic.py")
    return match[1]


@pytest.fixture
def impl(request):
    """The implementation under test for this test file (a module, or a Remote of one)."""
    folder = impl_folder(request.config)
    if folder is None:
        return PackageImpl(getattr(request.module, "PACKAGE_MODULES", ["llama_course"]))
    path = folder / f"{_module_name(request)}.py"
    if not path.is_file():
        pytest.fail(f"{path} does not exist", pytrace=False)
    if request.config.getoption("--isolate"):
        from llama_course.grade.sandbox import Sandbox
        sandbox = Sandbox(path, timeout=request.config.getoption("--impl-timeout"))
        request.addfinalizer(sandbox.close)
        request.node.stash[SANDBOX] = sandbox
        return sandbox.module
    spec = importlib.util.spec_from_file_location(f"_impl_{folder.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


@pytest.fixture
def impl_source(request):
    """A function giving the source text of one function of the implementation under test, read
    from its file (the student's code is never imported by the grader to get it)."""
    import ast
    import inspect

    folder = impl_folder(request.config)

    def source(name: str) -> str:
        if folder is None:
            return inspect.getsource(getattr(PackageImpl(getattr(request.module, "PACKAGE_MODULES",
                                                                 ["llama_course"])), name))
        text = (folder / f"{_module_name(request)}.py").read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return ast.get_source_segment(text, node)
        pytest.fail(f"no function {name} in the file", pytrace=False)

    return source


class PackageImpl:
    """--impl=package: the package's reference functions, looked up in the modules a graded test
    file lists in PACKAGE_MODULES. An exercise with no package counterpart (a helper such as
    ``count_pairs``) is skipped, not failed."""

    def __init__(self, module_names):
        self._modules = [importlib.import_module(name) for name in module_names]

    def __getattr__(self, name):
        for module in self._modules:
            if hasattr(module, name):
                return getattr(module, name)
        pytest.skip(f"the package has no {name}; it is an exercise-only helper")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the student's captured output to the report (the grader shows it)."""
    outcome = yield
    report = outcome.get_result()
    sandbox = item.stash.get(SANDBOX, None)
    if sandbox is not None and sandbox.output:
        report.sections.append(("student output", sandbox.output))
