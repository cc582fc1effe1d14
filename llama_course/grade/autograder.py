"""Build the Gradescope autograder zip for one assignment from the same tests the course runs.

    python -m llama_course.grade.autograder [--chapter N ...] [--out ZIP]     (or: make autograder CHAPTERS=4)

One zip is one assignment: the graded tests (public checks) and the hidden tests (tests/hidden,
when the instructor's tree has them) of the chosen chapters, so the assignment's total is those
chapters' points. With no --chapter, every chapter. Gradescope unpacks the zip into
/autograder/source, runs setup.sh once to build the image (a Python that satisfies
requirements-grade.txt, the CPU build of torch, and only what grading needs), then runs
run_autograder for each submission: the student's chNN_*.py files, found at any depth of the
upload (loose files, a folder, exercises/, a zip inside), are graded and
/autograder/results/results.json written.

    python -m llama_course.grade.autograder --capstone [--out ZIP]             (or: make autograder CAPSTONE=1)

The capstone (Chapter 14) is an assignment of its own: its zip holds the package (the capstone's
grader and the course corpus included) and the capstone's hidden tests, no chapter's tests; its
run_autograder runs `python -m llama_course.grade capstone --upload --gradescope`, the student's
code in the grader's sandbox, and writes one row per check (100 points).

    python -m llama_course.grade.autograder --requirements       the pins of requirements-grade.txt
    python -m llama_course.grade.autograder --collect SRC DEST   copy a submission's files to DEST
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from .plugin import REPO

# What grading imports (tests/conftest.py, tests/graded, tests/hidden, llama_course.grade) besides
# torch, which tools/install_torch.sh installs; requirements-grade.txt pins these and everything
# they need, at the versions of requirements.lock (`make lock` writes it).
GRADING_PACKAGES = ["numpy", "regex", "pytest", "pytest-timeout", "transformers", "safetensors", "tiktoken",
                    "llama-models"]
# The oldest Python that every pin of requirements-grade.txt installs on (tests/e2e/test_install.py
# checks it against the pins' Requires-Python). setup.sh uses the image's Python if it is at least
# this, else installs Python 3.12 from the deadsnakes PPA.
GRADING_PYTHON_FLOOR = "3.11"
REQUIREMENTS = "requirements-grade.txt"
EXERCISE_FILE = re.compile(r"ch\d\d_\w+\.py")
MAX_FILE_BYTES = 5_000_000  # a chNN_*.py larger than this is not a submission
ARCHIVE_BYTES = 50_000_000  # all the chNN_*.py files one zip may unpack to
ARCHIVE_MEMBERS = 10_000    # entries one zip may have

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope image set-up: run once as root on Gradescope's Ubuntu base image, with the network.
# Installs a Python >= {floor} (the floor of requirements-grade.txt's pins), the CPU build of
# torch and only what grading needs: no book, no Jupyter, no browser.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
cd "$ROOT/source"
FLOOR={floor}
export DEBIAN_FRONTEND=noninteractive

new_enough() {{  # the interpreter exists and is at least FLOOR
  command -v "$1" >/dev/null 2>&1 &&
    "$1" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$FLOOR'.split('.'))))"
}}
find_python() {{
  for candidate in python3.13 python3.12 python3.11 python3; do
    if new_enough "$candidate"; then echo "$candidate"; return 0; fi
  done
  return 1
}}

apt-get update
if ! PYTHON=$(find_python); then
  apt-get install -y --no-install-recommends software-properties-common gpg-agent
  add-apt-repository -y ppa:deadsnakes/ppa
  apt-get update
  apt-get install -y --no-install-recommends python3.12 python3.12-venv
  PYTHON=$(find_python) || {{ echo "setup.sh: no Python >= $FLOOR could be installed" >&2; exit 1; }}
fi
if ! "$PYTHON" -c "import ensurepip, venv" 2>/dev/null; then  # Debian splits venv out
  apt-get install -y --no-install-recommends "$(basename "$PYTHON")-venv"
fi
echo "setup.sh: grading with $("$PYTHON" --version)"
"$PYTHON" -m venv "$ROOT/venv"
bash tools/install_torch.sh "$ROOT/venv/bin/python" cpu
"$ROOT/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-grade.txt
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Grade one submission. AUTOGRADER_ROOT / AUTOGRADER_PYTHON let you try it outside Gradescope.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
case "$ROOT" in /*) ;; *) ROOT="$PWD/$ROOT" ;; esac     # relative paths: from where this was run
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac
SOURCE="$ROOT/source"
mkdir -p "$ROOT/results"
if ! command -v "$PY" >/dev/null 2>&1; then
  msg="grading error: no Python at $PY (AUTOGRADER_PYTHON); run setup.sh, or point AUTOGRADER_PYTHON at one"
  echo "$msg" >&2
  printf '{"score": 0, "output": "%s", "tests": []}\n' "$msg" > "$ROOT/results/results.json"
  exit 1
fi
cd "$SOURCE"
export PYTHONPATH="$SOURCE${PYTHONPATH:+:$PYTHONPATH}"
TESTS=(--tests "$SOURCE/tests/graded")
if [ -d "$SOURCE/tests/hidden" ]; then TESTS+=(--tests "$SOURCE/tests/hidden"); fi
# --upload: the student's chNN_*.py files, wherever they sit in the upload (zips too), graded from
# a private copy; the output names each file graded.
"$PY" -m llama_course.grade "$ROOT/submission" --upload "${TESTS[@]}" --out "$ROOT/results/results.json"
"""


RUN_CAPSTONE = RUN_AUTOGRADER.split("cd \"$SOURCE\"")[0].replace(
    "# Grade one submission.", "# Grade one capstone submission (Chapter 14).") + """\
cd "$SOURCE"
export PYTHONPATH="$SOURCE${PYTHONPATH:+:$PYTHONPATH}"
# the student's chNN_*.py files, wherever they sit in the upload, assembled into one LLaMA in the
# grader's sandbox; CAPSTONE_ARGS adds options (--quick: the smallest sizes, for a trial run).
ARGS=(--upload --gradescope "$ROOT/results/results.json")
"$PY" -m llama_course.grade capstone "$ROOT/submission" "${ARGS[@]}" ${CAPSTONE_ARGS:-}
"""
CAPSTONE_HIDDEN = "tests/hidden/capstone_checks.py"


def chapter_of(path: Path) -> int | None:
    match = re.fullmatch(r"test_ch(\d\d)_\w+\.py", path.name)
    return int(match[1]) if match else None


def test_files(folder: Path, chapters: list[int]) -> list[Path]:
    """Every file of a test folder that an assignment of these chapters needs: its chapters'
    test_chNN_*.py and any helper that is not a chapter's tests (conftest.py, oracles...)."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix != ".pyc")
    return [p for p in files if chapter_of(p) is None or not chapters or chapter_of(p) in chapters]


def graded_chapters(repo: Path = REPO) -> list[int]:
    return sorted({chapter_of(p) for p in (repo / "tests" / "graded").glob("test_ch*.py")} - {None})


def build(out: Path, chapters: list[int] | None = None, repo: Path = REPO, capstone: bool = False) -> Path:
    """Write the autograder zip for these chapters (all when empty), or for the capstone; returns its path."""
    chapters = sorted(set(chapters or []))
    if capstone and chapters:
        raise ValueError("chapters: the capstone is an assignment of its own; give no --chapter with --capstone")
    unknown = sorted(set(chapters) - set(graded_chapters(repo)))
    if unknown:
        raise ValueError(f"chapters: no graded tests for chapter(s) {unknown} in tests/graded")
    files = [repo / "pyproject.toml", repo / "README.md", repo / REQUIREMENTS, repo / "tools" / "install_torch.sh"]
    files += sorted(p for p in (repo / "llama_course").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    if capstone:
        files += [repo / CAPSTONE_HIDDEN] if (repo / CAPSTONE_HIDDEN).is_file() else []
    else:
        files += [repo / "tests" / "conftest.py"]
        files += test_files(repo / "tests" / "graded", chapters) + test_files(repo / "tests" / "hidden", chapters)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        run = RUN_CAPSTONE if capstone else RUN_AUTOGRADER
        scripts = (("setup.sh", SETUP_SH.format(floor=GRADING_PYTHON_FLOOR)), ("run_autograder", run))
        for name, text in scripts:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # executable
            archive.writestr(info, text)
        for path in files:
            archive.write(path, path.relative_to(repo).as_posix())
    return out


def default_out(chapters: list[int], capstone: bool = False) -> Path:
    suffix = "-capstone" if capstone else "".join(f"-ch{n:02d}" for n in sorted(set(chapters)))
    return REPO / "_build" / f"autograder{suffix}.zip"


# ---------------------------------------------------------------------------------------------
# The submission: chNN_*.py files at any depth.

def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__MACOSX" or name == "__pycache__"


def _unzip(archive: Path, into: Path) -> str:
    """Extract only plain chNN_*.py members (no links, no absolute paths, no paths outside `into`,
    at most MAX_FILE_BYTES each and ARCHIVE_BYTES in all); returns "" or why the archive could not
    be read."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = z.infolist()
            if len(members) > ARCHIVE_MEMBERS:
                return f"it has {len(members)} entries, more than the {ARCHIVE_MEMBERS} a submission may have"
            total = 0
            for member in members:
                parts = PurePosixPath(member.filename.replace("\\", "/")).parts
                if (member.is_dir() or not parts or parts[0] == "/" or ":" in parts[0]
                        or any(_skipped(p) or p == ".." for p in parts)):
                    continue
                if (member.external_attr >> 16) & 0o170000 == 0o120000:  # a symbolic link
                    continue
                if EXERCISE_FILE.fullmatch(parts[-1]) and member.file_size <= MAX_FILE_BYTES:
                    total += member.file_size
                    if total > ARCHIVE_BYTES:
                        return f"its chNN_*.py files hold more than {ARCHIVE_BYTES} bytes"
                    target = into.joinpath(*parts)
                    if not target.resolve().is_relative_to(into.resolve()):
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(member))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, EOFError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return ""


def _candidates(folder: Path, scratch: Path, depth: int = 0,
                unreadable: list[str] | None = None) -> list[tuple[int, str, Path]]:
    """(depth, shown path, file) for every chNN_*.py under folder, zips included; an archive that
    cannot be read is added to ``unreadable`` with the reason."""
    found = []
    unreadable = [] if unreadable is None else unreadable
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        here = Path(root)
        level = depth + len(here.relative_to(folder).parts)
        for name in sorted(names):
            path = here / name
            if _skipped(name) or path.is_symlink() or not path.is_file():
                continue
            if EXERCISE_FILE.fullmatch(name) and path.stat().st_size <= MAX_FILE_BYTES:
                found.append((level, str(path.relative_to(folder)), path))
            elif name.lower().endswith(".zip") and depth < 3:
                inner = Path(tempfile.mkdtemp(dir=scratch))
                why = _unzip(path, inner)
                if why:
                    unreadable.append(f"could not read {path.relative_to(folder)}: {why}")
                found += [(d, f"{path.relative_to(folder)}!{shown}", p)
                          for d, shown, p in _candidates(inner, scratch, level + 1, unreadable)]
    return found


def _preference(candidate: tuple[int, str, Path]) -> tuple:
    """Which of several files of one name is graded: one in an exercises/ folder, then the
    shallowest, then the first by path."""
    depth, shown, path = candidate
    return (path.parent.name != "exercises", depth, shown)


def collect(submission: Path, dest: Path) -> list[str]:
    """Copy the submission's chNN_*.py files, wherever they are (a folder, or a zip), into dest
    (flat, readable by anyone); where a name occurs more than once, the one in an exercises/
    folder wins, else the shallowest. Returns what it did, one note per file ("graded PATH",
    "ignored PATH: ... instead, because ...") and one per archive it could not read ("could not
    read PATH: why")."""
    dest.mkdir(parents=True, exist_ok=True)
    os.chmod(dest, 0o755)
    notes, unreadable = [], []
    with tempfile.TemporaryDirectory() as scratch:
        if submission.is_file():  # an uploaded zip
            inner = Path(tempfile.mkdtemp(dir=scratch))
            why = _unzip(submission, inner)
            unreadable += [f"could not read {submission.name}: {why}"] if why else []
            found = [(d, f"{submission.name}!{shown}", p)
                     for d, shown, p in _candidates(inner, Path(scratch), 1, unreadable)]
        else:
            found = _candidates(submission, Path(scratch), 0, unreadable)
        chosen: dict[str, tuple[int, str, Path]] = {}
        for candidate in sorted(found, key=_preference):
            depth, shown, path = candidate
            if path.name in chosen:
                kept = chosen[path.name]
                why = ("it is in an exercises/ folder" if kept[2].parent.name == "exercises" != path.parent.name
                       else "it is the shallowest" if kept[0] < depth else "it comes first by path")
                notes.append(f"ignored {shown}: graded {kept[1]} instead, because {why}")
                continue
            chosen[path.name] = candidate
            shutil.copyfile(path, dest / path.name)
            os.chmod(dest / path.name, 0o644)
        notes = [f"graded {chosen[name][1]}" for name in sorted(chosen)] + notes + unreadable
    if not chosen:
        notes.append(f"no chNN_*.py file in the submission ({submission.name})")
    return notes


# ---------------------------------------------------------------------------------------------
# requirements-grade.txt: the grading packages and everything they need, pinned as installed.

def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _needed(requirement: str, pythons=("3.11", "3.12", "3.13")) -> bool:
    """Whether a Requires-Dist line applies to a Linux x86-64 image of one of these Pythons."""
    from packaging.requirements import Requirement

    marker = Requirement(requirement).marker
    if marker is None:
        return True
    base = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}
    return any(marker.evaluate({**base, "python_version": v, "python_full_version": f"{v}.0"}) for v in pythons)


def grading_requirements() -> list[str]:
    """name==version for the grading packages, torch's own dependencies, and all they require,
    as installed in this environment (which `make install` made from requirements.lock)."""
    roots = GRADING_PACKAGES + [_name(r) for r in importlib.metadata.requires("torch") or [] if _needed(r)]
    pins: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if normalize(name) in pins:
            continue
        dist = importlib.metadata.distribution(name)
        pins[normalize(name)] = f"{dist.metadata['Name']}=={dist.version}"
        todo += [_name(r) for r in dist.requires or [] if _needed(r)]
    return [pins[n] for n in sorted(pins)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade.autograder",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", type=int, action="append", default=[],
                        help="a chapter of the assignment (repeatable; default: every chapter)")
    parser.add_argument("--capstone", action="store_true", help="the capstone's assignment (Chapter 14), not chapters'")
    parser.add_argument("--out", type=Path,
                        help="the zip to write (default: _build/autograder[-chNN...|-capstone].zip)")
    parser.add_argument("--requirements", action="store_true", help="print requirements-grade.txt and exit")
    parser.add_argument("--collect", nargs=2, type=Path, metavar=("SUBMISSION", "DEST"),
                        help="copy a submission's chNN_*.py files into DEST and exit")
    args = parser.parse_args(argv)
    if args.requirements:
        print("# What Gradescope's setup.sh installs after torch (grading only: no book, no Jupyter).")
        print("# Regenerate with: make lock")
        print("\n".join(grading_requirements()))
        return 0
    if args.collect:
        for note in collect(*args.collect):
            print(f"submission: {note}")
        return 0
    try:
        out = build(args.out or default_out(args.chapter, args.capstone), args.chapter, capstone=args.capstone)
    except ValueError as error:
        parser.error(str(error))
    chapters = "the capstone" if args.capstone else ", ".join(map(str, args.chapter)) or "all"
    hidden = "included" if (REPO / "tests" / "hidden").is_dir() else "none in this tree"
    print(f"wrote {out} (chapters: {chapters}; hidden tests: {hidden})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
