"""Run a student's file in a separate process and call into it from the tests.

The grader never imports student code. Each graded test gets a fresh worker process that
imports the student's file; the test (its inputs, its oracle, its assertions) runs in the
grader's own process and reaches the student's functions through a proxy:

    sandbox = Sandbox("exercises/ch01_anatomy.py", timeout=60)
    module = sandbox.module                 # a Remote for the student's module
    module.ffn_hidden_dim(4096)             # runs in the worker, returns 11008 here

What comes back is plain data only -- None, bool, int, float, complex, str, bytes, tensors
(detached, plain torch.Tensor), dtypes, devices, and lists/tuples/dicts of those -- decoded with
``torch.load(weights_only=True)``, so nothing the worker sends can run code in the grader.
Any other object stays in the worker and comes back as a ``Remote`` handle whose attributes,
calls, ``len`` and iteration are again forwarded to the worker. A ``Remote`` never compares
equal to anything but itself, so a student object cannot fake an ``==``.

Confinement (``Confinement``, chosen once by the grader with ``confine()``). When the grader runs
as root on Linux, each worker, before it imports the student's file:
    - leaves the grader's session (``setsid``) and gets its own mount namespace in which the key
      (``solutions/``), the hidden tests and the repository's git objects are empty, unreadable
      folders, and its own network namespace (no network), where the kernel allows them;
    - limits its memory (RLIMIT_DATA, ``--memory-limit``), file sizes and process count
      (RLIMIT_NPROC, and a cgroup's ``pids.max`` where the grader may make one), and offers itself
      first to the kernel's out-of-memory killer (``oom_score_adj`` 1000), so that a fork bomb or
      a memory hog in a small container kills student processes, never the grader;
    - drops to the unprivileged user ``llama-course-student`` (created on first use), who cannot
      write the results file or its folder, the tests, the package or the grader's tree, and
      cannot signal the grader.
After each test every process of that user is killed (daemons that double-forked and called
``setsid`` included), so nothing the student started outlives the test or sees the results file.
Not root (a student's laptop): the worker runs as the grader's own user, which is fine for
checking one's own work but not for grading untrusted code; the grader says so.

What student code can do, and what it costs it:
    raise             the exception comes back (builtin types keep their type, e.g. ValueError)
    hang              the call waits at most until the test's deadline, then the worker is killed
    sys.exit()        reported as an error of that call
    os._exit(), crash the worker's death is reported; the next test gets a new worker
    print megabytes   captured to a file in the worker; the grader reads at most OUTPUT_LIMIT
    write files       only in its own temporary folder (as the sandbox user)
    patch torch       patches only the worker's torch; the assertions run in the grader
    use the package   calls of the package's own answer to the exercise under test are recorded
                      (``watch``) and cost the test its points
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import importlib
import importlib.util
import inspect
import io
import multiprocessing
import os
import pickle
import pkgutil
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import torch

OUTPUT_LIMIT = 16_384      # bytes of the student's stdout/stderr kept per test
FILE_SIZE_LIMIT = 1 << 30  # no file the worker writes (its captured output included) may exceed 1 GiB
MEMORY_LIMIT = 8 << 30     # default data-segment limit of a worker (--memory-limit)
STARTUP_SECONDS = 300      # for a worker to start, before the student's file is imported
PROCESS_LIMIT = 256        # processes and threads the sandbox user may run at once (RLIMIT_NPROC, pids.max)
LEFTOVER_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")  # where any user may leave files; cleared of the worker's
SANDBOX_USER = "llama-course-student"  # used where per-run user ids are not available
UID_BASE = 1_500_000_000  # + the grader's pid: each grader run's own unprivileged user id
_COURSE = Path(__file__).resolve().parents[2]  # the folder that holds llama_course/
TAMPERED = "<the grader's checks>"  # recorded when student code replaces the call watcher


class ConfinementError(RuntimeError):
    """Student code cannot be confined on this machine; the message says what to do instead.
    The grader then grades nothing (it never falls back to running other people's code as root)."""


class StudentCodeError(Exception):
    """The student's code failed in a way that has no builtin exception type."""


class StudentTimeout(StudentCodeError):
    """The student's code did not answer before the test's deadline."""


class StudentCrash(StudentCodeError):
    """The worker process running the student's code died."""


@dataclass(frozen=True)
class Confinement:
    """How a worker is confined: the user it runs as (None: the grader's own), the paths hidden
    from it, and its memory limit in bytes (0: none)."""

    uid: int | None = None
    gid: int | None = None
    hide: tuple[str, ...] = ()
    memory_limit: int = MEMORY_LIMIT
    moved: tuple[tuple[str, str], ...] = ()  # (folder, readable copy): where the worker imports from instead
    offline: bool = False  # the worker gets its own, empty network namespace
    cgroup: str = ""       # a pids cgroup (pids.max = PROCESS_LIMIT) the worker joins, or ""


# --------------------------------------------------------------------------------------------
# Choosing the confinement (the grader, once)
# --------------------------------------------------------------------------------------------

def closed_folder(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that other users may not enter (no o+x), or None."""
    for folder in reversed([path, *path.parents]):
        if folder.is_dir() and not folder.stat().st_mode & 0o001:
            return folder
    return None


def confine(hide: list[Path], memory_limit: int = MEMORY_LIMIT, same_user: bool = False,
            own: bool = False) -> tuple[Confinement, list[str]]:
    """The strongest confinement this machine allows, and warnings about what is missing.

    As root: a user id of this grader run's own (UID_BASE + the grader's pid: no other process,
    no other grader run, no file uses it), else the named user SANDBOX_USER (created if missing).
    What student code must not read (``hide``) is closed to other users by its mode (o-rwx), and a
    probe as that user checks it cannot be read; a mount namespace, where the kernel allows one,
    covers it a second time. Raises ConfinementError where root cannot confine (a closed folder above
    the course, a hidden path still readable): it never runs other people's code as root. ``own``: the
    code is the course's own exercises/ (the caller's), which may run unconfined where root cannot confine."""
    hide = [str(p) for p in hide if os.path.lexists(p)]
    root = sys.platform.startswith("linux") and os.geteuid() == 0
    closed = closed_folder(_COURSE) if root else None
    if same_user or not root or (closed and own):
        why = ("--same-user was given" if same_user else "the grader is not running as root" if not closed else
               f"{closed} is closed to other users, and these are the course's own exercises/")
        return Confinement(memory_limit=memory_limit), [
            f"student code runs as your own user ({why}): it can read your files (the key included) "
            f"and signal the grader. That is fine for checking your own work; grade other people's "
            f"code as root (e.g. in a container or with sudo), where it runs as an unprivileged user."]
    if closed:
        raise ConfinementError(
            f"{closed} is closed to other users (mode {oct(closed.stat().st_mode & 0o777)}), so the unprivileged "
            f"user that runs student code could not read the course, and grading it as root would let it read "
            f"the key and rewrite the results. Let other users enter the folder (chmod o+x {closed}) or put the "
            f"course in one they can enter; to check only your own work, pass --same-user.")
    uid = UID_BASE + os.getpid()
    namespaces, switch, offline = _probe(uid)
    uid, gid = (uid, uid) if switch else ensure_user(SANDBOX_USER)
    end_processes_of(uid)  # leftovers of an earlier, killed run with the same id
    remove_files_of(uid)
    warnings = [f"closed {path} to other users (chmod o-rwx): student code must not read it"
                for path in close_to_others(hide)]
    readable = readable_by(uid, gid, hide)
    if readable:
        raise ConfinementError(
            f"the user that runs student code (uid {uid}) can still read {', '.join(readable)} although it is "
            f"closed to other users (a group or an ACL lets it in?): remove it from the grading machine, "
            f"or make it readable by its owner only (chmod 700), then grade again")
    moved, staged = readable_environment(uid, gid)
    warnings += staged
    if hide and not namespaces:
        warnings.append("this machine does not allow mount namespaces: the key and the hidden tests are hidden "
                        "from student code by their file modes only")
        hide = []
    if not offline:
        warnings.append("this machine does not allow network namespaces (unshare -n): student code can reach "
                        "whatever network the grading machine reaches")
    cgroup = pids_cgroup(uid)
    return Confinement(uid, gid, tuple(hide), memory_limit, moved, offline, cgroup), warnings


def describe(confinement: Confinement) -> str:
    """One line that says how student code is confined (printed by the grader: the line to look for
    on a grading machine to check that the sandbox engaged)."""
    if confinement.uid is None:
        return "sandbox: off: student code runs as the grader's own user"
    return (f"sandbox: on: student code runs as uid {confinement.uid} (not root); key and hidden tests closed by "
            f"file modes{', and hidden by a mount namespace' if confinement.hide else ''}; network: "
            f"{'none (own namespace)' if confinement.offline else 'reachable (no network namespace here)'}; "
            f"processes: at most {PROCESS_LIMIT} (RLIMIT_NPROC{', cgroup pids.max' if confinement.cgroup else ''})")


def pids_cgroup(uid: int) -> str:
    """A cgroup beside the grader's own whose pids.max is PROCESS_LIMIT, for ``uid``'s workers (removed at
    exit), or "" where the grader may not make one (a container's read-only /sys/fs/cgroup)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        entries = {fields[1]: fields[2] for fields in (line.split(":", 2) for line in lines)}
        v1, v2 = entries.get("pids"), entries.get("")
        mount = Path("/sys/fs/cgroup/pids") if v1 is not None else Path("/sys/fs/cgroup")
        own = mount / (v1 if v1 is not None else v2 or "/").lstrip("/")
        if v1 is None and "pids" not in (own / "cgroup.controllers").read_text().split():
            return ""
        if v1 is None:
            (own / "cgroup.subtree_control").write_text("+pids")
        group = own / f"llama-course-{uid}"
        group.mkdir(exist_ok=True)
        (group / "pids.max").write_text(str(PROCESS_LIMIT))
    except (OSError, ValueError, IndexError):
        return ""
    atexit.register(_remove_cgroup, str(group), uid)
    return str(group)


def _remove_cgroup(group: str, uid: int) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        end_processes_of(uid)
        os.rmdir(group)


def close_to_others(paths: list[str]) -> list[str]:
    """Removes the permissions of "others" from each path (not following links); the paths changed."""
    changed = []
    for path in paths:
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode) and mode & 0o007:
            os.chmod(path, stat.S_IMODE(mode) & ~0o007)
            changed.append(path)
    return changed


def readable_by(uid: int, gid: int, paths: list[str]) -> list[str]:
    """The paths a process running as ``uid``:``gid`` (no supplementary groups) can still read or list."""
    if not paths:
        return []
    code = (f"import os, sys; os.setgroups([]); os.setgid({gid}); os.setuid({uid})\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').close()\n"
            "        print(p)\n"
            "    except OSError:\n"
            "        pass\n")
    probe = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True)
    if probe.returncode != 0:
        raise ConfinementError(f"could not check, as uid {uid}, that student code cannot read the key and the "
                               f"hidden tests: {probe.stderr.strip().splitlines()[-1:] or probe.returncode}")
    return [line for line in probe.stdout.splitlines() if line]


STDLIB_LEFT_OUT = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                   "lib2to3", "__pycache__")  # not copied when the standard library is staged
PREFLIGHT_IMPORTS = ("statistics", "fractions", "decimal", "heapq", "bisect", "json", "unicodedata", "sympy")


def readable_environment(uid: int, gid: int) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    """Make sure the worker (``uid``) can import what an honest answer imports: the standard library,
    site-packages and the course. A standard library it cannot read (a Python under a closed home
    folder: pyenv, uv, conda in /root) is copied into a readable folder for this run (removed at exit)
    and the worker imports from the copy; site-packages or the course it cannot read cannot be copied
    (torch alone is gigabytes), so grading is refused with what to do. Then a probe imports
    PREFLIGHT_IMPORTS as ``uid`` from the copy; any that fails refuses grading, naming its file.
    Returns the (folder, copy) pairs and a note for each copy made."""
    stdlib = sorted({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")})
    packages = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")} | {str(_COURSE)})
    packages = [path for path in packages if os.path.isdir(path)]
    readable = readable_by(uid, gid, packages + stdlib)
    closed = [path for path in packages if path not in readable]
    if closed:
        raise ConfinementError(
            f"the user that runs student code (uid {uid}) cannot read {', '.join(closed)} (a closed folder on the "
            f"way: {closed_folder(Path(closed[0]))}), so honest code that imports from it would fail only in the "
            f"grader. Install the course where other users can read it (e.g. clone it under /opt or /srv and run "
            f"make install there with a system Python such as /usr/bin/python3), or let others enter the folders "
            f"on the way (chmod o+x), then grade again")
    unreadable = [path for path in stdlib if os.path.isdir(path) and path not in readable]
    moved = tuple((path, _readable_copy(path)) for path in unreadable)
    notes = [f"the standard library {path} is closed to the user that runs student code: it imports from a "
             f"readable copy made for this run ({copy})" for path, copy in moved]
    _preflight(uid, gid, moved)
    return moved, notes


def _readable_copy(folder: str) -> str:
    """A copy of ``folder`` (a standard library, without STDLIB_LEFT_OUT) that every user can read
    and only root can write, removed when the grader exits."""
    copy = tempfile.mkdtemp(prefix="llama-course-python-")
    atexit.register(shutil.rmtree, copy, True)
    target = os.path.join(copy, os.path.basename(folder))
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(*STDLIB_LEFT_OUT), copy_function=shutil.copyfile,
                    ignore_dangling_symlinks=True)
    for where, _, files in os.walk(copy):
        os.chmod(where, 0o755)
        for name in files:
            os.chmod(os.path.join(where, name), 0o644)
    return target


def _preflight(uid: int, gid: int, moved: tuple[tuple[str, str], ...]) -> None:
    """Import PREFLIGHT_IMPORTS as ``uid``, the way a worker does (started as root, then switched,
    imports moved); raise ConfinementError naming the first that fails and its file."""
    code = (f"import importlib, importlib.util, os, sys\n{inspect.getsource(move_imports)}\n"
            f"found = {{n: getattr(importlib.util.find_spec(n), 'origin', None) for n in sys.argv[1:]}}\n"
            f"os.setgroups([]); os.setgid({gid}); os.setuid({uid}); move_imports({moved!r})\n"
            "for name, origin in found.items():\n"
            "    if origin is None: continue\n"
            "    try: __import__(name)\n"
            "    except Exception as err: sys.exit(f'{name} ({origin}): {type(err).__name__}: {err}')\n")
    probe = subprocess.run([sys.executable, "-c", code, *PREFLIGHT_IMPORTS], capture_output=True, text=True,
                           cwd=tempfile.gettempdir())
    if probe.returncode != 0:
        failed = (probe.stderr.strip().splitlines() or [f"(exit code {probe.returncode})"])[-1]
        raise ConfinementError(
            f"the user that runs student code (uid {uid}) cannot import {failed}; "
            f"honest code would fail only in the grader. Install the course and its Python where other "
            f"users can read them (e.g. under /opt with /usr/bin/python3), then grade again")


def move_imports(moved) -> None:
    """In a worker: import from the readable copies instead of the folders they copy (sys.path and
    the __path__ of packages already imported)."""
    pairs = sorted(((old, new) for old, new in moved), key=lambda pair: -len(pair[0]))

    def move(path: str) -> str:
        for old, new in pairs:
            if path == old or path.startswith(old + os.sep):
                return new + path[len(old):]
        return path

    if not pairs:
        return
    sys.path[:] = [move(path) for path in sys.path]
    for module in list(sys.modules.values()):
        path = getattr(module, "__path__", None)
        if isinstance(path, list):
            path[:] = [move(entry) for entry in path]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def ensure_user(name: str) -> tuple[int, int]:
    """(uid, gid) of the sandbox user, created (system user, no home, no login) if missing."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", "--user-group", name],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise RuntimeError(f"the sandbox user {name} has uid 0")
    return entry.pw_uid, entry.pw_gid


def _probe(uid: int) -> tuple[bool, bool, bool]:
    """(mount namespaces work, a process can switch to ``uid``, network namespaces work), tried in
    throwaway processes."""
    unshare = "import ctypes, sys; sys.exit(ctypes.CDLL(None, use_errno=True).unshare({}) != 0)"
    switch = f"import os; os.setgroups([]); os.setgid({uid}); os.setuid({uid})"
    return tuple(subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
                 for code in (unshare.format(CLONE_NEWNS), switch, unshare.format(CLONE_NEWNET)))


CLONE_NEWNS, CLONE_NEWNET = 0x20000, 0x40000000


def end_processes_of(uid: int, rounds: int = 100) -> None:
    """Kill every process of ``uid`` (never 0): at once, by a process of that uid calling kill(-1)
    (which no fork can outrun), then by pid until none is left."""
    if not uid:
        raise ValueError("refusing to kill the processes of root")
    if _live_pids_of(uid):
        _kill_all_as(uid)
    for _ in range(rounds):
        pids = _live_pids_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    raise RuntimeError(f"could not end the processes of uid {uid}: {_live_pids_of(uid)}")


def _kill_all_as(uid: int) -> None:
    """Fork; the child becomes ``uid`` and sends SIGKILL to every process it may signal (all of
    ``uid``'s, itself aside), then exits."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def remove_files_of(uid: int, folders: tuple[str, ...] = LEFTOVER_FOLDERS) -> list[str]:
    """Remove everything ``uid`` owns in the folders where any user may write (and in the
    world-writable folders inside them), never following links; returns what was removed."""
    if not uid:
        raise ValueError("refusing to remove the files of root")
    removed, todo = [], [f for f in folders if os.path.isdir(f) and not os.path.islink(f)]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if info.st_uid == uid:
                        shutil.rmtree(entry.path) if stat.S_ISDIR(info.st_mode) else os.unlink(entry.path)
                        removed.append(entry.path)
                    elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                        todo.append(entry.path)
    return removed


def _live_pids_of(uid: int) -> list[int]:
    """Processes whose real or effective uid is ``uid``, zombies excluded."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        uids = status.get("Uid", "").split()
        if str(uid) in uids[:2] and not status.get("State", "").strip().startswith(("Z", "X")):
            pids.append(int(entry.name))
    return pids


# --------------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------------

def _teaching_modules() -> list[str]:
    """Every course module except the grading tools (imported by the worker before student code)."""
    import llama_course

    names = ["llama_course"]
    for info in pkgutil.walk_packages(llama_course.__path__, "llama_course."):
        if not info.name.startswith("llama_course.grade"):
            names.append(info.name)
    return names


def _context():
    # forkserver: a clean server process with torch and the package already imported forks each
    # worker in milliseconds. Where fork is unsafe (macOS, Windows), spawn a fresh interpreter.
    if sys.platform.startswith("linux"):
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "llama_course.grade.sandbox", *_teaching_modules()])
        return ctx
    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def _main_module_hidden():
    """multiprocessing re-runs the parent's __main__ (pytest, the grader) in every new worker;
    show it an empty __main__ while the worker starts, so the worker imports only what it needs."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class Sandbox:
    """One worker process serving one student file until ``close()`` or its deadline.

    ``watch``: names of package functions/classes (``softmax``, ``KVCache``,
    ``BPETokenizer.encode``) whose use by the student's code is recorded in ``touched``."""

    def __init__(self, path: str | os.PathLike, timeout: float = 60.0, confinement: Confinement | None = None,
                 watch: tuple[str, ...] = (), hung: set[str] = frozenset()):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"no such student file: {self.path}")
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.confinement = confinement or Confinement()
        self.output = ""
        self.touched: list[str] = []
        self.hung, self.last_name = hung, None  # functions that timed out before; the last one asked for
        self.timed_out = self.import_timed_out = False
        self._ready = False
        self._load_error = None
        self._dead: str | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="llama-course-student-")
        if self.confinement.uid is not None:
            os.chown(self._workdir.name, self.confinement.uid, self.confinement.gid)
        ctx = _context()
        self._conn, child_conn = ctx.Pipe()
        self._process = ctx.Process(target=_serve, daemon=True,
                                    args=(child_conn, str(self.path), self._workdir.name, self.confinement, watch))
        with _main_module_hidden():
            self._process.start()
        child_conn.close()
        self.module = Remote(self, 0, self.path.name)

    def request(self, *message):
        """Send one request to the worker and return its decoded answer (or raise its error)."""
        if self._dead:
            raise StudentCrash(self._dead)
        if not self._ready:
            self._start()
            kind, payload = self._receive(f"importing {self.path.name} did not finish within the test's "
                                          f"{self.timeout:g} s: does the file run something slow or endless at "
                                          f"import time (outside a function)?")
            self._ready = True
            self._load_error = payload if kind == "load_error" else None
        if self._load_error:
            raise _rebuild_error(*self._load_error)
        if message[0] == "getattr" and message[1] is self.module:
            self.last_name = message[2]
            if message[2] in self.hung:
                raise StudentTimeout(f"not run: your {message[2]} timed out in an earlier test of this exercise")
        self._send(message)
        kind, payload = self._receive(f"timed out: no answer within the test's {self.timeout:g} s")
        if kind == "ok":
            return payload
        raise _rebuild_error(*payload)

    def _start(self) -> None:
        """Wait for the worker to be up (not the student's time: the first worker also starts the
        forkserver); the test's deadline counts from then."""
        self.deadline = time.monotonic() + STARTUP_SECONDS
        self._receive("grading error: the worker process did not start")
        self.deadline = time.monotonic() + self.timeout

    def _send(self, message) -> None:
        try:
            self._conn.send_bytes(_PersistentPickler.dumps(message))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._died()

    def _receive(self, timeout_message: str):
        remaining = self.deadline - time.monotonic()
        try:
            if remaining <= 0 or not self._conn.poll(remaining):
                self.timed_out, self.import_timed_out = True, not self._ready
                self._kill(timeout_message)
                raise StudentTimeout(self._dead)
            kind, payload, output, touched = _decode(self._conn.recv_bytes(), self)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self._died()
        self.output += output
        self.touched += [name for name in touched if name not in self.touched]
        return kind, payload

    def _died(self):
        self._process.join(1)
        self._kill(f"the process running your code died (exit code {self._process.exitcode}); "
                   f"did it call os._exit(), crash, or run out of memory?")
        raise StudentCrash(self._dead) from None

    def _kill(self, reason: str) -> None:
        self._dead = reason
        if self._process.pid is not None:
            try:  # the worker leads its own process group: take its children with it
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, AttributeError):
                pass
        self._process.kill()
        self._process.join(5)
        if self.confinement.uid is not None:  # and everything else it started, setsid or not
            end_processes_of(self.confinement.uid)

    def close(self) -> None:
        if not self._dead:
            with contextlib.suppress(OSError):
                self._conn.send_bytes(_EXIT)
                self._process.join(2)
            self._kill("closed")
        self._conn.close()
        self._workdir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Remote:
    """A worker-side object seen from the grader. Operations are forwarded to the worker."""

    __slots__ = ("_sandbox", "_handle", "_kind")

    def __init__(self, sandbox: Sandbox, handle: int, kind: str):
        object.__setattr__(self, "_sandbox", sandbox)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_kind", kind)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._sandbox.request("getattr", self, name)

    def __call__(self, *args, **kwargs):
        return self._sandbox.request("call", self, args, kwargs)

    def __len__(self):
        return self._sandbox.request("len", self)

    def __iter__(self):
        return self._sandbox.request("iter", self)

    def __next__(self):
        return self._sandbox.request("next", self)

    def __getitem__(self, key):
        return self._sandbox.request("getitem", self, key)

    def __repr__(self):
        return f"<student {self._kind}>"

    def __reduce__(self):
        raise TypeError("a Remote can only be sent back to its own worker")


class _PersistentPickler(pickle.Pickler):
    """Pickles a request; a Remote travels as its handle number."""

    def persistent_id(self, obj):
        return ("remote", obj._handle) if isinstance(obj, Remote) else None

    @classmethod
    def dumps(cls, obj) -> bytes:
        buffer = io.BytesIO()
        cls(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        return buffer.getvalue()


def _decode(data: bytes, sandbox: Sandbox):
    """Decode an answer: weights_only torch.load (no code runs), then handles become Remotes."""
    kind, payload, output, touched = torch.load(io.BytesIO(data), weights_only=True)
    return kind, _to_remote(payload, sandbox), output, [str(name) for name in touched]


def _to_remote(value, sandbox):
    if isinstance(value, dict):
        if set(value) == {"__remote__", "kind"}:
            return Remote(sandbox, value["__remote__"], value["kind"])
        return {k: _to_remote(v, sandbox) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_remote(v, sandbox) for v in value)
    return value


def _rebuild_error(type_name: str, message: str, student_traceback: str) -> BaseException:
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            error = cls(message)
        except Exception:  # exceptions whose constructor wants other arguments
            error = StudentCodeError(f"{type_name}: {message}")
    else:
        error = StudentCodeError(f"{type_name}: {message}")
    if student_traceback:
        error.__notes__ = [f"in your code:\n{student_traceback}"]
    return error


# --------------------------------------------------------------------------------------------
# The worker's side
# --------------------------------------------------------------------------------------------

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _serve(conn, path: str, workdir: str, confinement: Confinement, watch: tuple[str, ...]) -> None:
    """Worker main: confine this process, import the student's file, answer requests until 'exit'."""
    try:
        _confine(workdir, confinement, conn.fileno())
    except BaseException as err:  # never run student code unconfined
        _send(conn, ("load_error", _describe(err, "grading error: could not set up the sandbox: "), "", []))
        return
    capture = _OutputCapture(workdir)
    from .rules import Guard  # the call watcher plus the grading rules (imports it: not at the top)

    watcher = Guard(watch, path)
    _send(conn, ("started", None, "", []))
    objects: dict[int, object] = {}
    load_error = _import_student(path, objects)
    _send(conn, ("load_error", load_error, capture.read(), watcher.report()) if load_error
          else ("ready", None, capture.read(), watcher.report()))
    while load_error is None:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        if data == _EXIT:
            return
        _send(conn, _answer(data, objects, capture, watcher))


def _confine(workdir: str, confinement: Confinement, keep: int) -> None:
    """Own session, no pipe to root's helpers, hidden paths, resource limits, then the sandbox user
    (fails closed)."""
    if hasattr(os, "setsid"):
        os.setsid()
    if confinement.uid is not None:
        _close_inherited_pipes(keep)
        with contextlib.suppress(OSError):  # the out-of-memory killer takes student processes first
            Path("/proc/self/oom_score_adj").write_text("1000")
    if confinement.cgroup:
        Path(confinement.cgroup, "cgroup.procs").write_text(str(os.getpid()))
    if confinement.offline:
        _unshare(CLONE_NEWNET, "unshare(CLONE_NEWNET)")
    if confinement.hide:
        _hide(confinement.hide)
    _limit("RLIMIT_FSIZE", FILE_SIZE_LIMIT)
    _limit("RLIMIT_CORE", 0)
    if confinement.memory_limit:
        _limit("RLIMIT_DATA", confinement.memory_limit)
    os.chdir(workdir)
    os.environ.update(HOME=workdir, TMPDIR=workdir)
    tempfile.tempdir = workdir
    if confinement.uid is not None:
        _limit("RLIMIT_NPROC", PROCESS_LIMIT)
        os.setgroups([])
        os.setgid(confinement.gid)
        os.setuid(confinement.uid)
        if os.getuid() != confinement.uid or os.geteuid() != confinement.uid:
            raise RuntimeError("could not drop privileges")
    move_imports(confinement.moved)


def _close_inherited_pipes(keep: int) -> None:
    """Close every pipe and socket but the grader's connection (``keep``): a forked worker inherits
    the forkserver's and multiprocessing's resource tracker's, processes running as root that would
    act on what student code wrote to them (the tracker unlinks any /dev/shm name it is sent)."""
    from multiprocessing import resource_tracker

    for fd in map(int, os.listdir("/proc/self/fd")):
        with contextlib.suppress(OSError):
            if fd > 2 and fd != keep and os.readlink(f"/proc/self/fd/{fd}").startswith(("pipe:", "socket:")):
                os.close(fd)
    tracker = resource_tracker._resource_tracker
    tracker._fd, tracker._pid = None, None  # student code that needs one starts its own, as itself


def _limit(name: str, value: int) -> None:
    import resource

    with contextlib.suppress(ValueError, OSError, AttributeError):
        resource.setrlimit(getattr(resource, name), (value, value))


def _unshare(flag: int, what: str) -> None:
    if ctypes.CDLL(None, use_errno=True).unshare(flag) != 0:
        raise OSError(ctypes.get_errno(), f"sandbox: {what} failed")


def _hide(paths: tuple[str, ...]) -> None:
    """In a new mount namespace, cover each path with an empty, unreadable tmpfs (a folder) or
    /dev/null (a file). Raises if the kernel refuses: the worker must not run uncovered."""
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_bind, ms_rec, ms_private = 1, 2, 4, 4096, 16384, 1 << 18

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"sandbox: {what} failed")

    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, ms_rec | ms_private, None), "making mounts private")
    for path in paths:
        target = path.encode()
        if os.path.isdir(path):
            check(libc.mount(b"tmpfs", target, b"tmpfs", ms_rdonly | ms_nosuid | ms_nodev, b"size=4k,mode=000"),
                  f"hiding {path}")
        else:
            check(libc.mount(b"/dev/null", target, None, ms_bind, None), f"hiding {path}")


class _OutputCapture:
    """The worker's stdout and stderr, redirected into a file; read back at most OUTPUT_LIMIT."""

    def __init__(self, workdir: str):
        self.file = tempfile.TemporaryFile(dir=workdir)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        self.sent = 0

    def read(self) -> str:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        size = os.fstat(self.file.fileno()).st_size
        if self.sent >= OUTPUT_LIMIT:
            return ""
        data = os.pread(self.file.fileno(), OUTPUT_LIMIT - self.sent, self.sent)
        self.sent += len(data)
        text = data.decode("utf-8", "replace")
        if size > OUTPUT_LIMIT and self.sent >= OUTPUT_LIMIT:
            text += f"\n[... {size - OUTPUT_LIMIT} more bytes of output not shown]"
        return text


def _import_student(path: str, objects: dict[int, object]):
    """Import the student's file as objects[0]; return None, or the error's description."""
    try:
        sys.path.insert(0, str(Path(path).parent))
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        objects[0] = module
        return None
    except BaseException as err:  # SyntaxError, ImportError, even SystemExit at import time
        return _describe(err, f"could not import {Path(path).name}: ")


def _answer(data: bytes, objects: dict[int, object], capture: _OutputCapture, watcher: _Watcher):
    """Perform one request; the answer (kind, payload, output, package names the code touched)."""
    try:
        unpickler = pickle.Unpickler(io.BytesIO(data))
        unpickler.persistent_load = lambda pid: objects[pid[1]]
        result = _perform(*unpickler.load())
        answer = ("ok", _pack(result, objects), capture.read(), watcher.report())
    except BaseException as err:  # the student's exception, SystemExit and KeyboardInterrupt too
        answer = ("error", _describe(err), capture.read(), watcher.report())
    return answer


def _send(conn, answer) -> None:
    buffer = io.BytesIO()
    try:
        torch.save(answer, buffer)
    except Exception as err:
        buffer = io.BytesIO()
        torch.save(("error", _describe(err, "could not send the result back: "), *answer[2:]), buffer)
    conn.send_bytes(buffer.getvalue())


_EXIT = _PersistentPickler.dumps(("exit",))


class _Watcher:
    """Records which watched package functions run on behalf of the student's code: a call of a
    watched function whose callers up the stack include no other package code (the package
    calling its own helpers, e.g. a model the test passed in, does not count)."""

    def __init__(self, watch: tuple[str, ...]):
        self.touched: list[str] = []
        self.watched: dict[int, str] = {}
        self.package: set[int] = set()
        if not watch:
            return
        for module in _loaded_teaching_modules():
            self._index(module, set(watch))
        self.hook = self._profile
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)

    def _index(self, module, watch: set[str]) -> None:
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            for qualname, code in _codes_of(name, value):
                self.package.add(id(code))
                for entry in (qualname, qualname.split(".")[0]):
                    if entry in watch:
                        self.watched[id(code)] = entry

    def _profile(self, frame, event, arg):
        if event == "call":
            name = self.watched.get(id(frame.f_code))
            if name is not None and name not in self.touched and self._for_student(frame.f_back):
                self.touched.append(name)
        elif event == "c_call" and arg in (sys.setprofile, sys.settrace, threading.setprofile):
            self._tampered()

    def _for_student(self, frame) -> bool:
        while frame is not None:
            if id(frame.f_code) in self.package:
                return False
            frame = frame.f_back
        return True

    def _tampered(self) -> None:
        if TAMPERED not in self.touched:
            self.touched.append(TAMPERED)

    def report(self) -> list[str]:
        if self.watched and sys.getprofile() != self.hook:
            self._tampered()
        return list(self.touched)


def _loaded_teaching_modules():
    return [m for name, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)
            and name.partition(".")[0] == "llama_course" and not name.startswith("llama_course.grade")]


def _codes_of(name: str, value):
    """(qualified name, code object) of a function, or of every method of a class, nested code too."""
    functions = []
    if isinstance(value, types.FunctionType):
        functions = [(name, value)]
    elif isinstance(value, type):
        for attr, member in vars(value).items():
            member = getattr(member, "__func__", member)
            member = getattr(member, "fget", member)
            if isinstance(member, types.FunctionType):
                functions.append((f"{name}.{attr}", member))
    for qualname, function in functions:
        stack = [function.__code__]
        while stack:
            code = stack.pop()
            yield qualname, code
            stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]


def _perform(op: str, target, *args):
    if op == "getattr":
        return getattr(target, args[0])
    if op == "call":
        return target(*args[0], **args[1])
    if op == "len":
        return len(target)
    if op == "iter":
        return iter(target)
    if op == "next":
        return next(target)
    if op == "getitem":
        return target[args[0]]
    raise ValueError(f"unknown request {op!r}")


def _describe(err: BaseException, prefix: str = "") -> tuple[str, str, str]:
    """(type name, message, traceback without the grader's frames) of an exception."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.endswith("sandbox.py")]
    name = type(err).__name__
    if isinstance(err, SystemExit):
        message = f"your code called sys.exit({err.code!r})"
        name = "SystemExit"
    elif isinstance(err, SyntaxError):
        message = f"{err.msg} ({Path(err.filename or '?').name}, line {err.lineno})"
        if err.text:
            message += f"\n    {err.text.rstrip()}"
    else:
        message = str(err)
    return name, prefix + message, "".join(traceback.format_list(frames[-8:]))


def _plain_key(key) -> bool:
    """Dictionary keys that travel by value: exact str, int, bytes, or tuples of them."""
    if type(key) in (str, int, bytes):
        return True
    return type(key) is tuple and all(_plain_key(k) for k in key)


def _pack(value, objects: dict[int, object], depth: int = 0):
    """Plain data goes back by value (exact builtin types only); anything else by handle."""
    if depth > 50:
        raise ValueError("result is nested more than 50 levels deep")
    if isinstance(value, _PLAIN) and type(value) in _PLAIN:
        return value
    if isinstance(value, torch.Size):
        return tuple(int(n) for n in value)
    if isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor).clone()
    if isinstance(value, (bool, int, float, complex, str, bytes)):  # subclasses become their base type
        for base in (bool, int, float, complex, str, bytes):
            if isinstance(value, base):
                return base(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return _pack(value.item(), objects, depth + 1)
    if isinstance(value, (list, tuple)):
        return (list if isinstance(value, list) else tuple)(_pack(v, objects, depth + 1) for v in value)
    if isinstance(value, dict) and all(_plain_key(k) for k in value):
        return {k: _pack(v, objects, depth + 1) for k, v in value.items()}
    handle = len(objects)
    objects[handle] = value
    return {"__remote__": handle, "kind": type(value).__name__}
