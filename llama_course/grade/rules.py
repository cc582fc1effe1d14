"""Grading rules: an exercise earns nothing from an implementation that answers it.

A submitted chNN_*.py may import only the standard library, torch (with functorch), numpy and regex
(the course package's own dependencies), the course package ``llama_course`` (whose functions that
answer the exercise under test cost that test its points: plugin.reference_names) and the
student's own files. Three layers:

Static (``file_problems``, in the grader before any student code runs). Every ``import`` and
``from ... import`` of the file, and every ``importlib.import_module("name")`` or
``__import__("name")`` with a constant name, is checked against that list. A file that breaks it
earns nothing on any of its graded tests, practice or homework: the grader cannot tell which
function the import serves.

Run time (``Guard``, in the worker that runs the student's file; it extends the sandbox's call
watcher). An audit hook (``sys.addaudithook``: it cannot be removed) refuses, for the whole life
of the worker, to import the packages that answer exercises (ANSWERING: transformers, tokenizers,
tiktoken, ...) or to open any file inside them (their source, a ``spec_from_file_location``).
The graded tests' own oracles run in the grader's process and import them freely. The call
watcher also recognises the package's answering functions by their bytecode (not only by
identity), so a copy made with ``exec``/``compile`` of the package's source, ``marshal`` or
``code.replace`` costs the test its points when it runs, unless the same code is in the student's
own files (a function typed by hand that happens to match the book's is the student's).

By hand (``BY_HAND``: Homework 3.A, 6.A, whose statements say "by hand, no autograd"). In their
tests the worker runs with grad mode off, and turning it on (``torch.enable_grad``,
``set_grad_enabled(True)``), running the autograd engine (``backward``, ``autograd.grad``,
``torch.func``) or starting a thread or a process (where the watcher cannot follow) costs the test
its points and raises.

What a worker's in-process guard cannot stop: code that rewrites the interpreter itself (ctypes)
or digs the guard out of memory (gc) to disarm it. That takes deliberate work against the grader.
"""

from __future__ import annotations

import ast
import os
import sys
import threading
import types
from pathlib import Path

from . import sandbox

ALLOWED = ("torch", "functorch", "numpy", "regex", "llama_course")  # besides the standard library and own files
ANSWERING = ("transformers", "tokenizers", "tiktoken", "llama_models", "sentencepiece", "xformers", "flash_attn",
             "vllm")  # never importable in a worker (safetensors stays: the package's checkpoint loader uses it)
BY_HAND = ("Homework 3.A", "Homework 6.A")  # "the backward pass ... by hand (no autograd)"
BY_HAND_TOKEN = "rule:by-hand"               # travels with the watched names (no package name has a colon)
VIOLATION = "rule: "                         # prefix of what the worker reports beside the names it saw used
PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "subprocess.Popen",
                  "pty.spawn")

# --------------------------------------------------------------------------------------------
# Static check (the grader)
# --------------------------------------------------------------------------------------------


def own_modules(folder: Path) -> set[str]:
    """Module names the student's own files give: a.py -> a, a package folder b/ -> b."""
    return {p.stem if p.suffix == ".py" else p.name for p in folder.iterdir()
            if p.suffix == ".py" or (p / "__init__.py").is_file()}


def allowed(module: str, own: set[str]) -> bool:
    top = module.partition(".")[0]
    return top in sys.stdlib_module_names or top in ALLOWED or top in own


def source_problems(source: str, own: set[str]) -> list[str]:
    """'line N: <the line>: why' for each import of ``source`` outside the allowed list."""
    from .plugin import _dynamic_import

    tree, lines, problems = ast.parse(source), source.splitlines(), []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif _dynamic_import(node) not in (None, "?"):
            names = [_dynamic_import(node)]
        for name in names:
            if not allowed(name, own):
                problems.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()}: imports "
                                f"{name.partition('.')[0]}")
    return problems


def file_problems(path: Path) -> list[str]:
    """The rule's problems with a submitted file (its folder holds the student's own files)."""
    try:
        return source_problems(path.read_text(encoding="utf-8", errors="replace"), own_modules(path.parent))
    except SyntaxError:
        return []  # the worker reports it, with its line number


def message(filename: str, problems: list[str]) -> str:
    return (f"no points for anything in {filename}: {'; '.join(problems)}. A submitted file may import only "
            f"the standard library, {', '.join(ALLOWED[:-1])}, the course package (not its answers) and "
            f"your own files.")


def worker_rules(label: str) -> tuple[str, ...]:
    """The rule tokens a test of exercise ``label`` passes to its worker with the watched names."""
    return (BY_HAND_TOKEN,) if label.startswith(BY_HAND) else ()


# --------------------------------------------------------------------------------------------
# Run time (the worker)
# --------------------------------------------------------------------------------------------


def fingerprint(code: types.CodeType) -> tuple:
    """What a function's code does, whatever it and its locals are called and whatever its
    docstring, file and line numbers: bytecode, global and attribute names, other constants
    (co_consts[0] is a function's docstring or None), nested code likewise."""
    consts = tuple(fingerprint(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts[1:])
    return code.co_code, code.co_names, code.co_argcount, code.co_kwonlyargcount, consts


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


class Guard(sandbox._Watcher):
    """The sandbox's call watcher plus the grading rules, armed before the student's file is
    imported. ``report()`` adds each broken rule as ``VIOLATION + why``."""

    def __init__(self, watch: tuple[str, ...], path: str):
        import torch

        for name in sandbox._teaching_modules():  # loaded before the watcher indexes them (spawn too)
            __import__(name)
        self.violations: list[str] = []
        self.copies: dict[tuple, str] = {}   # fingerprint -> watched name (set below; the hook runs already)
        self.checked: dict[int, tuple] = {}  # id(code) -> (code, name or None): each code looked at once
        self.by_hand = False
        super().__init__(tuple(w for w in watch if not w.startswith("rule:")))
        own = _own_fingerprints(Path(path).parent)
        copies = {fp: name for fp, name in self._watched_fingerprints().items() if fp not in own}
        if BY_HAND_TOKEN in watch:
            self._engine = type(torch.autograd.variable.Variable._execution_engine)
            self._set_grad, self._grad_enabled = torch._C._set_grad_enabled, torch.is_grad_enabled
            self._starts = {id(f) for f in (getattr(sys.modules["_thread"], n, None) for n in
                                             ("start_new_thread", "start_new", "start_joinable_thread")) if f}
            torch.set_grad_enabled(False)
        self.copies, self.by_hand = copies, BY_HAND_TOKEN in watch
        if (self.copies or self.by_hand) and sys.getprofile() is not getattr(self, "hook", None):
            self.hook = self._profile
            sys.setprofile(self.hook)
            threading.setprofile(self.hook)
        sys.addaudithook(_audit_hook(self.violations, self.by_hand))

    def _watched_fingerprints(self) -> dict[tuple, str]:
        found = {}
        for module in sandbox._loaded_teaching_modules():
            for name, value in vars(module).items():
                if getattr(value, "__module__", None) != module.__name__:
                    continue
                for qualname, code in sandbox._codes_of(name, value):
                    entry = self.watched.get(id(code))
                    if entry is not None and code.co_name == qualname.rpartition(".")[2]:
                        found[fingerprint(code)] = entry
        return found

    def _profile(self, frame, event, arg):
        super()._profile(frame, event, arg)
        if event == "call" and self.copies:
            self._check_copy(frame)
        elif self.by_hand and event in ("c_call", "c_return"):
            self._check_by_hand(event, arg)

    def _check_copy(self, frame) -> None:
        code = frame.f_code
        seen = self.checked.get(id(code))
        if seen is None:
            copy = None if id(code) in self.package else self.copies.get(fingerprint(code))
            seen = self.checked[id(code)] = (code, copy)
        if seen[1] is not None and seen[1] not in self.touched and self._for_student(frame.f_back):
            self.touched.append(seen[1])

    def _check_by_hand(self, event: str, arg) -> None:
        if event == "c_return":
            if arg is self._set_grad and self._grad_enabled():
                self._refuse("turned autograd on (torch.enable_grad or set_grad_enabled(True))")
        elif getattr(arg, "__name__", "") == "run_backward" and isinstance(getattr(arg, "__self__", None),
                                                                            self._engine):
            self._refuse("ran autograd's backward pass (backward, torch.autograd.grad, torch.func)")
        elif getattr(arg, "__name__", "") == "_grad_increment_nesting":
            self._refuse("used torch.func's gradient transforms")
        elif id(arg) in self._starts:
            self._refuse("started a thread, where the grader cannot watch for autograd")

    def _refuse(self, what: str) -> None:
        why = f"{VIOLATION}your code {what} in an exercise to be done by hand, without autograd"
        if why not in self.violations:
            self.violations.append(why)

    def report(self) -> list[str]:
        if getattr(self, "hook", None) == self._profile and threading._profile_hook is not self.hook:
            self._tampered()
        if self.by_hand and self._grad_enabled():  # switched on where the watcher could not see it
            self._refuse("left autograd on")
        return super().report() + [v for v in self.violations if v not in self.touched]


def _own_fingerprints(folder: Path) -> set[tuple]:
    """Fingerprints of every function in the student's own files (compiled, never run)."""
    found = set()
    for path in folder.rglob("*.py"):
        try:
            module = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError, OSError):
            continue
        found.update(fingerprint(code) for code in _codes(module) if code is not module)
    return found


def _answering_folders() -> dict[str, str]:
    """{folder or file of an ANSWERING package: its name} for those installed."""
    import importlib.util

    folders = {}
    for name in ANSWERING:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            folders[os.path.realpath(folder) + os.sep] = name
        if spec and spec.origin and not spec.submodule_search_locations:
            folders[os.path.realpath(spec.origin)] = name
    return folders


def _audit_hook(violations: list[str], by_hand: bool):
    """An audit hook refusing the ANSWERING packages (imports, and opening their files) and, in a
    by-hand exercise, new processes. Its settings are closed over (immutable)."""
    where, answering = _answering_folders(), frozenset(ANSWERING)
    folders = tuple(where)
    refused_message = ("{} cannot be used here: a submitted file may import only the standard library, "
                       + ", ".join(ALLOWED[:-1]) + ", the course package (not its answers) and your own files")

    def refuse(what: str, error=ImportError):
        why = f"{VIOLATION}your code tried to use {what}, which answers exercises"
        if why not in violations:
            violations.append(why)
        raise error(refused_message.format(what))

    def hook(event, args):
        if event == "import" and isinstance(args[0], str) and args[0].partition(".")[0] in answering:
            refuse(args[0].partition(".")[0])
        elif event == "open" and folders and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path.startswith(folders) or path + os.sep in folders:
                name = next(where[f] for f in folders if path.startswith(f) or path + os.sep == f)
                refuse(f"{name} (reading {path})", PermissionError)
        elif by_hand and event in PROCESS_EVENTS:
            why = f"{VIOLATION}your code started a process ({event}) in an exercise to be done by hand"
            if why not in violations:
                violations.append(why)
            raise PermissionError("no new processes in an exercise to be done by hand")

    return hook
