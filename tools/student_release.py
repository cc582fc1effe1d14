"""Write the student release: the students' own repository, made from the instructor's tree.

    python tools/student_release.py --repository URL [--out dist/llama-course-student.tar.gz] [--dir DIR]
                                                   (or: make student-release REPO=URL)

The release holds the book, the package, the exercise stubs, the practice tests and the homework's
public checks. It leaves out everything that answers an exercise or belongs to the instructor:
solutions/ (the key), tests/hidden/ (the homework's real tests), the tests and tools that need
them, and every file that says "instructor only: not in the student release" in its first lines.
Its README is tools/student/README.md (install, read, do the exercises, grade yourself) and its
Makefile is this Makefile without the block between "# BEGIN INSTRUCTOR" and "# END INSTRUCTOR".
The instructors' page (book/instructors.md) stays out, and the pages that link to it or name an
instructor's make target are edited (EDITS).

One setting, the students' repository (--repository, required): the release's _config.yml names
it (repository.url, branch main), and so do everything built from that setting: the book's
Colab/Binder/repository buttons, every notebook's Colab install cell and the Labs page's clone
line. The instructor's own repository is named nowhere in the release. The release is a git
repository whose history starts with one commit on `main`, so that `git remote add origin URL &&
git push -u origin main` publishes it into a new, empty repository. The students' grader says what
it cannot check from the points table (llama_course/grade/points.py: each problem's public and
hidden points), which ships with the package; the hidden tests never do.

Files are the ones git tracks or would track (ignored files never ship), as they are on disk:
make the release from a clean checkout of the commit you publish.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PREFIX = "llama-course"
INSTRUCTOR_ONLY = [
    "solutions/", "tests/hidden/", "tests/grader_cases/", "tests/e2e/test_stubs.py", "tests/e2e/test_grader.py",
    "tests/e2e/test_autograder.py", "tests/e2e/test_release.py", "tests/e2e/test_install.py",
    "tests/e2e/test_feedback.py", "tests/e2e/test_hostile_submissions.py", "tests/e2e/test_grading_rules.py",
    "tests/e2e/test_class_isolation.py", "tests/e2e/test_gradescope_fit.py",  # they grade tests/grader_cases
    "tests/e2e/test_points.py",  # reads tests/hidden and builds Gradescope zips
    "tools/student/",
    "tools/student_release.py", "tools/colab_cells.py", "requirements-grade.txt", "CONTRIBUTING.md",
    "book/instructors.md",
]
BRANCH = "main"
# Lines of shipped files that speak to instructors: (file, instructor's text, the release's text).
# Each instructor's text must be present (a changed page fails the release instead of leaking).
EDITS = [
    ("_toc.yml", "      - file: book/instructors\n", ""),
    ("book/intro.md", "- **Teaching a course?** {doc}`For instructors <instructors>` and {doc}`the labs <labs>`.",
     "- **Doing the labs?** {doc}`The labs <labs>` gathers every chapter's tasks and how to check them."),
    # ... and its Chinese (the Chinese edition is made from the release's own English)
    ("locale/zh_CN/LC_MESSAGES/book/intro.po",
     'msgid "**Teaching a course?** {doc}`For instructors <instructors>` and {doc}`the labs <labs>`."\n'
     'msgstr "**要开一门课？** 请看 {doc}`写给教师 <instructors>` 和 {doc}`实验一览 <labs>`。"',
     'msgid "**Doing the labs?** {doc}`The labs <labs>` gathers every chapter\'s tasks and how to check them."\n'
     'msgstr "**在做实验？** {doc}`实验一览 <labs>` 汇集了每一章的实验任务以及检查它们的方法。"'),
]
# The Colab install cell's comment (tools/colab_cells.py) names an instructor's target.
CELL_COMMENT = ("# The repository comes from _config.yml (repository.url, repository.branch): change it there and\n"
                "# run `make colab-cells` to rewrite this cell in every chapter.\n")
CELL_COMMENT_RELEASE = "# The repository is your course's (_config.yml, repository.url).\n"
CHAPTER_NOTEBOOK = r"book/ch\d\d_[^/]*\.ipynb"   # the notebooks with that cell (tools/colab_cells.py)
GIT = ["git", "-c", "user.name=LLaMA from the Inside", "-c", "user.email=course@invalid", "-c", "commit.gpgsign=false",
       "-c", "init.defaultBranch=main"]
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


def check_repository(url: str) -> str:
    if not isinstance(url, str):
        raise TypeError(f"repository must be a str (the students' repository URL), got {type(url).__name__}")
    if not re.fullmatch(r"https://[\w.-]+(:\d+)?/[\w.~/-]+", url.rstrip("/")):
        raise ValueError(f"repository must be the https URL of the students' repository (Colab clones it), "
                         f"e.g. https://github.com/your-org/llama-course; got {url!r}")
    return url.rstrip("/")


def instructors_repository(repo: Path) -> tuple[str, str]:
    """(url, branch) of _config.yml's repository: the instructor's, which the release must not name."""
    if not (repo / "_config.yml").is_file():
        return "", BRANCH
    config = yaml.safe_load((repo / "_config.yml").read_text(encoding="utf-8")).get("repository") or {}
    return str(config.get("url", "")).rstrip("/"), str(config.get("branch", BRANCH))


def _edit(files: dict[str, bytes], path: str, old: str, new: str) -> None:
    if path not in files:
        return
    text = files[path].decode("utf-8")
    if old not in text:
        raise RuntimeError(f"tools/student_release.py: {path} no longer holds {old!r}: update EDITS")
    files[path] = text.replace(old, new).encode("utf-8")


def point_to(files: dict[str, bytes], repo: Path, url: str) -> None:
    """Every mention of the instructor's repository becomes the students' (branch main)."""
    old_url, old_branch = instructors_repository(repo)
    for path, data in list(files.items()):
        if not path.endswith((".md", ".ipynb", ".yml", ".yaml", ".txt", ".cfg", ".toml", ".py", "postBuild")):
            continue
        text = data.decode("utf-8", errors="strict")
        new = text.replace(old_url, url) if old_url else text
        if path == "_config.yml":
            new = re.sub(r"(?m)^(repository:\n(?:[ \t]+.*\n)*?[ \t]+branch:[ \t]*).*$", rf"\g<1>{BRANCH}", new)
        if path == "book/labs.md":
            new = re.sub(r"(?m)^(!git clone --depth 1 --branch )\S+ ", rf"\g<1>{BRANCH} ", new)
        if re.fullmatch(CHAPTER_NOTEBOOK, path):
            new = _release_install_cell(path, new, old_branch)
        if new != text:
            files[path] = new.encode("utf-8")


def _release_install_cell(path: str, text: str, old_branch: str) -> str:
    """A chapter notebook whose Colab install cell installs from the release's branch, its comment
    naming no instructor's target. A cell without the comment (edited by hand) stops the release."""
    notebook = json.loads(text)
    cell = next((c for c in notebook["cells"] if c["cell_type"] == "code"), None)
    source = "".join(cell["source"]) if cell else ""
    if CELL_COMMENT not in source:
        raise RuntimeError(f"{path}: its first code cell is not the Colab install cell of tools/colab_cells.py "
                           f"(no comment {CELL_COMMENT.splitlines()[0]!r}); the release would ship it naming "
                           f"the instructor's branch and make target. Run `make colab-cells` and release again")
    source = source.replace(CELL_COMMENT, CELL_COMMENT_RELEASE)
    source = source.replace(f'BRANCH = "{old_branch}"', f'BRANCH = "{BRANCH}"')
    cell["source"] = source.splitlines(keepends=True)
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def release_files(repo: Path, repository: str) -> dict[str, bytes]:
    """{path in the release: content}."""
    url = check_repository(repository)
    files = {path: (repo / path).read_bytes() for path in tracked_files(repo) if not instructor_only(path, repo)}
    files["README.md"] = (repo / STUDENT_README).read_bytes()
    files["Makefile"] = student_makefile((repo / "Makefile").read_text(encoding="utf-8")).encode("utf-8")
    for path, old, new in EDITS:
        _edit(files, path, old, new)
    point_to(files, repo, url)
    return files


def _mode(repo: Path, path: str) -> int:
    source = repo / path
    return 0o755 if source.is_file() and source.stat().st_mode & 0o111 else 0o644


def write_tarball(out: Path, repository: str, repo: Path = REPO) -> Path:
    """The release as a .tar.gz of one folder, PREFIX/, that is a git repository (write_tree)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="student-release-") as work:
        tree = write_tree(Path(work) / PREFIX, repository, repo)
        with tarfile.open(out, "w:gz") as archive:
            for path in sorted(tree.rglob("*")):
                info = archive.gettarinfo(path, f"{PREFIX}/{path.relative_to(tree).as_posix()}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if path.is_file():
                    with open(path, "rb") as handle:
                        archive.addfile(info, io.BytesIO(handle.read()))
                else:
                    archive.addfile(info)
    return out


def write_tree(folder: Path, repository: str, repo: Path = REPO) -> Path:
    """The release in ``folder`` (new or empty): its files, and a git history of one commit on main."""
    files = release_files(repo, repository)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty: give a new or empty folder")
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(_mode(repo, path))
    version = re.search(r'__version__ = "([^"]+)"', files.get("llama_course/__init__.py", b"").decode())
    message = f"LLaMA from the Inside, student edition{' v' + version[1] if version else ''}"
    for command in (["init", "-q", "-b", BRANCH], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run([*GIT, *command], cwd=folder, check=True, capture_output=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", metavar="URL", default="",
                        help="the https URL of the repository your students get (make student-release REPO=URL)")
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "llama-course-student.tar.gz")
    parser.add_argument("--dir", type=Path, help="write the release as a folder instead of a tarball")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="the instructor's tree to release (default: this one)")
    args = parser.parse_args(argv)
    if not args.repository:
        parser.error("say which repository your students get, e.g. make student-release "
                     "REPO=https://github.com/your-org/llama-course: the release's book buttons, Colab install "
                     "cells and clone line point there (never to this, the instructor's, repository)")
    try:
        check_repository(args.repository)
    except ValueError as error:
        parser.error(str(error))
    try:
        where = (write_tree(args.dir, args.repository, args.source) if args.dir
                 else write_tarball(args.out, args.repository, args.source))
    except RuntimeError as error:  # a page or cell the release cannot make a student's: nothing written
        print(f"student release not written: {error}", file=sys.stderr)
        return 1
    print(f"wrote {where} (the students' repository for {args.repository}: no solutions/, no tests/hidden/; "
          f"git history: one commit on {BRANCH})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
