"""Device selection and reproducibility."""

from __future__ import annotations

import os
import random

import torch

DEVICE_ENV = "LLAMA_COURSE_DEVICE"


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


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's (if installed) and torch's generators (all devices).

    Returns a CPU ``torch.Generator`` seeded with the same value, for code that prefers an
    explicit generator over global state.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional for the package itself
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA and MPS device
    return torch.Generator().manual_seed(seed)
