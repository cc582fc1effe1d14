"""Write the first code cell of every chapter notebook: the Colab install cell.

    python tools/colab_cells.py [--check]          (or: make colab-cells)

The repository the notebooks install from is defined once, in _config.yml (`repository.url` and
`repository.branch`, which also drive the book's Colab/Binder/repository buttons). A fork or a
course's own repository changes it there and runs `make colab-cells`. Each cell keeps its own
EXTRAS line (the package extras that chapter imports, see pyproject.toml); tests/e2e/test_install.py
checks that they cover every import of the chapter.

The cell installs with subprocess.run(..., check=True), so a failed install stops the notebook
instead of letting it run on into an ImportError. Off Colab it does nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EXTRAS = "notebooks"
CELL = '''\
# On Colab, install what this chapter imports (everywhere else `make install` has done it).
# The repository comes from _config.yml (repository.url, repository.branch): change it there and
# run `make colab-cells` to rewrite this cell in every chapter.
import subprocess
import sys

if "google.colab" in sys.modules:
    REPOSITORY = "{url}"
    BRANCH = "{branch}"
    EXTRAS = "{extras}"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    f"llama-course[{{EXTRAS}}] @ git+{{REPOSITORY}}@{{BRANCH}}"], check=True)'''


def repository() -> tuple[str, str]:
    """(url, branch) from _config.yml."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return config["url"].rstrip("/"), config.get("branch", "main")


def notebooks() -> list[Path]:
    return sorted((REPO / "book").glob("ch[0-9][0-9]_*.ipynb"))


def first_code_cell(notebook: dict) -> dict:
    return next(c for c in notebook["cells"] if c["cell_type"] == "code")


def extras_of(source: str) -> str:
    match = re.search(r'^\s*EXTRAS = "([\w,-]*)"', source, re.M)
    return match[1] if match else DEFAULT_EXTRAS


def install_cell(extras: str) -> str:
    url, branch = repository()
    return CELL.format(url=url, branch=branch, extras=extras)


CLONE = re.compile(r"^!git clone --depth 1 --branch \S+ \S+ course$", re.M)


def clone_line() -> str:
    """The line of book/labs.md that clones the repository on Colab to grade there."""
    url, branch = repository()
    return f"!git clone --depth 1 --branch {branch} {url} course"


def sync(check: bool = False) -> list[Path]:
    """Rewrite (or, with check, only list) the notebooks whose install cell is not the current one,
    and book/labs.md if its clone line names another repository."""
    changed = []
    labs = REPO / "book" / "labs.md"
    text = labs.read_text(encoding="utf-8")
    if CLONE.search(text) and CLONE.sub(clone_line(), text) != text:
        changed.append(labs)
        if not check:
            labs.write_text(CLONE.sub(clone_line(), text), encoding="utf-8")
    for path in notebooks():
        text = path.read_text(encoding="utf-8")
        notebook = json.loads(text)
        cell = first_code_cell(notebook)
        wanted = install_cell(extras_of("".join(cell["source"])))
        if "".join(cell["source"]) == wanted:
            continue
        changed.append(path)
        if not check:
            cell["source"] = wanted.splitlines(keepends=True)
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list notebooks whose cell is out of date")
    args = parser.parse_args(argv)
    changed = sync(check=args.check)
    for path in changed:
        print(f"{'stale' if args.check else 'wrote'}: {path.relative_to(REPO)}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
