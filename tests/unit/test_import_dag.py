"""The package's imports flow one way: down the layers below, never up, and never in a cycle.

Every ``import`` and ``from ... import`` of every module is read with ``ast`` -- at the top of the
file, inside functions, under ``if TYPE_CHECKING`` alike -- so a cycle cannot hide in a
function-level import. The layering is the book's order (llama_course/__init__.py says the same):
a module may import from its own layer and the layers before it.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "llama_course"

LAYERS = [
    ("foundations", {"checks", "device", "config", "linear", "utils", "data"}),
    ("layers", {"loss", "tokenizer", "embedding", "norm", "attention", "rope", "ffn", "gqa", "moe", "kv_cache",
                "sliding_window", "mla", "deepseek_moe"}),
    ("model", {"model"}),
    ("using the model", {"checkpoint", "generate", "cost", "plots", "train", "your_llama"}),
    ("parallel", {"parallel"}),
    # the program `python -m llama_course.train`: Chapter 11's command line with Chapter 13's processes
    ("programs", {"train.__main__"}),
    ("tools", {"grade"}),
]
# Modules placed apart from their package (the rest of a package is one unit, its top-level name).
PLACED_APART = set().union(*(s for _, s in LAYERS)) - {m for _, s in LAYERS for m in s if "." not in m}
# Upward edges still to remove, each with the work that removes it. The test fails if one is gone
# too, so that its entry is deleted with it.
PENDING: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    """llama_course/tokenizer/bpe.py -> "tokenizer.bpe"; a package's __init__.py -> the package."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """The package's modules that ``name``'s source imports anywhere in the file ("" = the package)."""
    here = name.split(".") if name else []
    package = here if is_package else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
            elif node.module and (node.module + ".").startswith("llama_course."):
                base, node_module = [], node.module.split(".", 1)[1] if "." in node.module else ""
                targets = [node_module] if node_module else [a.name for a in node.names]
                found.update(targets)
                continue
            else:
                continue
            if node.module:
                found.add(".".join(base + node.module.split(".")))
            else:                                   # from . import distributed
                found.update(".".join(base + [a.name]) for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("llama_course."))
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules it imports (within the package)."""
    edges = {}
    for path in sorted(package.rglob("*.py")):
        name = module_name(path)
        edges[name] = imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py")
    return edges


def unit(module: str) -> str:
    """The unit a module belongs to: its top-level package ("tokenizer.bpe" -> "tokenizer"), unless
    LAYERS places it apart ("train.__main__")."""
    return module if module in PLACED_APART else module.split(".")[0]


def layer_of(module: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        if unit(module) in members:
            return i
    raise KeyError(module)


def upward_edges(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) pairs of top-level units where the imported one sits in a later layer.
    The package's own __init__.py (the front door, re-exporting every chapter) is not layered."""
    return {(unit(a), unit(b)) for a, targets in edges.items() if a for b in targets
            if b and layer_of(b) > layer_of(a)}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def book_graph() -> dict[str, set[str]]:
    """The book's modules (grade/, the grader, is item 6's to split: its internal imports are not
    checked here, only that no book module imports it) without the package's __init__.py."""
    return {a: {b for b in targets if b and not b.startswith("grade")}
            for a, targets in graph().items() if a and not a.startswith("grade")}


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in graph() if m and unit(m) not in set().union(*(s for _, s in LAYERS)))
    assert not unplaced, f"modules without a layer in LAYERS (place them, and in __init__.py's map): {unplaced}"


def test_imports_only_go_down_the_layers():
    upward = upward_edges(graph())
    new = {edge: f"{edge[0]} ({LAYERS[layer_of(edge[0])][0]}) imports {edge[1]} ({LAYERS[layer_of(edge[1])][0]})"
           for edge in upward - set(PENDING)}
    assert not new, "imports going up the layers:\n" + "\n".join(new.values())
    done = set(PENDING) - upward
    assert not done, f"no longer imported upward: delete {sorted(done)} from PENDING"


def test_the_imports_have_no_cycle():
    edges = book_graph()
    for a, b in PENDING:                               # the pending upward edges close their cycles
        edges = {m: {t for t in ts if not (unit(m) == a and unit(t) == b)} for m, ts in edges.items()}
    cycle = find_cycle(edges)
    assert cycle is None, "an import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_function_level_imports_and_cycles():
    # oracle: a hand-written module whose only upward import is inside a function
    source = "from .checks import check_int\n\ndef load():\n    from .model import Llama\n    return Llama\n"
    edges = {"kv_cache": imported(ast.parse(source), "kv_cache", False), "model": {"kv_cache"}}
    assert edges["kv_cache"] == {"checks", "model"}
    assert upward_edges(edges) == {("kv_cache", "model")}
    assert find_cycle(edges) in (["kv_cache", "model", "kv_cache"], ["model", "kv_cache", "model"])
    assert imported(ast.parse("from . import distributed\nimport llama_course.model\n"), "train", False) == \
        {"distributed", "model"}
    with pytest.raises(KeyError):
        layer_of("no_such_module")


def test_only_the_program_joins_chapter_11_to_chapter_13():
    # oracle: hand-written edges; Chapter 11's loop importing Chapter 13 is upward, the program is not
    edges = {"train.loop": {"parallel.processes"}, "train.__main__": {"parallel.launch", "train.cli"},
             "parallel.processes": {"train.world"}}
    assert upward_edges(edges) == {("train", "parallel")}
    real = graph()
    assert {unit(b) for b in real["train.__main__"]} == {"parallel"}
    assert not {b for a, targets in real.items() if unit(a) == "train" for b in targets
                if b.startswith("parallel")}, "a module of train/ other than __main__ imports parallel/"
