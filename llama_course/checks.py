"""Argument checks, one rule for the whole package.

    wrong type   -> TypeError    ("eps must be a number, got str")
    wrong value  -> ValueError   ("eps must be a finite number > 0, got inf")

Every message names the argument, says what was expected and shows what was given. Integers
from NumPy or 0-d integer tensors count as ints; ``bool`` is never a number here (``True`` as a
head count is a bug, not a 1). Each predicate returns the checked value (a Python int or float for
numbers), so a caller may use the clean value.

The book's functions call these in a single line before their maths, e.g.::

    check_tensor("x", x, floating=True)

One static rule says which checks run where (no switch turns them off):

    metadata checks   type, shape, dtype, device: they read no tensor values, cost a few
                      microseconds of Python, and run on every call of every function
    value checks      token ids in the vocabulary, positions in range, a mask of 0/1, finite
                      numbers: they read the tensor (on a GPU, a device-to-host copy that makes the
                      CPU wait), so only entry points make them: Llama.forward, generate, and
                      functions the model never calls (embed, the losses). Llama.forward skips
                      them with ``check_values=False``, which generate passes for the tokens it
                      sampled itself: an explicit argument, visible where it is used.

Inside the model, layers receive tensors the model made (the positions from the cache length, the
mask from a checked attention_mask), so the layers check metadata only. Every predicate is pure: it
depends on its arguments alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

__all__ = [
    "check_bool",
    "check_finite",
    "check_int",
    "check_number",
    "check_one_of",
    "check_positive_int",
    "check_positive_number",
    "check_same_device",
    "check_tensor",
    "check_token_ids",
    "check_type",
]

def _type_name(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _is_bool(value) -> bool:
    kind = type(value)   # numpy.bool_ is not a subclass of bool
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def _bounds(low, high, low_open: bool, high_open: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high}")
    return " and ".join(parts)


def _check_bounds(name: str, value, what: str, low, high, low_open: bool, high_open: bool) -> None:
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise ValueError(f"{name} must be {what} {_bounds(low, high, low_open, high_open)}, got {value!r}")


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """An int (Python, NumPy or a 0-d integer tensor; not bool) in [low, high]. Returns a Python int."""
    if type(value) is int:                      # the common case, without the ABC look-ups below
        _check_bounds(name, value, "an int", low, high, False, False)
        return value
    is_int_tensor = (isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point()
                     and not value.is_complex() and value.dtype != torch.bool)
    if _is_bool(value) or not (isinstance(value, numbers.Integral) or is_int_tensor):
        raise TypeError(f"{name} must be an int, got {_type_name(value)}")
    value = int(value)
    _check_bounds(name, value, "an int", low, high, False, False)
    return value


def check_positive_int(name: str, value) -> int:
    """An int >= 1 (a size, a count)."""
    return check_int(name, value, low=1)


def check_number(name: str, value, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, finite: bool = True) -> float:
    """A real number (int or float of any library; not bool), finite unless ``finite=False``, within
    [low, high] (``low_open``/``high_open`` exclude the end). NaN is always rejected. Returns it."""
    if type(value) is float or type(value) is int:   # the common case, without the ABC look-ups
        return _check_real(name, value, low, high, low_open, high_open, finite)
    is_real_tensor = isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_complex() \
        and value.dtype != torch.bool
    if _is_bool(value) or not (isinstance(value, numbers.Real) or is_real_tensor):
        raise TypeError(f"{name} must be a number, got {_type_name(value)}")
    value = value.item() if isinstance(value, torch.Tensor) else value
    return _check_real(name, value, low, high, low_open, high_open, finite)


def _check_real(name: str, value, low, high, low_open: bool, high_open: bool, finite: bool):
    what = "a finite number" if finite else "a number"
    if math.isnan(value) or (finite and math.isinf(value)):
        bounds = _bounds(low, high, low_open, high_open)
        raise ValueError(f"{name} must be {what}{' ' + bounds if bounds else ''}, got {value!r}")
    _check_bounds(name, value, what, low, high, low_open, high_open)
    return value


def check_positive_number(name: str, value) -> float:
    """A finite number > 0 (an epsilon, a base, a scale)."""
    return check_number(name, value, low=0, low_open=True)


def check_finite(name: str, value):
    """A finite number, or a tensor without NaN or infinity (one device-to-host copy on a GPU; meta
    tensors hold no values and pass)."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        if value.device.type != "meta" and value.numel() and (value.is_floating_point() or value.is_complex()) \
                and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite (no NaN or inf), got a tensor that is not")
        return value
    return check_number(name, value)


def check_bool(name: str, value) -> bool:
    """True or False (NumPy's bool too)."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be a bool, got {_type_name(value)}")
    return bool(value)


def check_type(name: str, value, kind: type | tuple[type, ...]):
    """An instance of ``kind`` (a class or a tuple of classes)."""
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{name} must be a {names}, got {_type_name(value)}")
    return value


def check_one_of(name: str, value, options: Iterable):
    """One of ``options`` (compared with ==). A value of another type than the options -> TypeError."""
    options = tuple(options)
    types = {type(option) for option in options}
    if options and not isinstance(value, tuple(types)):
        raise TypeError(f"{name} must be one of {options}, got {_type_name(value)} {value!r}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


_KINDS = {
    "floating": (torch.Tensor.is_floating_point, "a floating-point"),
    "integer": (lambda t: not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool,
                "an integer"),
}


def check_tensor(name: str, value, ndim: int | None = None, *, min_ndim: int | None = None,
                 shape: tuple | torch.Size | None = None, floating: bool = False, integer: bool = False,
                 like: torch.Tensor | None = None, like_name: str | None = None) -> torch.Tensor:
    """A torch.Tensor; optionally of exactly ``ndim`` or at least ``min_ndim`` dimensions, of
    ``shape``, floating-point (float16/bfloat16/float32/float64: not int, bool or complex) or
    integer (not bool), and on the same device as the tensor ``like`` (named ``like_name``)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_type_name(value)}")
    for wanted, kind in ((floating, "floating"), (integer, "integer")):
        if wanted and not _KINDS[kind][0](value):
            raise TypeError(f"{name} must be {_KINDS[kind][1]} tensor, got {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if min_ndim is not None and value.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(value.shape)}")
    if like is not None and (not isinstance(like, torch.Tensor) or value.device != like.device):
        check_same_device(**{name: value, like_name or "the other inputs": like})   # raises, naming both
    return value


def check_same_device(**tensors) -> torch.device | None:
    """All the given tensors (None entries are skipped) on one device; returns it.

    Mixing devices is an error in torch too, except for the meta device, where torch quietly
    returns an uninitialised CPU result: that case is why this check exists.
    """
    present = {name: t for name, t in tensors.items() if t is not None}
    for name, t in present.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {_type_name(t)}")
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in present.items())
        raise ValueError(f"all inputs must be on one device, got {where}")
    return devices.pop() if devices else None


def check_token_ids(name: str, value, vocab_size: int, like: torch.Tensor | None = None,
                    like_name: str | None = None, values: bool = True) -> torch.Tensor:
    """An int64 or int32 tensor of token ids, each in [0, vocab_size), on ``like``'s device. A value
    check (it reads the ids: one device-to-host copy on a GPU; meta tensors hold no values), for
    entry points; its metadata half alone is ``check_token_ids(..., values=False)``."""
    check_tensor(name, value, like=like, like_name=like_name)
    if value.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an int64 or int32 tensor of token ids, got {value.dtype}")
    if values and value.device.type != "meta" and value.numel():
        bad = value[(value < 0) | (value >= vocab_size)]
        if bad.numel():
            raise ValueError(f"{name} must be in [0, {vocab_size}) (the vocabulary), got {int(bad[0])}")
    return value
