"""Class grading isolates students: each is graded as a fresh uid from a private copy of their own
upload only; the class's submissions and grades are closed to them; what a student leaves in the
shared temporary folders is removed before the next; the network is cut where the kernel allows;
zips and nested folders are found as on Gradescope, and a corrupt archive is an ERROR row."""

import csv
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from llama_course.grade import autograder, grader, sandbox

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "grader_cases"
as_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0
                             or sandbox.closed_folder(REPO) is not None,
                             reason="needs a Linux grader running as root in a folder others can enter")
UID = sandbox.UID_BASE + 4343  # a uid no file and no process uses
DOCKER_CAPS = ["setpriv", "--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,"
               "+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap", "--inh-caps=-all", "--"]


@pytest.fixture
def open_tmp():
    """A temporary folder every user can enter, as a class's folder on a shared machine is (pytest's
    own tmp_path is inside a folder closed to others, which would hide the classmates by itself)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def grade(*args, prefix=(), timeout=900):
    return subprocess.run([*prefix, sys.executable, "-m", "llama_course.grade", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    path.write_text(textwrap.dedent(text))
    path.chmod(0o644)


HONEST = """
    import os
    SECRET = "{secret}"
    def answer():
        print("UID", os.getuid())
        return 42
    def other():
        return 1
"""

# Mallory reads everything of her classmates' she can think of, plants files in every shared
# temporary folder, and calls a server on this machine.
HOSTILE = """
    import glob, os, socket
    PATHS = {paths!r}
    def answer():
        print("UID", os.getuid())
        found = [p for pattern in ("/tmp/llama-course-submission-*/**", ) for p in glob.glob(pattern, recursive=True)]
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
            print("NETWORK reached")
        except OSError as err:
            print("NETWORK unreachable", type(err).__name__)
        for where in ("/tmp", "/var/tmp", "/dev/shm"):
            with open(os.path.join(where, f"planted-by-{{os.getuid()}}"), "w") as f:
                f.write("x")
            os.makedirs(os.path.join(where, f"planted-dir-by-{{os.getuid()}}", "inner"), exist_ok=True)
            print("PLANTED in", where)
        for path in PATHS + found:
            try:
                seen = os.listdir(path) if os.path.isdir(path) else open(path).read()
                print("READ", path, "LEAKED" if "-SEC" + "RET" in str(seen) else "")
            except OSError as err:
                print("DENIED", path, type(err).__name__)
        return 42
    def other():
        return 1
"""


def class_folder(root: Path, port: int) -> tuple[Path, Path]:
    subs, grades = root / "subs", root / "grades"
    write(subs / "alice" / "ch98_hostile.py", HONEST.format(secret="ALICE-SECRET"))
    write(subs / "zoe" / "exercises" / "ch98_hostile.py", HONEST.format(secret="ZOE-SECRET"))
    paths = [str(subs), str(subs / "alice"), str(subs / "alice" / "ch98_hostile.py"),
             str(subs / "zoe" / "exercises" / "ch98_hostile.py"), str(grades), str(grades / "alice.json")]
    write(subs / "mallory" / "ch98_hostile.py", HOSTILE.format(paths=paths, port=port))
    for folder in (subs, subs / "alice", subs / "mallory", subs / "zoe", subs / "zoe" / "exercises"):
        folder.chmod(0o755)
    return subs, grades


def uid_of(results: dict) -> int:
    return int(re.search(r"UID (\d+)", results["tests"][0]["output"])[1])


def owned_by(uid: int) -> list[str]:
    return [os.path.join(where, name) for where in sandbox.LEFTOVER_FOLDERS for name in os.listdir(where)
            if os.lstat(os.path.join(where, name)).st_uid == uid]


def network_namespaces() -> bool:
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
@as_root
def test_a_student_reads_nothing_of_a_classmate_and_leaves_nothing_behind(open_tmp):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        subs, grades = class_folder(open_tmp, server.getsockname()[1])
        run = grade("--class", subs, "--out-dir", grades, "--tests", CASES / "hostile", "--timeout", "60")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {row[0]: row for row in csv.reader((grades / "class.csv").open())}
    assert rows["alice"][1] == rows["mallory"][1] == rows["zoe"][1] == "2", rows
    results = {name: json.loads((grades / f"{name}.json").read_text()) for name in ("alice", "mallory", "zoe")}
    said = results["mallory"]["tests"][0]["output"]
    # any grader's staging folder on this machine is globbed (her own too); a classmate's would be LEAKED
    ours = [line for line in said.splitlines() if line.startswith("READ") and str(open_tmp) in line]
    assert not ours and "LEAKED" not in said, said
    assert said.count("DENIED") >= 6 and said.count("PLANTED") == 3, said
    uids = {name: uid_of(r) for name, r in results.items()}
    assert len(set(uids.values())) == 3 and min(uids.values()) > 0, uids       # a fresh uid per student
    assert not owned_by(uids["mallory"]), owned_by(uids["mallory"])            # her planted files are gone
    if network_namespaces():
        assert "NETWORK unreachable" in said, said
        assert "network: none" in run.stdout
    assert run.stdout.count("sandbox: on") == 1                                 # said once for the class
    assert os.stat(subs).st_mode & 0o007 == 0 and os.stat(grades).st_mode & 0o007 == 0


@as_root
def test_a_staged_submission_is_readable_by_its_own_worker_only(open_tmp):
    upload = open_tmp / "upload"
    write(upload / "exercises" / "ch01_anatomy.py", "x = 1\n")
    staging = open_tmp / "staging"
    staging.mkdir()
    folder = grader.stage(upload / "exercises", staging)
    grader.make_private(staging, UID)
    files = [str(staging), str(folder / "ch01_anatomy.py")]
    assert sandbox.readable_by(UID, UID, files) == files
    assert sandbox.readable_by(UID + 1, UID + 1, files) == []                  # a classmate's uid
    assert os.stat(staging).st_uid == 0 and oct(os.stat(staging).st_mode & 0o777) == "0o750"
    assert oct(os.stat(folder / "ch01_anatomy.py").st_mode & 0o777) == "0o640"  # not the worker's to rewrite


@as_root
def test_files_a_uid_left_in_shared_folders_are_removed(open_tmp):
    shared = open_tmp / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "nested").mkdir()
    (shared / "nested").chmod(0o1777)
    for path in (shared / "planted", shared / "nested" / "deep", shared / "root's"):
        path.write_text("x")
    (shared / "dir").mkdir()
    (shared / "dir" / "inside").write_text("x")
    (shared / "link").symlink_to("/etc/passwd")
    for path in (shared / "planted", shared / "nested" / "deep", shared / "dir", shared / "dir" / "inside"):
        os.chown(path, UID, UID)
    os.chown(shared / "link", UID, UID, follow_symlinks=False)
    removed = sandbox.remove_files_of(UID, (str(shared),))
    assert sorted(os.listdir(shared)) == ["nested", "root's"] and os.listdir(shared / "nested") == []
    assert len(removed) == 4 and os.path.exists("/etc/passwd")
    with pytest.raises(ValueError, match="root"):
        sandbox.remove_files_of(0, (str(shared),))


def zipped(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


@pytest.mark.slow
@as_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_class_grading_finds_zips_and_nested_folders_and_reports_a_corrupt_archive(open_tmp):
    """Under Docker's capability set (no network or mount namespace): a zipped upload and a nested
    folder are graded as on Gradescope, a corrupt zip is an ERROR row with its reason, and the
    missing network namespace is said once, not as an error."""
    subs = open_tmp / "subs"
    subs.mkdir(mode=0o755)
    key = (REPO / "solutions" / "ch01_anatomy.py").read_text()
    (subs / "ada.zip").write_bytes(zipped({"hw1/exercises/ch01_anatomy.py": key, "__MACOSX/ch01_anatomy.py": "x"}))
    (subs / "bob.zip").write_bytes(b"PK\x03\x04 this is no zip")
    write(subs / "cy" / "deep" / "er" / "ch01_anatomy.py", (REPO / "exercises" / "ch01_anatomy.py").read_text())
    for path in subs.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    grades = open_tmp / "grades"
    run = grade("--class", subs, "--out-dir", grades, "--chapter", "1", prefix=DOCKER_CAPS)
    assert run.returncode == 1, run.stdout + run.stderr      # 1: a row is an error
    rows = {row[0]: row for row in csv.reader((grades / "class.csv").open())}
    assert set(rows) == {"student", "(maximum)", "ada", "bob", "cy"}, rows
    assert rows["ada"][1] == rows["ada"][2] == rows["(maximum)"][1] and rows["ada"][-1] == ""
    assert rows["bob"][1] == "" and "could not read bob.zip" in rows["bob"][-1] and "zip" in rows["bob"][-1], rows
    assert rows["cy"][1] == "0" and rows["cy"][-1] == ""
    assert "ERROR" in run.stdout
    ada = json.loads((grades / "ada.json").read_text())
    assert "graded ada.zip!hw1/exercises/ch01_anatomy.py" in ada["output"]
    assert run.stderr.count("does not allow network namespaces") == 1, run.stderr
    assert "network: reachable" in run.stdout


def test_an_archive_cannot_write_outside_its_folder_nor_unpack_past_the_limits(tmp_path, monkeypatch):
    inside = tmp_path / "inside"
    inside.mkdir()
    archive = tmp_path / "evil.zip"
    outside = tmp_path / "outside" / "ch01_anatomy.py"
    archive.write_bytes(zipped({str(outside): "# absolute\n", "../ch02_tokenizer.py": "# up\n",
                                "a/../../ch03_norms.py": "# up\n", "ok/ch04_attention.py": "# fine\n"}))
    assert autograder._unzip(archive, inside) == ""
    assert not outside.exists() and not (tmp_path / "ch02_tokenizer.py").exists()
    assert not (tmp_path / "ch03_norms.py").exists()
    assert [p.relative_to(inside).as_posix() for p in inside.rglob("*.py")] == ["ok/ch04_attention.py"]
    monkeypatch.setattr(autograder, "ARCHIVE_BYTES", 5)
    assert "more than 5 bytes" in autograder._unzip(archive, tmp_path / "again")
    monkeypatch.setattr(autograder, "ARCHIVE_MEMBERS", 2)
    assert "more than the 2" in autograder._unzip(archive, tmp_path / "again")
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    assert autograder._unzip(tmp_path / "bad.zip", tmp_path / "bad").startswith("BadZipFile")


def test_a_decoy_draft_loses_to_the_exercises_folder_and_the_notes_say_why(tmp_path):
    upload = tmp_path / "upload"
    write(upload / "a_draft" / "ch04_attention.py", "# draft\n")
    write(upload / "exercises" / "ch04_attention.py", "# the real one\n")
    write(upload / "exercises" / "ch05_rope.py", "# rope\n")
    notes = autograder.collect(upload, tmp_path / "flat")
    assert (tmp_path / "flat" / "ch04_attention.py").read_text() == "# the real one\n"
    assert "graded exercises/ch04_attention.py" in notes and "graded exercises/ch05_rope.py" in notes
    assert ("ignored a_draft/ch04_attention.py: graded exercises/ch04_attention.py instead, because it is in an "
            "exercises/ folder") in notes
