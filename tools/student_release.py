"""Write the student release: the students' own repository, made from the instructor's tree.

    python tools/student_release.py [--out dist/llama-course-student.tar.gz] [--dir DIR]
                                                                  (or: make student-release)

The release holds the book, the package, the exercise stubs, the practice tests and the homework's
public checks. It leaves out everything that answers an exercise or belongs to the instructor:
solutions/ (the key), tests/hidden/ (the homework's real tests), the tests and tools that need
them, and every file that says "instructor only: not in the student release" in its first lines.
Its README is tools/student/README.md (install, read, do the exercises, grade yourself) and its
Makefile is this Makefile without the block between "# BEGIN INSTRUCTOR" and "# END INSTRUCTOR".

Files are the ones git tracks or would track (ignored files never ship), as they are on disk:
make the release from a clean checkout of the commit you publish.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "llama-course"
INSTRUCTOR_ONLY = [
    "solutions/", "tests/hidden/", "tests/grader_cases/", "tests/e2e/test_stubs.py", "tests/e2e/test_grader.py",
    "tests/e2e/test_autograder.py", "tests/e2e/test_release.py", "tests/e2e/test_install.py",
    "tests/e2e/test_feedback.py", "tests/e2e/test_hostile_submissions.py", "tests/e2e/test_grading_rules.py",
    "tools/student/",
    "tools/student_release.py", "tools/colab_cells.py", "requirements-grade.txt", "CONTRIBUTING.md",
]
MARKER = "instructor only: not in the student release"
STUDENT_README = "tools/student/README.md"


def tracked_files(repo: Path) -> list[str]:
    """Paths git tracks or would track (not ignored), relative to the repository."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                             capture_output=True, check=True).stdout.decode("utf-8")
    return sorted(p for p in set(listing.split("\0")) if p and (repo / p).is_file())


def instructor_only(path: str, repo: Path) -> bool:
    if any(path == entry or (entry.endswith("/") and path.startswith(entry)) for entry in INSTRUCTOR_ONLY):
        return True
    with open(repo / path, "rb") as handle:
        head = handle.read(2000).decode("utf-8", errors="replace").splitlines()[:5]
    return any(MARKER in line for line in head)


def student_makefile(text: str) -> str:
    """The Makefile without the instructor's block, its .PHONY naming only the targets left."""
    text = re.sub(r"(?ms)^# BEGIN INSTRUCTOR\b.*?^# END INSTRUCTOR[^\n]*\n?", "", text)
    targets = [t for t in re.findall(r"^([A-Za-z][\w-]*)::?(?!=)", text, re.M)]
    phony = " ".join(dict.fromkeys(t for t in targets if t != "PHONY"))
    return re.sub(r"(?m)^\.PHONY:(?:[^\n]*\\\n)*[^\n]*\n", f".PHONY: {phony}\n", text, count=1)


def release_files(repo: Path = REPO) -> dict[str, bytes]:
    """{path in the release: content}."""
    files = {path: (repo / path).read_bytes() for path in tracked_files(repo) if not instructor_only(path, repo)}
    files["README.md"] = (repo / STUDENT_README).read_bytes()
    files["Makefile"] = student_makefile((repo / "Makefile").read_text(encoding="utf-8")).encode("utf-8")
    return files


def _mode(repo: Path, path: str) -> int:
    source = repo / path
    return 0o755 if source.is_file() and source.stat().st_mode & 0o111 else 0o644


def write_tarball(out: Path, repo: Path = REPO) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as archive:
        for path, data in sorted(release_files(repo).items()):
            info = tarfile.TarInfo(f"{PREFIX}/{path}")
            info.size, info.mode, info.mtime = len(data), _mode(repo, path), 0
            archive.addfile(info, io.BytesIO(data))
    return out


def write_tree(folder: Path, repo: Path = REPO) -> Path:
    for path, data in release_files(repo).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(_mode(repo, path))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "llama-course-student.tar.gz")
    parser.add_argument("--dir", type=Path, help="write the release as a folder instead of a tarball")
    args = parser.parse_args(argv)
    if args.dir:
        print(f"wrote {write_tree(args.dir)} (the students' repository: no solutions/, no tests/hidden/)")
    else:
        print(f"wrote {write_tarball(args.out)} (the students' repository: no solutions/, no tests/hidden/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
