"""Generate the student stubs in ``exercises/`` from the instructor's key in ``solutions/``.

In a solution file each student part sits between two marker lines:

    # BEGIN SOLUTION Exercise 1.1 ffn_hidden_dim (Chapter 1, section 1.5 "Anatomy of LLaMA-2 7B")
    ...the answer...
    # END SOLUTION

The stub keeps everything else (signature, docstring, imports) and replaces the block with

    raise NotImplementedError("Exercise 1.1 ffn_hidden_dim (Chapter 1, ...): not implemented yet")

Usage:  python -m llama_course.grade.stubs [--check] [--force] [SOLUTIONS_DIR] [EXERCISES_DIR]

It never destroys a student's work: it needs the solutions folder (a student release has none, and
then it stops without touching anything), and it replaces or removes a file in exercises/ only
when that file is still exactly a generated stub (its last line records a digest of its text), so
an edited exercise is kept and reported unless --force is given.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION\b(?P<label>.*)$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
NOT_IMPLEMENTED = "not implemented yet"
DIGEST = re.compile(r"\n# generated stub, sha256 ([0-9a-f]{64})\n\Z")
HEADER = ("# Exercise stub, generated from the course's key (solutions/{name}). This file is yours:\n"
          "# replace each `raise NotImplementedError(...)` with your code, then grade it with\n"
          "#     python -m llama_course.grade exercises/        (or: make grade)\n")


def make_stub(source: str, name: str = "<solution>") -> str:
    """The student version of one solution file's text."""
    out, label, indent = [], None, ""
    for lineno, line in enumerate(source.splitlines(keepends=True), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if label is not None:
                raise ValueError(f"{name}:{lineno}: BEGIN SOLUTION inside another block")
            label, indent = begin["label"].strip(), begin["indent"]
            if not label:
                raise ValueError(f"{name}:{lineno}: BEGIN SOLUTION needs a label naming the exercise "
                                 f"and its book section")
            out.append(_raise(indent, label))
        elif end:
            if label is None:
                raise ValueError(f"{name}:{lineno}: END SOLUTION without BEGIN SOLUTION")
            label = None
        elif label is None:
            out.append(line)
    if label is not None:
        raise ValueError(f"{name}: BEGIN SOLUTION {label!r} is never closed")
    return _sign(HEADER.format(name=name) + "".join(out))


def _raise(indent: str, label: str, width: int = 120) -> str:
    """``raise NotImplementedError("<label>: not implemented yet")``, wrapped to the line width."""
    line = f"{indent}raise NotImplementedError({label + ': ' + NOT_IMPLEMENTED!r})\n"
    if len(line) <= width + 1:
        return line
    pieces, words = [], label.split(" ")
    room = width - len(indent) - 4 - 3  # four spaces, two quotes and a spare
    for word in words:
        if pieces and len(pieces[-1]) + 1 + len(word) <= room:
            pieces[-1] += " " + word
        else:
            pieces.append(word if not pieces else " " + word)
    pieces.append(": " + NOT_IMPLEMENTED)
    body = "".join(f"{indent}    {piece!r}\n" for piece in pieces)
    return f"{indent}raise NotImplementedError(\n{body}{indent})\n"


def _sign(text: str) -> str:
    """The text with a last line recording its digest, so a stub can tell it was never edited."""
    text = text if text.endswith("\n") else text + "\n"
    return f"{text}# generated stub, sha256 {hashlib.sha256(text.encode('utf-8')).hexdigest()}\n"


def is_untouched_stub(text: str) -> bool:
    """True for a file that is exactly what make_stub wrote (of this or an older solution)."""
    match = DIGEST.search(text)
    return match is not None and hashlib.sha256(text[:match.start() + 1].encode("utf-8")).hexdigest() == match[1]


def exercise_labels(source: str) -> list[str]:
    """The labels of every solution block in a file, e.g. ['Exercise 1.1 ffn_hidden_dim (...)']."""
    return [m["label"].strip() for m in map(BEGIN.match, source.splitlines()) if m]


def expected_stubs(solutions: Path) -> dict[str, str]:
    """{file name: stub text} for every chNN_*.py in the solutions folder."""
    return {path.name: make_stub(path.read_text(encoding="utf-8"), path.name)
            for path in sorted(solutions.glob("ch[0-9][0-9]_*.py"))}


def stale_stubs(solutions: Path, exercises: Path) -> list[str]:
    """Names of stubs that are missing, out of date, or have no solution."""
    expected = expected_stubs(solutions)
    present = {p.name for p in exercises.glob("ch[0-9][0-9]_*.py")}
    stale = [name for name, text in expected.items()
             if not (exercises / name).is_file() or (exercises / name).read_text(encoding="utf-8") != text]
    return sorted(stale + [name for name in present - expected.keys()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade.stubs", description=__doc__.splitlines()[0])
    parser.add_argument("solutions", nargs="?", default="solutions", type=Path)
    parser.add_argument("exercises", nargs="?", default="exercises", type=Path)
    parser.add_argument("--check", action="store_true", help="only report stale stubs (exit 1 if any)")
    parser.add_argument("--force", action="store_true", help="also overwrite or remove edited files")
    args = parser.parse_args(argv)
    if not any(args.solutions.glob("ch[0-9][0-9]_*.py")):
        print(f"no solutions in {args.solutions}/: stubs are made from the instructor's key, which a student "
              f"release does not have. Nothing was changed; your exercises are yours to edit.", file=sys.stderr)
        return 2
    if args.check:
        stale = stale_stubs(args.solutions, args.exercises)
        for name in stale:
            print(f"stale: {args.exercises / name} (run `make exercises`)")
        return 1 if stale else 0
    return write_stubs(args.solutions, args.exercises, force=args.force)


def write_stubs(solutions: Path, exercises: Path, force: bool = False) -> int:
    """Bring exercises/ in line with solutions/, keeping every file that is not an untouched stub."""
    exercises.mkdir(parents=True, exist_ok=True)
    expected = expected_stubs(solutions)
    kept = []
    for name in sorted({p.name for p in exercises.glob("ch[0-9][0-9]_*.py")} - expected.keys()):
        path = exercises / name
        if force or is_untouched_stub(path.read_text(encoding="utf-8")):
            path.unlink()
            print(f"removed {path} (no solution)")
        else:
            kept.append(f"kept {path}: it has no solution, but it was edited")
    for name, text in expected.items():
        path = exercises / name
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if current is None or force or is_untouched_stub(current) or _sign(current) == text:  # (or unsigned)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            kept.append(f"kept {path}: it differs from a generated stub (edited); "
                        f"move it away or pass --force to overwrite it")
    for line in kept:
        print(line, file=sys.stderr)
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main())
