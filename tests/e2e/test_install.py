"""Installing the course, told truthfully: the Python floors, one place that installs torch, the
Colab cells and Binder covering what each notebook imports, the CI workflow that gates Pages."""
# instructor only: not in the student release

import ast
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from llama_course.grade.autograder import GRADING_PYTHON_FLOOR, grading_requirements, normalize

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import colab_cells  # noqa: E402

PYTHONS = [f"3.{minor}.{patch}" for minor in range(8, 15) for patch in range(0, 21)]


def pins(path: Path) -> dict[str, str]:
    """{normalized name: version} of a requirements file's exact pins."""
    lines = [line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return {normalize(name): version for name, version in (line.split("==") for line in lines if "==" in line)}


def floor(names) -> str:
    """The oldest Python (3.x.y) that every installed distribution of these names admits."""
    specs = [SpecifierSet(importlib.metadata.metadata(n).get("Requires-Python") or "") for n in names]
    return next(v for v in PYTHONS if all(s.contains(v) for s in specs))


def test_every_grading_pin_installs_on_the_python_setup_sh_accepts():
    grading = pins(REPO / "requirements-grade.txt")
    oldest = f"{GRADING_PYTHON_FLOOR}.0"  # setup.sh takes any Python of this minor version or later
    for name, version in grading.items():
        installed = importlib.metadata.version(name)
        assert installed == version, f"{name}: pinned {version}, installed {installed}"
        spec = SpecifierSet(importlib.metadata.metadata(name).get("Requires-Python") or "")
        for python in (oldest, "3.12.3"):  # the floor, and the deadsnakes Python setup.sh installs
            assert spec.contains(python), f"{name}=={version} needs Python {spec}, setup.sh may use {python}"
    # the floor is the true one: some pin needs it
    assert floor(grading) == oldest


def test_requirements_grade_is_the_closure_of_what_grading_needs_at_the_lock_versions():
    assert [f"{normalize(p.split('==')[0])}=={p.split('==')[1]}" for p in grading_requirements()] == \
        [f"{n}=={v}" for n, v in sorted(pins(REPO / "requirements-grade.txt").items())], "run `make lock`"
    lock, grading = pins(REPO / "requirements.lock"), pins(REPO / "requirements-grade.txt")
    assert all(lock.get(name) == version for name, version in grading.items())
    book_tooling = {"jupyter-book", "jupyterlab", "notebook", "playwright", "sphinx", "nbval", "matplotlib", "myst-nb",
                    "ipykernel", "sentencepiece", "hypothesis", "pytest-xdist"}
    assert not book_tooling & grading.keys()


def required_modules(tree: ast.AST) -> set[str]:
    """Top-level names of the modules a piece of code needs: its imports (not the ones in a
    `try/except ImportError`), importlib.util.find_spec("x") and pytest.importorskip("x")."""
    found = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.Try) and any(isinstance(h.type, ast.Name) and h.type.id in
                                             ("ImportError", "ModuleNotFoundError") for h in node.handlers):
            children = [c for c in children if c not in node.body]
        todo += children
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in \
                ("find_spec", "importorskip") and node.args and isinstance(node.args[0], ast.Constant):
            found.add(node.args[0].value)
    return {m.split(".")[0] for m in found} - set(sys.stdlib_module_names) - {"llama_course", "__future__"}


@functools.cache
def module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions(modules) -> set[str]:
    names = module_distributions()
    missing = [m for m in modules if m not in names]
    assert not missing, f"no installed distribution provides {missing}"
    return {normalize(names[m][0]) for m in modules}


def test_grading_imports_are_all_installed_by_setup_sh():
    files = [REPO / "tests" / "conftest.py", *(REPO / "llama_course" / "grade").glob("*.py"),
             *(REPO / "tests" / "graded").glob("*.py"), *(REPO / "tests" / "hidden").glob("*.py")]
    modules = set().union(*(required_modules(ast.parse(p.read_text(encoding="utf-8"))) for p in files))
    for path in (REPO / "llama_course").rglob("*.py"):  # what importing the package needs
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules |= required_modules(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import,
                                                                                             ast.ImportFrom))]))
    modules.discard("packaging")  # autograder.py needs it only for `make lock` (and pytest brings it)
    modules -= {"graded", "hidden"}  # the test folders themselves (tests/hidden imports graded._checks)
    needed = distributions(modules) - {"torch"}  # torch comes from tools/install_torch.sh
    assert needed <= pins(REPO / "requirements-grade.txt").keys()


def test_the_lock_floor_is_the_one_readme_makefile_and_pyproject_state():
    lock = pins(REPO / "requirements.lock")
    true_floor = floor(lock)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(rf"^PYTHON_FLOOR := {re.escape(true_floor)}$", makefile, re.M), true_floor
    readme = (REPO / "README.md").read_text()
    assert f"Python ≥ {true_floor}" in readme and "3.10" not in readme
    project = __import__("tomllib").loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r).name for r in project["dependencies"]]
    package_floor = floor([n for n in runtime if n != "torch"] + ["torch"])
    stated = SpecifierSet(project["requires-python"])
    assert next(v for v in PYTHONS if stated.contains(v)) == package_floor  # not lower than the pins allow
    assert package_floor <= true_floor


def test_pyproject_torch_floor_is_the_version_that_has_enable_gqa():
    """enable_gqa appeared in torch 2.5's scaled_dot_product_attention."""
    project = __import__("tomllib").loads((REPO / "pyproject.toml").read_text())["project"]
    torch_spec = next(Requirement(r).specifier for r in project["dependencies"] if Requirement(r).name == "torch")
    uses = any("enable_gqa" in p.read_text() for p in (REPO / "llama_course").rglob("*.py"))
    assert uses and not torch_spec.contains("2.4.1") and torch_spec.contains("2.5.0")


# ---------------------------------------------------------------------------------------------
# One place installs torch.

def test_torch_is_installed_in_one_place():
    script = REPO / "tools" / "install_torch.sh"
    assert re.search(r"^TORCH_VERSION=\d", script.read_text(), re.M)
    from llama_course.grade.autograder import SETUP_SH
    users = {"Makefile": (REPO / "Makefile").read_text(), "setup.sh": SETUP_SH,
             "binder/postBuild": (REPO / "binder" / "postBuild").read_text()}
    others = {p.relative_to(REPO).as_posix(): p.read_text() for p in
              [*(REPO / ".github" / "workflows").glob("*.yml"), REPO / ".ci" / "run", *(REPO / "binder").iterdir()]}
    for name, text in {**users, **others}.items():
        assert "download.pytorch.org" not in text and not re.search(r"torch==\d", text), name
    for name, text in users.items():
        assert "tools/install_torch.sh" in text, name
    makefile = users["Makefile"]
    assert re.search(r"^TORCH \?= auto$", makefile, re.M)
    assert re.search(r"^install-cuda:.*\n\tbash tools/install_torch.sh \$\(PY\) cuda$", makefile, re.M)


FAKE_PYTHON = '''#!{real}
import json, os, sys
state = os.environ["FAKE_STATE"]
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:1] == ["-c"]:
    build = open(state).read().strip() if os.path.exists(state) else ""
    if not build:
        sys.exit(1)
    print("2.13.0", build)
elif args[:3] == ["-m", "pip", "uninstall"]:
    os.remove(state)
elif args[:3] == ["-m", "pip", "install"] and "--index-url" in args:
    index = args[args.index("--index-url") + 1]
    with open(state, "w") as f:
        f.write(os.environ.get("FAKE_GIVES") or ("cpu" if "whl/cpu" in index or os.environ["FAKE_OS"] != "Linux"
                                                  else "cuda"))
'''


@pytest.mark.parametrize("case", [
    # (OS, GPU listed by nvidia-smi, installed build, asked, expected index or exit code, what pip gives)
    ("Linux", False, "", "auto", "https://download.pytorch.org/whl/cpu", None),
    ("Linux", True, "", "auto", "https://pypi.org/simple", None),
    ("Linux", True, "", "cpu", "https://download.pytorch.org/whl/cpu", None),
    ("Darwin", False, "", "auto", "https://pypi.org/simple", None),
    ("Darwin", False, "", "cuda", 2, None),
    ("Linux", False, "cpu", "cuda", "https://pypi.org/simple", None),  # install-cuda replaces the CPU build
    ("Linux", False, "cpu", "cpu", "nothing", None),  # already right: left alone
    ("Linux", False, "", "cuda", 1, "cpu"),  # asked for CUDA, got the CPU build: fails loudly
], ids=["linux-cpu", "linux-gpu", "linux-gpu-asks-cpu", "macos", "macos-cuda", "install-cuda", "no-op", "wrong-build"])
def test_install_torch_picks_the_build_and_checks_it(tmp_path, case):
    os_name, gpu, installed, asked, expected, gives = case
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "uname").write_text(f"#!/bin/sh\necho {os_name}\n")
    if gpu:
        (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100'\n")
    python = bin_ / "python"
    python.write_text(FAKE_PYTHON.format(real=sys.executable))
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    state, log = tmp_path / "torch", tmp_path / "log"
    if installed:
        state.write_text(installed)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "FAKE_STATE": str(state), "FAKE_LOG": str(log),
           "FAKE_OS": os_name, "FAKE_GIVES": gives or ""}
    if not gpu and shutil.which("nvidia-smi"):
        (bin_ / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")
        (bin_ / "nvidia-smi").chmod(0o755)
    run = subprocess.run(["bash", str(REPO / "tools" / "install_torch.sh"), str(python), asked], env=env,
                         capture_output=True, text=True, timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    installs = [c for c in calls if c[:3] == ["-m", "pip", "install"]]
    if isinstance(expected, int):
        assert run.returncode == expected, run.stdout + run.stderr
        return
    assert run.returncode == 0, run.stdout + run.stderr
    if expected == "nothing":
        assert installs == [] and "already installed" in run.stdout
        return
    # torch alone from the chosen index, then its dependencies from the default index (no --index-url)
    assert len(installs) == 2 and all("torch==2.13.0" in call for call in installs)
    assert "--no-deps" in installs[0] and installs[0][installs[0].index("--index-url") + 1] == expected
    assert "--index-url" not in installs[1] and "--no-deps" not in installs[1]
    assert any(c[:3] == ["-m", "pip", "uninstall"] for c in calls) == bool(installed)


# ---------------------------------------------------------------------------------------------
# The Makefile, the workflow.

def test_makefile_declares_phony_once_and_test_runs_lint():
    makefile = (REPO / "Makefile").read_text()
    assert len(re.findall(r"^\.PHONY:", makefile, re.M)) == 1
    assert re.search(r"^lint: ", makefile, re.M)
    prerequisites = re.search(r"^test: (.*)$", makefile, re.M)[1].split()
    assert "lint" in prerequisites
    phony = re.search(r"^\.PHONY:((?:[^\n]*\\\n)*[^\n]*)", makefile, re.M)[1].replace("\\\n", " ").split()
    targets = set(re.findall(r"^([a-z][\w-]*)::?(?!=)", makefile, re.M))
    assert targets <= set(phony), targets - set(phony)


def test_workflow_tests_every_push_and_pull_request_and_gates_pages():
    workflows = list((REPO / ".github" / "workflows").glob("*.yml"))
    assert len(workflows) == 1
    flow = yaml.safe_load(workflows[0].read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert on["push"]["branches"] == ["main"] and on["push"]["tags"] == ["v*"] and "pull_request" in on
    jobs = flow["jobs"]
    runs = {name for name, job in jobs.items() if any(".ci/run" in step.get("run", "") for step in job["steps"])}
    assert len(runs) == 1
    test = runs.pop()
    deploy = [name for name, job in jobs.items()
              if any("deploy-pages" in step.get("uses", "") for step in job["steps"])]
    assert len(deploy) == 1
    job = jobs[deploy[0]]
    needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
    assert test in needs and "pull_request" in job["if"]
    uploads = [s for s in jobs[test]["steps"] if "upload-pages-artifact" in s.get("uses", "")]
    assert uploads and uploads[0]["with"]["path"] == "_build/html"
    assert jobs[test]["env"]["TORCH"] == "cpu"


# ---------------------------------------------------------------------------------------------
# Colab and Binder: what each notebook imports is what its install brings.

KERNEL = {"IPython", "ipykernel"}  # every Jupyter kernel has them


def code_cells(path: Path) -> list[str]:
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    return ["\n".join(re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in "".join(c["source"]).splitlines())
            for c in cells]


@functools.cache
def package_lazy_imports() -> dict[str, set[str]]:
    """{function or method name of llama_course: modules it needs when called}, following calls
    inside the package (by name), imports inside functions, and find_spec("x")."""
    direct, calls = {}, {}
    for path in (REPO / "llama_course").rglob("*.py"):
        if "grade" in path.relative_to(REPO / "llama_course").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__"):
                direct.setdefault(node.name, set()).update(required_modules(node))
                calls.setdefault(node.name, set()).update(
                    getattr(c.func, "attr", getattr(c.func, "id", None)) for c in ast.walk(node)
                    if isinstance(c, ast.Call))
    needs = {name: set(mods) for name, mods in direct.items()}
    while True:
        grown = False
        for name, called in calls.items():
            new = set().union(*(needs.get(c, set()) for c in called if c != name)) - needs[name]
            if new:
                needs[name] |= new
                grown = True
        if not grown:
            return {name: mods for name, mods in needs.items() if mods}


def notebook_needs(path: Path) -> set[str]:
    """Distributions a notebook needs: its own imports (after the install cell) and what the
    package functions it uses import when called."""
    tree = ast.parse("\n".join(code_cells(path)[1:]))
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("llama_")
             for a in n.names}
    modules = required_modules(tree)
    lazy = package_lazy_imports()
    for name in (used - own) & lazy.keys():
        modules |= lazy[name]
    return distributions(modules - KERNEL)


def install_cell_requirements(source: str) -> set[str]:
    project = __import__("tomllib").loads((REPO / "pyproject.toml").read_text())["project"]
    names = {normalize(Requirement(r).name) for r in project["dependencies"]}
    for extra in filter(None, colab_cells.extras_of(source).split(",")):
        names |= {normalize(Requirement(r).name) for r in project["optional-dependencies"][extra]}
    return names


NOTEBOOKS = colab_cells.notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_colab_cell_installs_from_the_configured_repository_and_stops_on_failure(path):
    source = "".join(next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")["source"])
    assert source == colab_cells.install_cell(colab_cells.extras_of(source)), "run `make colab-cells`"
    url, branch = colab_cells.repository()
    config = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]
    assert f'REPOSITORY = "{config["url"]}"' in source and f'BRANCH = "{config["branch"]}"' in source
    assert (url, branch) == (config["url"], config["branch"])
    assert "%pip" not in source and "!pip" not in source
    runs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "run"]
    assert runs and all(any(k.arg == "check" and getattr(k.value, "value", None) is True for k in r.keywords)
                        for r in runs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_colab_cell_installs_what_the_chapter_imports(path):
    source = code_cells(path)[0]
    missing = notebook_needs(path) - install_cell_requirements(source)
    assert not missing, f"{path.name} imports {missing}, which its install cell (EXTRAS) does not install"


def test_the_coverage_check_catches_a_missing_extra(tmp_path):
    """Chapter 4 needs Llama 3's tokenizer (llama-models): without the llama3 extra it is caught."""
    path = REPO / "book" / "ch04_attention.ipynb"
    assert "llama-models" in notebook_needs(path)
    source = code_cells(path)[0]
    assert "llama-models" in install_cell_requirements(source)
    assert "llama-models" not in install_cell_requirements(source.replace(",llama3", ""))


def test_binder_installs_the_kernel_needs_and_leaves_the_server_alone():
    requirements = pins(REPO / "binder" / "requirements.txt")
    lock = pins(REPO / "requirements.lock")
    assert all(lock[name] == version for name, version in requirements.items())
    server = {"jupyterlab", "notebook", "jupyter-server", "tornado", "jupyter-core", "jupyterhub", "ipykernel",
              "nbclassic", "jupyter-client", "torch"}
    assert not server & requirements.keys()
    needs = set().union(*(notebook_needs(p) for p in NOTEBOOKS)) - {"torch", "llama-course"}
    assert needs <= requirements.keys(), needs - requirements.keys()
    post_build = (REPO / "binder" / "postBuild").read_text()
    assert "bash tools/install_torch.sh python cpu" in post_build
    assert re.search(r"pip install .*--no-deps -e \.", post_build) and "requirements.lock" not in post_build
    assert not (REPO / "binder" / "environment.yml").exists()  # repo2docker would prefer it to requirements.txt


def test_labs_page_says_how_to_grade_on_colab():
    labs = (REPO / "book" / "labs.md").read_text()
    url, branch = colab_cells.repository()
    assert f"!git clone --depth 1 --branch {branch} {url} course" in labs
    assert '!pip install --quiet -e ".[grade]"' in labs
    assert "!python -m llama_course.grade exercises/ --chapter" in labs
    project = __import__("tomllib").loads((REPO / "pyproject.toml").read_text())["project"]
    grade = {normalize(Requirement(r).name) for r in project["optional-dependencies"]["grade"]}
    modules = set().union(*(required_modules(ast.parse(p.read_text())) for p in
                            [*(REPO / "tests" / "graded").glob("*.py"), *(REPO / "llama_course" / "grade").glob("*.py"),
                             REPO / "tests" / "conftest.py"]))
    modules.discard("packaging")
    assert distributions(modules) - {"torch", "numpy", "regex"} <= grade
