"""Build the Gradescope autograder zip from the same graded tests the course runs.

    python -m llama_course.grade.autograder --out _build/autograder.zip      (or: make autograder)

Gradescope unpacks the zip into /autograder/source, runs setup.sh once to build the image, and
runs run_autograder for each submission: the student's chNN_*.py files (at the top of the
submission, or in an exercises/ folder) are graded and /autograder/results/results.json written.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

from .plugin import REPO

CONTENTS = ["pyproject.toml", "requirements.lock", "README.md", "llama_course", "tests/conftest.py", "tests/graded"]

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope image set-up (Ubuntu base image, run once as root, network available).
set -euo pipefail
cd /autograder/source
apt-get update
apt-get install -y --no-install-recommends python3.11 python3.11-venv
python3.11 -m venv /autograder/venv
PIP="/autograder/venv/bin/python -m pip install --quiet"
$PIP torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu   # CPU build, pinned, first
$PIP -r requirements.lock
$PIP --no-deps --no-build-isolation -e .
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Grade one submission. AUTOGRADER_ROOT / AUTOGRADER_PYTHON let you try it outside Gradescope.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
SUBMISSION="$ROOT/submission"
if [ -d "$SUBMISSION/exercises" ]; then SUBMISSION="$SUBMISSION/exercises"; fi
mkdir -p "$ROOT/results"
cd "$ROOT/source"
export PYTHONPATH="$ROOT/source${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -m llama_course.grade "$SUBMISSION" --tests "$ROOT/source/tests/graded" \\
    --out "$ROOT/results/results.json"
"""


def build(out: Path) -> Path:
    """Write the autograder zip; returns its path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # executable
            archive.writestr(info, text)
        for entry in CONTENTS:
            root = REPO / entry
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
            for path in files:
                if "__pycache__" not in path.parts and path.suffix != ".pyc":
                    archive.write(path, path.relative_to(REPO).as_posix())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade.autograder", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("_build/autograder.zip"))
    args = parser.parse_args(argv)
    print(f"wrote {build(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
