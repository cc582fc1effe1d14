"""Grading that fits Gradescope's small containers: a fork bomb in 768 MB costs only its own test,
and a grader stopped mid-run (Gradescope's global timeout) leaves a valid results.json with the
scores of the tests that finished."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from llama_course.grade import sandbox

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "grader_cases"
as_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0
                             or sandbox.closed_folder(REPO) is not None,
                             reason="needs a Linux grader running as root in a folder others can enter")


@pytest.fixture
def open_tmp():
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def submission(folder: Path, text: str) -> Path:
    folder.mkdir(mode=0o755)
    (folder / "ch98_hostile.py").write_text(textwrap.dedent(text))
    (folder / "ch98_hostile.py").chmod(0o644)
    return folder


def memory_cgroup(limit: int) -> Path | None:
    """A new cgroup (v2, or v1's memory hierarchy) under this process's own, holding at most ``limit``
    bytes, or None where this process may not make one."""
    entries = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    v1 = entries.get("memory")
    base = Path("/sys/fs/cgroup/memory") if v1 is not None else Path("/sys/fs/cgroup")
    group = base / (v1 if v1 is not None else entries.get("", "/")).lstrip("/") / f"llama-course-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / ("memory.limit_in_bytes" if v1 is not None else "memory.max")).write_text(str(limit))
    except OSError:
        return None
    return group


def empty_and_remove(group: Path) -> None:
    for _ in range(50):
        pids = (group / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    group.rmdir()


FORK_BOMB = """
    import os
    def answer():
        hold = []
        while True:            # every process forks, and each holds 8 MB more
            try:
                os.fork()
                hold.append(bytearray(8 << 20))
            except (OSError, MemoryError):
                pass
    def other():
        return 1
"""


@pytest.mark.slow
@as_root
def test_a_fork_bomb_in_768_mb_costs_only_its_test(open_tmp):
    """Before the fix the kernel's out-of-memory killer took the grader (the largest process): no
    results.json at all. Now student processes are offered first and capped in number."""
    group = memory_cgroup(768 << 20)
    if group is None:
        pytest.skip("this machine does not let the test make a memory cgroup")
    out = open_tmp / "results.json"
    try:
        run = subprocess.run(["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "sh", sys.executable,
                              "-m", "llama_course.grade", str(submission(open_tmp / "sub", FORK_BOMB)),
                              "--tests", str(CASES / "hostile"), "--out", str(out), "--timeout", "10"],
                             capture_output=True, text=True, timeout=600)
    finally:
        empty_and_remove(group)
    assert run.returncode == 0, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    results = json.loads(out.read_text())
    tests = {t["name"].split(" :: ")[1]: t for t in results["tests"]}
    assert tests["test_answer"]["score"] == 0 and tests["test_other"]["score"] == 1
    assert results["score"] == 1 and results["max_score"] == 2


SLOW_SECOND = """
    import time
    def answer():
        return 42
    def other():
        time.sleep(600)
        return 1
"""


@pytest.mark.slow
def test_a_grader_killed_mid_run_leaves_the_finished_scores(open_tmp):
    """Gradescope's global timeout kills the grader: results.json must already hold the tests that
    finished (and say the rest were not graded), not nothing."""
    out = open_tmp / "results.json"
    marker = f"llama-course-kill-test-{os.getpid()}"
    upload = submission(open_tmp / "sub", SLOW_SECOND)
    grader = subprocess.Popen([sys.executable, "-m", "llama_course.grade", str(upload), "--tests",
                               str(CASES / "hostile"), "--out", str(out), "--timeout", "500"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, marker: "1"})
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (out.exists() and '"passed"' in out.read_text()):
            time.sleep(0.5)
        time.sleep(1)
    finally:
        grader.kill()
        grader.wait()
        if os.geteuid() == 0:  # the killed grader's worker, and its private staging folder
            sandbox.end_processes_of(sandbox.UID_BASE + grader.pid)
            for entry in Path(tempfile.gettempdir()).glob("llama-course-submission-*"):
                if entry.stat().st_gid == sandbox.UID_BASE + grader.pid:
                    shutil.rmtree(entry)
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    assert out.exists(), "no results.json while grading ran"
    results = json.loads(out.read_text())
    tests = {t["name"].split(" :: ")[1]: t for t in results["tests"]}
    assert tests["test_answer"]["score"] == 1 and tests["test_answer"]["output"] == "passed"
    assert tests["test_other"]["score"] == 0 and tests["test_other"]["output"].startswith("not graded")
    assert results["score"] == 1 and results["max_score"] == 2
    assert "1 of 2 tests finished" in results["output"] and "graded ch98_hostile.py" in results["output"]
