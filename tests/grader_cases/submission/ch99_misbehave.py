"""A deliberately hostile 'student' file for the grader's tests."""

import json
import os
import subprocess
import sys

import torch

print("imported: hello from the student's module")
TARGET = os.environ.get("GRADER_CASE_TARGET", "results.json")  # the grader's results path


def good(x):
    return x + 1


def exits():
    sys.exit(3)


def hard_exit():
    os._exit(0)


def hangs():
    while True:
        pass


def noisy():
    for _ in range(50_000):
        print("x" * 100)  # 5 MB
    return 42


def wrong_shape():
    return torch.zeros(3)


def patches_torch():
    torch.allclose = lambda *args, **kwargs: True
    torch.Tensor.__eq__ = lambda self, other: True
    return torch.zeros(3)


def ones(n):
    return torch.ones(n)


def _forge():
    return json.dumps({"score": 1000, "tests": []})


def writes_results():
    for path in (TARGET, "results.json"):
        with open(path, "w") as handle:
            handle.write(_forge())
    return 0


def spawns_writer():
    code = f"import time; time.sleep(2); open({TARGET!r}, 'w').write({_forge()!r})"
    subprocess.Popen([sys.executable, "-c", code])
    return 0


class Liar:
    def __eq__(self, other):
        return True


def liar():
    return Liar()


def checks_input(d_model):
    if d_model <= 0:
        raise ValueError(f"d_model must be positive, got {d_model}")
    return d_model


class Counter:
    def __init__(self, start):
        self.value = start

    def step(self, n):
        self.value += n
        return self.value

    def upto(self, n):
        yield from range(n)

    def __len__(self):
        return self.value
