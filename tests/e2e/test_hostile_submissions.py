"""Hostile submissions against the grader run as root, as on Gradescope or an instructor's
grading machine: student code runs as an unprivileged user that cannot forge, rewrite or remove
the results, write the tests or the package, read the key, or outlive its test; and an exercise
earns nothing when the submission hands in the package's own answer."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from llama_course.grade.plugin import package_uses, reference_names
from llama_course.grade.sandbox import closed_folder

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "grader_cases"
needs_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0
                                or closed_folder(REPO) is not None,
                                reason="the sandbox user needs a Linux grader running as root, and a course "
                                       f"folder other users can enter ({closed_folder(REPO)} cannot be)")

FORGED = json.dumps({"score": 1000, "max_score": 2, "tests": []})

# Helpers the hostile files share: a detached daemon (double fork + setsid), a forger, and a
# killer of the grader (the worker's parent, the forkserver, and its parent, the grader).
ATTACKS = f'''
import os, signal, sys, time
TARGET = os.environ["GRADER_CASE_TARGET"]
FORGED = {FORGED!r}

def forge():
    for attempt in (lambda: open(TARGET, "w").write(FORGED),
                    lambda: (open(TARGET + ".tmp", "w").write(FORGED), os.replace(TARGET + ".tmp", TARGET))):
        try:
            attempt()
            print("WROTE results")
        except OSError as err:
            print("DENIED results:", type(err).__name__)

def daemon(seconds):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + seconds
            while time.time() < end:
                try:
                    open(TARGET, "w").write(FORGED)
                except OSError:
                    pass
                time.sleep(0.1)
            os._exit(0)
        os._exit(0)
    os.wait()

def kill_the_grader():
    pid = os.getpid()
    for _ in range(2):  # the forkserver, then the grader
        pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
        try:
            os.kill(pid, signal.SIGKILL)
            print("KILLED", pid)
        except OSError as err:
            print("DENIED kill:", type(err).__name__)

def try_append(label, path):
    try:
        open(path, "a").close()
        print("WROTE", label)
    except OSError as err:
        print("DENIED", label, type(err).__name__)
'''


# What root may do inside Docker's default container (Gradescope's): no CAP_SYS_ADMIN, so no mount namespaces.
DOCKER_CAPS = ["setpriv", "--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,"
               "+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap", "--inh-caps=-all", "--"]


def grade(*args, env=None, cwd=None, timeout=600, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "llama_course.grade", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (the test's own target path)."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and marker.encode() in Path(entry.path, "environ").read_bytes():
                state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
                found.append(int(entry.name)) if state != "Z" else None
        except OSError:
            continue
    return found


def scores(results: dict) -> dict:
    return {t["name"].split(" :: ")[1]: t for t in results["tests"]}


@pytest.mark.slow
@needs_root
def test_forgers_daemons_and_the_gradescope_results_path(tmp_path):
    """Gradescope's layout under a tmp root: a daemon started at import time and one started by
    the graded call (double fork + setsid), direct writes to /autograder/results/results.json,
    appends to the tests and the package, killing the grader, and a 20 GiB allocation."""
    results_dir = tmp_path / "autograder" / "results"
    results_dir.mkdir(parents=True)
    out = results_dir / "results.json"
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_ch98_hostile.py").write_bytes((CASES / "hostile" / "test_ch98_hostile.py").read_bytes())
    write(tmp_path / "sub", "ch98_hostile.py", ATTACKS + f'''
import llama_course
daemon(40)                                   # at import time

def answer():
    daemon(40)                               # during the graded call
    forge()
    try_append("tests", {str(tests / "test_ch98_hostile.py")!r})
    try_append("package", llama_course.__file__)
    try_append("graded tests", {str(REPO / "tests" / "graded" / "test_ch01_anatomy.py")!r})
    kill_the_grader()
    return 42

def other():
    import torch
    x = torch.empty(20 * 2**30, dtype=torch.uint8)   # 20 GiB
    return 1
''')
    run = grade(tmp_path / "sub", "--tests", tests, "--out", out, "--timeout", "20",
                env={"GRADER_CASE_TARGET": str(out)})
    assert run.returncode == 0, run.stdout + run.stderr
    written = out.read_bytes()
    stamp = out.stat().st_mtime_ns
    time.sleep(3)  # the daemons would have rewritten it by now
    assert out.read_bytes() == written and out.stat().st_mtime_ns == stamp
    results = json.loads(written)
    answer, other = scores(results)["test_answer"], scores(results)["test_other"]
    assert results["score"] == 1 and results["max_score"] == 2
    assert answer["score"] == 1 and "WROTE" not in answer["output"] and "KILLED" not in answer["output"]
    assert answer["output"].count("DENIED") == 7, answer["output"]
    assert other["score"] == 0 and "allocate" in other["output"], other["output"]
    assert not processes_with(str(out)), "a student process outlived the grader"
    assert sorted(p.name for p in results_dir.iterdir()) == ["results.json"]


@pytest.mark.slow
@needs_root
def test_a_folder_made_at_the_results_path_cannot_crash_the_grader(tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="grader-shared-", dir="/tmp"))
    shared.chmod(0o1777)  # like /tmp itself: anyone may create entries
    request_cleanup = shutil.rmtree
    out = shared / "results.json"
    write(tmp_path / "sub", "ch98_hostile.py", """
        import os
        def answer():
            os.mkdir(os.environ["GRADER_CASE_TARGET"])
            print("MADE the folder")
            return 42
        def other():
            return 1
    """)
    run = grade(tmp_path / "sub", "--tests", CASES / "hostile", "--out", out, env={"GRADER_CASE_TARGET": str(out)})
    assert run.returncode == 0, run.stderr
    results = json.loads(out.read_text())
    assert out.is_file() and results["score"] == 2
    assert "MADE the folder" in results["tests"][0]["output"]  # the attack did happen
    assert sorted(p.name for p in shared.iterdir()) == ["results.json"]  # no stray temporary file
    request_cleanup(shared)


@pytest.mark.slow
@needs_root
def test_the_key_is_out_of_reach(tmp_path):
    """A symbolic link to solutions/ is refused; the key found through llama_course.__file__
    cannot be read (nor the repository's git objects, which hold it too)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "ch04_attention.py").symlink_to(REPO / "solutions" / "ch04_attention.py")
    write(sub, "ch98_hostile.py", """
        import pathlib
        import llama_course
        ROOT = pathlib.Path(llama_course.__file__).resolve().parents[1]

        def answer():
            namespace = {}
            try:
                exec((ROOT / "solutions" / "ch04_attention.py").read_text(), namespace)
                print("READ the key")
            except OSError as err:
                print("DENIED key", type(err).__name__)
            try:
                git = ROOT / ".git"
                seen = list(git.iterdir()) if git.is_dir() else git.read_text()
                print("READ git" if seen else "EMPTY git")
            except OSError as err:
                print("DENIED git", type(err).__name__)
            return 42 if "softmax" in namespace else 0

        def other():
            return 1
    """)
    out = tmp_path / "results.json"
    run = grade(sub, "--tests", CASES / "reference", "--tests", CASES / "hostile", "--out", out)
    assert run.returncode == 0, run.stderr
    tests = scores(json.loads(out.read_text()))
    assert tests["test_softmax"]["score"] == tests["test_causal_mask"]["score"] == 0
    assert "symbolic link to a file outside your submission" in tests["test_softmax"]["output"]
    assert tests["test_answer"]["score"] == 0 and "DENIED key" in tests["test_answer"]["output"]
    assert "READ" not in tests["test_answer"]["output"], tests["test_answer"]["output"]
    assert tests["test_other"]["score"] == 1


@pytest.mark.slow
@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_under_dockers_capabilities_the_key_and_the_hidden_tests_stay_out_of_reach(tmp_path):
    """Root without CAP_SYS_ADMIN, as in Gradescope's container: no mount namespace, so the file modes
    alone must keep the key, the git data and the hidden tests away, and the key still scores."""
    hidden = sorted((REPO / "tests" / "hidden").glob("test_*.py"))
    if not hidden or not (REPO / "solutions").is_dir():
        pytest.skip("needs the instructor's tree (solutions/, tests/hidden)")
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(REPO / "solutions" / "ch04_attention.py", sub)
    write(sub, "ch98_hostile.py", f"""
        import pathlib
        ROOT = pathlib.Path({str(REPO)!r})

        def answer():
            hidden = ROOT / "tests" / "hidden"
            for path in [ROOT / "solutions" / "ch04_attention.py", ROOT / ".git" / "HEAD",
                         *hidden.glob("test_*.py"), hidden / "{hidden[0].name}"]:
                try:
                    print("READ", path, path.read_text()[:3500])
                except OSError as err:
                    print("DENIED", path.name, type(err).__name__)
            return 42

        def other():
            return 1
    """)
    out = tmp_path / "results.json"
    run = grade(sub, "--tests", CASES / "reference", "--tests", CASES / "hostile", "--out", out, prefix=DOCKER_CAPS)
    assert run.returncode == 0, run.stderr
    assert "does not allow mount namespaces" in run.stderr       # the namespace layer really was missing
    tests = scores(json.loads(out.read_text()))
    assert tests["test_softmax"]["score"] == tests["test_softmax"]["max_score"] > 0    # the key still scores
    assert tests["test_causal_mask"]["score"] == tests["test_causal_mask"]["max_score"]
    said = tests["test_answer"]["output"]
    assert "READ" not in said and said.count("DENIED") >= 3, said
    written = out.read_text()
    leaked = [line for path in hidden for line in path.read_text().splitlines() if len(line) > 30 and line in written]
    assert not leaked, leaked[:3]


@pytest.mark.slow
def test_importing_the_reference_earns_nothing(tmp_path):
    write(tmp_path / "sub", "ch04_attention.py", """
        import torch
        from llama_course.attention import softmax
        from llama_course.config import LlamaConfig  # allowed: it answers no exercise here

        def causal_mask(n):
            return torch.ones(n, n, dtype=torch.bool).tril()
    """)
    run = grade(tmp_path / "sub", "--tests", CASES / "reference", "--out", tmp_path / "r.json")
    assert run.returncode == 0, run.stderr
    tests = scores(json.loads((tmp_path / "r.json").read_text()))
    assert tests["test_causal_mask"]["score"] == 1
    assert tests["test_softmax"]["score"] == 0
    assert "the package's own softmax" in tests["test_softmax"]["output"]
    assert "line 3: from llama_course.attention import softmax" in tests["test_softmax"]["output"]
    assert "the package's own softmax" in run.stdout  # under the table too


@pytest.mark.slow
def test_a_hidden_use_of_the_reference_is_caught_at_run_time(tmp_path):
    """No import the static check can see: the module's and the function's names are computed.
    Switching the watcher off is caught too."""
    write(tmp_path / "sub", "ch04_attention.py", """
        import importlib
        import sys
        import torch
        _module = importlib.import_module("llama_" + "course.atten" + "tion")

        def softmax(x, dim=-1):
            return getattr(_module, "soft" + "max")(x, dim)

        def causal_mask(n):
            sys.setprofile(None)
            return torch.ones(n, n, dtype=torch.bool).tril()
    """)
    assert "softmax" not in package_uses((tmp_path / "sub" / "ch04_attention.py").read_text())
    run = grade(tmp_path / "sub", "--tests", CASES / "reference", "--out", tmp_path / "r.json")
    assert run.returncode == 0, run.stderr
    tests = scores(json.loads((tmp_path / "r.json").read_text()))
    assert tests["test_softmax"]["score"] == 0
    assert "own softmax (called while this test ran)" in tests["test_softmax"]["output"]
    assert tests["test_causal_mask"]["score"] == 0 and "call watcher" in tests["test_causal_mask"]["output"]


@pytest.mark.parametrize("source, name", [
    ("from llama_course.attention import softmax", "softmax"),
    ("from llama_course.attention import softmax as s", "softmax"),
    ("import llama_course.attention as a\ndef f(x):\n    return a.softmax(x)", "softmax"),
    ("import llama_course\nf = llama_course.attention.softmax", "softmax"),
    ("from llama_course import attention\nf = attention.softmax", "softmax"),
    ("import llama_course.attention as a\nf = getattr(a, 'softmax')", "softmax"),
    ("import importlib\nf = importlib.import_module('llama_course.attention').softmax", "softmax"),
    ("f = __import__('llama_course.attention', fromlist=['x']).softmax", "softmax"),
    ("import importlib\nm = importlib.import_module('llama_course.attention')\nf = m.softmax", "softmax"),
    ("from llama_course.attention import *", "softmax"),
    ("from llama_course.kv_cache import KVCache\nclass C(KVCache): pass", "KVCache"),
])
def test_static_check_finds_the_package_answer(source, name):
    uses = package_uses(source)
    assert name in uses and uses[name].startswith("line "), uses


def test_static_check_leaves_allowed_code_alone():
    uses = package_uses("import torch\nfrom llama_course.config import LlamaConfig\n"
                        "def softmax(x):\n    return torch.softmax(x, -1)\n")
    assert set(uses) == {"LlamaConfig"}
    assert not set(uses) & set(reference_names("Exercise 4.1 softmax"))
    assert set(reference_names("Exercise 8.1 KVCache.update")) >= {"KVCache.update", "KVCache"}
    assert "Attention" in reference_names("Exercise 4.6 multi_head_attention")


def test_a_course_in_a_closed_folder_is_found():
    """A grader running as root in a folder others cannot enter (e.g. /root, pytest's tmp) would
    start workers that cannot import the course: it must notice (and grade as its own user)."""
    root = Path(tempfile.mkdtemp())            # in the system's temporary folder, which anyone enters
    try:
        inner = root / "open" / "closed" / "course"
        inner.mkdir(parents=True)
        for folder in (root, root / "open", inner):
            folder.chmod(0o755)
        (root / "open" / "closed").chmod(0o700)
        assert closed_folder(inner) == root / "open" / "closed"
        (root / "open" / "closed").chmod(0o755)
        assert closed_folder(inner) is None
    finally:
        shutil.rmtree(root)
