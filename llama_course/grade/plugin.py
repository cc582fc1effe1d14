"""pytest plugin for graded tests: choose the implementation under test, give tests their points.

    pytest tests/graded --impl=solutions     the instructor's key (default)
    pytest tests/graded --impl=exercises     the student stubs
    pytest tests/graded --impl=PATH          any folder of chNN_*.py files
    pytest tests/graded --impl=package       the package's reference implementation
    ... --isolate                            run the implementation in a worker process per test
                                             (the grader always does; see llama_course.grade.sandbox)

A graded test file ``test_ch04_attention.py`` grades ``ch04_attention.py`` of the chosen folder
and receives it as the ``impl`` fixture. Each graded test carries its exercise's label, its weight
within the exercise (default 1), its kind ("practice", the default, or "homework") and the
exercises it relies on:

    @pytest.mark.graded("Exercise 4.6 multi_head_attention", weight=3, depends=("Exercise 4.3",))
    def test_multi_head_attention(impl): ...

Points are set per exercise in one table, llama_course.grade.points, and divided across the
exercise's tests by their weights (``graded_points``); a test's parametrized cases, the devices it
runs on among them, split its share, so an exercise's total does not depend on how its tests
are written.

With --isolate, an exercise earns nothing when the student's file takes the package's own answer
to it (``reference_names``): statically (imports and attribute access in the file) and at run time
(the worker records calls of those package functions made on the student's behalf, copies made
with exec included); and a file earns nothing when it imports beyond the standard library, torch,
numpy, regex, the package and the student's own files (llama_course.grade.rules, which also keeps
transformers out of the worker and autograd out of "by hand" exercises).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from llama_course.device import available_devices
from llama_course.grade.points import PointsError, item_points
from llama_course.grade.rules import VIOLATION, file_problems, worker_rules
from llama_course.grade.rules import message as rules_message

REPO = Path(__file__).resolve().parents[2]
_NAMED = {"solutions": REPO / "solutions", "exercises": REPO / "exercises"}
SANDBOX = pytest.StashKey()
_GIVEN_UP = pytest.StashKey()  # {path: why} files whose import hung; {(path, label): {function}} that hung
_USES = pytest.StashKey()      # {path: package_uses(file)}
KINDS = ("practice", "homework")
_FILE_RULE = "<the import rule>"  # key in _USES: why the whole file earns nothing (llama_course.grade.rules)

# Package names that answer an exercise besides the one named like its function (Exercise 4.1
# softmax -> the package's softmax). "Class.method" names one method; a class name, all of them.
REFERENCES = {
    "count_parameters": ("Llama", "LlamaBlock"),
    "encode": ("BPETokenizer.encode", "BPETokenizer.encode_iterable", "llama3_tokenizer"),
    "decode": ("BPETokenizer.decode", "BPETokenizer.decode_bytes"),
    "rms_norm": ("RMSNorm",),
    "pre_norm_residual": ("LlamaBlock",),
    "scaled_dot_product_attention": ("Attention",),
    "multi_head_attention": ("Attention",),
    "rope_inv_freq": ("RotaryEmbedding",),  # rope_cos_sin is allowed: the key uses it for 5.2 and 5.3
    "apply_rope": ("RotaryEmbedding",),
    "interleaved_to_half": ("half_to_interleaved",),
    "swiglu": ("SwiGLU",),
    "llama_block": ("LlamaBlock", "Llama"),
    "llama_forward": ("Llama", "LlamaBlock"),
    "hf_to_course_names": ("hf_to_course_name", "load_hf"),
    "decode_step": ("generate", "stream_generate"),
    "greedy_generate": ("generate", "stream_generate"),
    "top_p_filter": ("sample_next",),
    "kv_cache_bytes": ("KVCache.nbytes", "decode_bytes"),
    "gqa_attention": ("Attention",),
    "route_topk": ("MoE",),
    "moe_forward": ("MoE",),
}


def pytest_addoption(parser):
    group = parser.getgroup("llama_course", "graded exercises")
    group.addoption("--impl", default="solutions",
                    help="implementation to grade: solutions (default), exercises, package, or a folder path")
    group.addoption("--isolate", action="store_true",
                    help="run the implementation in a separate worker process for each test")
    group.addoption("--impl-timeout", type=float, default=60.0,
                    help="seconds each test may spend in the implementation (with --isolate)")
    group.addoption("--sandbox-uid", type=int, default=None, help="with --isolate: run workers as this user id")
    group.addoption("--sandbox-gid", type=int, default=None, help="with --isolate: ... and this group id")
    group.addoption("--sandbox-hide", action="append", default=[], help="with --isolate: path hidden from workers")
    group.addoption("--sandbox-move", action="append", default=[],
                    help="with --isolate: FOLDER:COPY, workers import from COPY instead of FOLDER")
    group.addoption("--memory-limit", type=int, default=None, help="with --isolate: bytes of memory per worker")
    group.addoption("--sandbox-offline", action="store_true", help="with --isolate: workers get no network")
    group.addoption("--sandbox-cgroup", default="", help="with --isolate: a pids cgroup workers join")


def pytest_configure(config):
    config.addinivalue_line("markers", "graded(exercise, weight=1, kind='practice', depends=()): a graded test "
                                       "of `exercise`, its weight among the exercise's tests (the points are "
                                       "the exercise's, set in llama_course.grade.points)")
    config.stash[_GIVEN_UP] = {}
    config.stash[_USES] = {}


@dataclass(frozen=True)
class Graded:
    """What a graded test's marker says."""

    label: str
    weight: float = 1.0
    kind: str = "practice"
    depends: tuple[str, ...] = ()

    @property
    def function(self) -> str:
        """The exercise's function: "Exercise 8.1 KVCache.update" -> "KVCache.update"."""
        words = self.label.split()
        return words[2] if len(words) > 2 else ""


def graded_marker(item) -> Graded | None:
    """The ``graded`` marker of a test item, checked; None for an ungraded test."""
    marker = item.get_closest_marker("graded")
    if marker is None:
        return None
    if "points" in marker.kwargs:  # the marker's old keyword: the points are now the table's
        raise pytest.UsageError(f"{item.nodeid}: graded(..., points=) is gone; write weight= (the test's share of "
                                f"its exercise's points, which are set in llama_course/grade/points.py)")
    return _graded(*marker.args, **marker.kwargs)


def _graded(exercise: str, weight: float = 1, kind: str = "practice", depends=()) -> Graded:
    if kind not in KINDS:
        raise pytest.UsageError(f"graded({exercise!r}): kind must be one of {KINDS}, got {kind!r}")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise pytest.UsageError(f"graded({exercise!r}): weight must be a positive number, got {weight!r}")
    return Graded(exercise, float(weight), kind, tuple([depends] if isinstance(depends, str) else depends))


def graded_points(items) -> dict[str, float]:
    """{nodeid: points} of the graded items among ``items``: each exercise's points from the table
    (llama_course.grade.points), divided across its tests by weight, a test's share split equally
    across its cases. A test of an exercise not in the table, or disagreeing with it, stops
    collection with a UsageError that says what to fix."""
    try:
        return item_points(items, graded_marker)
    except PointsError as error:
        raise pytest.UsageError(str(error)) from None


def reference_names(label: str) -> tuple[str, ...]:
    """Package names whose use answers the exercise ``label`` for the student."""
    function = Graded(label).function
    names = [function, *REFERENCES.get(function, ())]
    if "." in function:
        names.append(function.split(".")[0])
    return tuple(dict.fromkeys(n for n in names if n))




@pytest.fixture(params=available_devices())
def device(request) -> torch.device:
    """Parametrizes a test over the CPU and every available accelerator (its cases split the
    test's points, so the total does not depend on the machine: graded_points)."""
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
        pytest.fail(f"{path.name} does not exist in the folder graded", pytrace=False)
    if request.config.getoption("--isolate"):
        return _sandboxed(request, path)
    spec = importlib.util.spec_from_file_location(f"_impl_{folder.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def _sandboxed(request, path: Path):
    """A worker serving ``path`` for this test, unless the file or the exercise already hung, or
    the file takes the package's answer to the exercise."""
    from llama_course.grade.sandbox import MEMORY_LIMIT, Confinement, Sandbox

    config, graded = request.config, graded_marker(request.node)
    given_up = config.stash[_GIVEN_UP]
    label = graded.label if graded else ""
    if str(path) in given_up:
        pytest.fail(given_up[str(path)], pytrace=False)
    watch = reference_names(label) + worker_rules(label) if graded else ()
    _check_imports(config, path, watch)
    memory = config.getoption("--memory-limit")
    confinement = Confinement(config.getoption("--sandbox-uid"), config.getoption("--sandbox-gid"),
                              tuple(config.getoption("--sandbox-hide")), MEMORY_LIMIT if memory is None else memory,
                              tuple(tuple(move.rsplit(":", 1)) for move in config.getoption("--sandbox-move")),
                              config.getoption("--sandbox-offline"), config.getoption("--sandbox-cgroup"))
    sandbox = Sandbox(path, timeout=config.getoption("--impl-timeout"), confinement=confinement, watch=watch,
                      hung=given_up.setdefault((str(path), label), set()))
    request.addfinalizer(sandbox.close)
    request.node.stash[SANDBOX] = sandbox
    return sandbox.module


def _check_imports(config, path: Path, watch: tuple[str, ...]) -> None:
    uses = config.stash[_USES]
    if str(path) not in uses:
        try:
            uses[str(path)] = package_uses(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            uses[str(path)] = {}  # the worker reports it, with its line number
        problems = file_problems(path)  # imports outside what a submission may import: the whole file
        if problems:
            uses[str(path)][_FILE_RULE] = rules_message(path.name, problems)
    if _FILE_RULE in uses[str(path)]:
        pytest.fail(uses[str(path)][_FILE_RULE], pytrace=False)
    for name in watch:
        if name in uses[str(path)]:
            pytest.fail(_reference_message(name, f"{path.name}, {uses[str(path)][name]}"), pytrace=False)


def _reference_message(name: str, where: str) -> str:
    return (f"no points: your code uses the package's own {name} ({where}), which answers this exercise. "
            f"An exercise earns points only for your own implementation; the package's other parts "
            f"(e.g. LlamaConfig) stay allowed.")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """After the test: fail it if the worker saw the student's code run the package's answer."""
    try:
        return (yield)
    finally:
        sandbox = pyfuncitem.stash.get(SANDBOX, None)
        if sandbox is not None and sandbox.touched:
            from llama_course.grade.sandbox import TAMPERED

            if TAMPERED in sandbox.touched:
                pytest.fail("no points: your code replaced the grader's call watcher (sys.setprofile, "
                            "sys.settrace or threading.setprofile)", pytrace=False)
            broken = [t.removeprefix(VIOLATION) for t in sandbox.touched if t.startswith(VIOLATION)]
            if broken:
                pytest.fail(f"no points: {'; '.join(broken)}", pytrace=False)
            pytest.fail(_reference_message(sandbox.touched[0], "called while this test ran"), pytrace=False)


# --------------------------------------------------------------------------------------------
# What a student file takes from the package (static check)
# --------------------------------------------------------------------------------------------

def _is_package(name: str) -> bool:
    return name == "llama_course" or name.startswith("llama_course.")


def _dynamic_import(node) -> str | None:
    """The module string of importlib.import_module("...") / __import__("...") calls, else None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    arg = node.args[0]
    if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return "?" if name in ("import_module", "__import__") else None


def package_uses(source: str) -> dict[str, str]:
    """Names a student file takes from llama_course, each with the line that takes it:
    ``from llama_course.attention import softmax`` -> {"softmax": "line 3: from ..."}. Covers
    ``import ... as a; a.softmax``, ``getattr(a, "softmax")``, star imports, importlib and
    __import__ (a dynamic import of the package also counts every identifier-like string)."""
    tree, lines, uses = ast.parse(source), source.splitlines(), {}

    def note(name: str, node) -> None:
        uses.setdefault(name, f"line {node.lineno}: {lines[node.lineno - 1].strip()}")

    modules, names, dynamic = _package_aliases(tree, note)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, root = _attribute_chain(node)
            if isinstance(root, ast.Name) and root.id in modules:
                for attr in chain:
                    note(attr, node)
            elif isinstance(root, ast.Name) and root.id in names and chain:
                note(f"{names[root.id]}.{chain[0]}", node)
            elif _dynamic_import(root) not in (None, "?") and _is_package(_dynamic_import(root)):
                for attr in chain:
                    note(attr, node)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) >= 2:
            target, attr = node.args[0], node.args[1]
            if isinstance(target, ast.Name) and target.id in modules and isinstance(attr, ast.Constant):
                note(str(attr.value), node)
    if dynamic:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                note(node.value, dynamic)
    return uses


def _package_aliases(tree, note):
    """Local names bound to package modules, local names of package objects, and the first dynamic
    import of the package (or of an unknown module); imported names are noted on the way."""
    modules, names, dynamic = set(), {}, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_package(alias.name):
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_package(node.module or ""):
            for alias in node.names:
                for name in (_public_names(node.module) if alias.name == "*" else [alias.name]):
                    note(name, node)
                local = alias.asname or alias.name
                if alias.name != "*" and _is_module(f"{node.module}.{alias.name}"):
                    modules.add(local)
                else:
                    names[local] = alias.name
        elif isinstance(node, ast.Assign) and _dynamic_import(node.value) is not None:
            modules.update(t.id for t in node.targets if isinstance(t, ast.Name))
        module = _dynamic_import(node)
        if module is not None and (module == "?" or _is_package(module)) and dynamic is None:
            dynamic = node
    return modules, names, dynamic


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _attribute_chain(node):
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    return chain[::-1], node


def _public_names(module: str) -> list[str]:
    try:
        return [n for n in dir(importlib.import_module(module)) if not n.startswith("_")]
    except ImportError:
        return []


@pytest.fixture
def impl_source(request):
    """A function giving the source text of one function of the implementation under test, read
    from its file (the student's code is never imported by the grader to get it). With several
    definitions of the name, the last one (the one Python keeps)."""
    import inspect

    folder = impl_folder(request.config)

    def source(name: str) -> str:
        if folder is None:
            return inspect.getsource(getattr(PackageImpl(getattr(request.module, "PACKAGE_MODULES",
                                                                 ["llama_course"])), name))
        text = (folder / f"{_module_name(request)}.py").read_text(encoding="utf-8")
        found = [node for node in ast.parse(text).body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name]
        if not found:
            pytest.fail(f"no function {name} at the top level of the file", pytrace=False)
        return ast.get_source_segment(text, found[-1])

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
    """Attach the student's captured output to the report (the grader shows it); remember a file
    whose import hung and an exercise whose code hung, so that their other tests fail at once."""
    outcome = yield
    report = outcome.get_result()
    sandbox = item.stash.get(SANDBOX, None)
    if sandbox is None or report.when != "call":
        return
    if sandbox.output:
        report.sections.append(("student output", sandbox.output))
    graded = graded_marker(item)
    given_up = item.config.stash[_GIVEN_UP]
    if sandbox.import_timed_out:
        given_up[str(sandbox.path)] = f"not run: importing {sandbox.path.name} timed out in an earlier test"
    elif sandbox.timed_out and graded is not None and sandbox.last_name:
        given_up.setdefault((str(sandbox.path), graded.label), set()).add(sandbox.last_name)
