"""Devices (every chapter): which one to use, which ones exist, waiting for one, and seeding them all.

CUDA and MPS run asynchronously: a call returns as soon as the work is queued, so a timing must
wait for the device (``synchronize``) before it reads the clock.
"""

from __future__ import annotations

import os
import random

import torch

from .checks import check_int

DEVICE_ENV = "LLAMA_COURSE_DEVICE"


def available_devices() -> list[str]:
    """"cpu", then every accelerator this machine has ("cuda", "mps")."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def get_device() -> torch.device:
    """The best available device: ``cuda`` -> ``mps`` -> ``cpu``.

    The environment variable ``LLAMA_COURSE_DEVICE`` (e.g. ``cpu``, ``cuda:1``) overrides the
    choice, so a workshop host can pin every notebook to one device without editing it.
    """
    requested = os.environ.get(DEVICE_ENV)
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as err:
            raise ValueError(f"{DEVICE_ENV}={requested!r} is not a torch device: {err}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{DEVICE_ENV}={requested!r} but CUDA is not available on this machine")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"{DEVICE_ENV}={requested!r} but MPS is not available on this machine")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device) -> None:
    """Wait for the device's queued work (CUDA and MPS run asynchronously; a CPU does not)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's (if installed) and torch's generators (all devices).

    Returns a CPU ``torch.Generator`` seeded with the same value, for code that prefers an
    explicit generator over global state.
    """
    seed = check_int("seed", seed, 0, 2**32 - 1)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional for the package itself
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA and MPS device
    return torch.Generator().manual_seed(seed)
