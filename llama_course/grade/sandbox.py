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

What student code can do, and what it costs it:
    raise             the exception comes back (builtin types keep their type, e.g. ValueError)
    hang              the call waits at most until the test's deadline, then the worker is killed
    sys.exit()        reported as an error of that call
    os._exit(), crash the worker's death is reported; the next test gets a new worker
    print megabytes   captured to a file in the worker; the grader reads at most OUTPUT_LIMIT
    write files       the worker runs in its own temporary directory; the grader writes its
                      results only after every worker is gone
    patch torch       patches only the worker's torch; the assertions run in the grader
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import io
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import torch

OUTPUT_LIMIT = 16_384      # bytes of the student's stdout/stderr kept per test
FILE_SIZE_LIMIT = 1 << 30  # no file the worker writes (its captured output included) may exceed 1 GiB


class StudentCodeError(Exception):
    """The student's code failed in a way that has no builtin exception type."""


class StudentTimeout(StudentCodeError):
    """The student's code did not answer before the test's deadline."""


class StudentCrash(StudentCodeError):
    """The worker process running the student's code died."""


# --------------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------------

def _context():
    # forkserver: a clean server process with torch already imported forks each worker in
    # milliseconds. Where fork is unsafe (macOS, Windows), spawn a fresh interpreter instead.
    if sys.platform.startswith("linux"):
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "llama_course.grade.sandbox"])
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
    """One worker process serving one student file until ``close()`` or its deadline."""

    def __init__(self, path: str | os.PathLike, timeout: float = 60.0):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"no such student file: {self.path}")
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.output = ""
        self._dead: str | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="llama-course-student-")
        ctx = _context()
        self._conn, child_conn = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child_conn, str(self.path), self._workdir.name),
                                    daemon=True)
        with _main_module_hidden():
            self._process.start()
        child_conn.close()
        self.module = Remote(self, 0, self.path.name)

    def request(self, *message):
        """Send one request to the worker and return its decoded answer (or raise its error)."""
        if self._dead:
            raise StudentCrash(self._dead)
        try:
            self._conn.send_bytes(_PersistentPickler.dumps(message))
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or not self._conn.poll(remaining):
                self._kill(f"timed out: no answer within the test's {self.timeout:g} s")
                raise StudentTimeout(self._dead)
            kind, payload, output = _decode(self._conn.recv_bytes(), self)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self._process.join(1)
            self._kill(f"the process running your code died (exit code {self._process.exitcode}); "
                       f"did it call os._exit() or crash?")
            raise StudentCrash(self._dead) from None
        self.output += output
        if kind == "ok":
            return payload
        raise _rebuild_error(*payload)

    def _kill(self, reason: str) -> None:
        self._dead = reason
        if self._process.pid is not None:
            try:  # the worker leads its own process group: take its children with it
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, AttributeError):
                pass
        self._process.kill()
        self._process.join(5)

    def close(self) -> None:
        if not self._dead:
            try:
                self._conn.send_bytes(_EXIT)
                self._process.join(2)
            except OSError:
                pass
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
    kind, payload, output = torch.load(io.BytesIO(data), weights_only=True)
    return kind, _to_remote(payload, sandbox), output


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
    error.__notes__ = [f"in your code:\n{student_traceback}"]
    return error


# --------------------------------------------------------------------------------------------
# The worker's side
# --------------------------------------------------------------------------------------------

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _serve(conn, path: str, workdir: str) -> None:
    """Worker main loop: import the student's file, then answer requests until 'exit'."""
    if hasattr(os, "setsid"):
        os.setsid()
    os.chdir(workdir)
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    capture = tempfile.TemporaryFile(dir=workdir)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(capture.fileno(), 1)
    os.dup2(capture.fileno(), 2)
    sent = 0

    def output() -> str:
        nonlocal sent
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        size = os.fstat(capture.fileno()).st_size
        data = os.pread(capture.fileno(), max(0, OUTPUT_LIMIT - sent), sent) if sent < OUTPUT_LIMIT else b""
        sent += len(data)
        text = data.decode("utf-8", "replace")
        if size > OUTPUT_LIMIT and sent >= OUTPUT_LIMIT:
            text += f"\n[... {size - OUTPUT_LIMIT} more bytes of output not shown]"
            sent = size + 1  # report the cut once
        return text

    objects: dict[int, object] = {}
    try:
        sys.path.insert(0, str(Path(path).parent))
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        objects[0] = module
        load_error = None
    except BaseException as err:  # SyntaxError, ImportError, even SystemExit at import time
        load_error = _describe(err, f"could not import {Path(path).name}: ")

    def unpickle(data: bytes):
        unpickler = pickle.Unpickler(io.BytesIO(data))
        unpickler.persistent_load = lambda pid: objects[pid[1]]
        return unpickler.load()

    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        try:
            if load_error is not None:
                if data == _EXIT:
                    return
                raise _LoadError(load_error)
            message = unpickle(data)
            if message[0] == "exit":
                return
            result = _perform(*message)
            answer = ("ok", _pack(result, objects), output())
        except _LoadError as err:
            answer = ("error", err.args[0], output())
        except BaseException as err:  # the student's exception, SystemExit and KeyboardInterrupt too
            answer = ("error", _describe(err), output())
        buffer = io.BytesIO()
        try:
            torch.save(answer, buffer)
        except Exception as err:
            buffer = io.BytesIO()
            torch.save(("error", _describe(err, "could not send the result back: "), output()), buffer)
        conn.send_bytes(buffer.getvalue())


_EXIT = _PersistentPickler.dumps(("exit",))


class _LoadError(Exception):
    pass


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
