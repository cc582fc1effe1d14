"""Declared tolerances for the notebooks' machine-dependent numbers (used by `make test-notebooks`).

nbval compares a re-executed notebook with its committed outputs character for character. That
is right for what the book states exactly -- token ids, shapes, parameter counts, any integer --
but not for a floating-point result whose last bits depend on the CPU: PyTorch picks its
vectorised kernels by instruction set (AVX-512, AVX2, none), and a small training or a top-k
routing turns a last-bit difference into a different printed loss. So a cell whose printed
floats are such results declares a tolerance in its metadata,

    "tolerance": {"rtol": 0.05, "atol": 0.02, "why": "an 80-step training: ..."}

and for that cell a mismatch is forgiven only when the outputs agree once every decimal number
(one with a point or an exponent) is masked, and each pair of masked numbers satisfies
|fresh - committed| <= atol + rtol * |committed|. Text, integers and the number of outputs are
still compared exactly, and the conclusion the prose draws from such a number is asserted in the
cell itself, so a machine on which it does not hold fails the cell instead of printing it.
Cells without the key are compared exactly, as nbval does.
"""
from __future__ import annotations

import math
import re

try:  # the book's tests need nbval; a plain `pytest book/...` without it collects nothing here
    from nbval.plugin import IPyNbCell, transform_streams_for_comparison
except ImportError:  # pragma: no cover
    IPyNbCell = None

# A decimal number: digits with a point and/or an exponent (integers are not matched).
DECIMAL = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?(?![\w.])")
MASK = "<decimal>"


def read_tolerance(metadata) -> dict | None:
    """The cell's declared {"rtol", "atol", "why"}, checked, or None when it declares none."""
    tol = metadata.get("tolerance")
    if tol is None:
        return None
    if not isinstance(tol, dict) or set(tol) - {"rtol", "atol", "why"} or not tol.get("why"):
        raise ValueError(f"cell metadata 'tolerance' must be {{'rtol', 'atol', 'why'}} with a reason, got {tol!r}")
    for key in ("rtol", "atol"):
        value = tol.get(key, 0.0)
        if not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"tolerance {key!r} must be a number in [0, 1), got {value!r}")
    return {"rtol": float(tol.get("rtol", 0.0)), "atol": float(tol.get("atol", 0.0))}


def compare_within(committed: str, fresh: str, rtol: float, atol: float) -> str | None:
    """None if the two texts agree up to the tolerance on decimals, else why they do not."""
    if DECIMAL.sub(MASK, committed) != DECIMAL.sub(MASK, fresh):
        return "the texts differ beyond their decimal numbers"
    for want, got in zip(DECIMAL.findall(committed), DECIMAL.findall(fresh)):
        a, b = float(want), float(got)
        if not (math.isfinite(a) and math.isfinite(b)) or abs(b - a) > atol + rtol * abs(a):
            return f"{got} differs from the committed {want} by more than atol={atol} + rtol={rtol}·|{want}|"
    return None


def _flatten(outputs, skip) -> dict[str, list[str]]:
    """nbval's view of a cell's outputs: key (stream name or MIME type) -> list of texts."""
    flat: dict[str, list[str]] = {}
    for out in transform_streams_for_comparison(outputs):
        for key, value in out.items():
            if key in skip:
                continue
            items = value.items() if key == "data" else [(key, value)]
            for sub, text in items:
                if sub not in skip:
                    flat.setdefault(sub, []).append(text if isinstance(text, str) else str(text))
    return flat


if IPyNbCell is not None:
    _exact_compare = IPyNbCell.compare_outputs

    def _compare_with_tolerance(self, test, ref, skip_compare=None):
        if _exact_compare(self, test, ref, skip_compare):
            return True
        tol = read_tolerance(self.cell.get("metadata", {}))
        if tol is None:
            return False
        skip = skip_compare or self.parent.skip_compare
        want, got = _flatten(ref, skip), _flatten(test, skip)
        if {k: len(v) for k, v in want.items()} != {k: len(v) for k, v in got.items()}:
            return False  # nbval's traceback from the exact comparison already says what differs
        for key in want:
            for committed, fresh in zip(want[key], got[key]):
                reason = compare_within(self.sanitize(committed), self.sanitize(fresh), **tol)
                if reason is not None:
                    self.comparison_traceback.append(f"Outside the cell's declared tolerance ({key}): {reason}")
                    return False
        self.comparison_traceback = []
        return True

    IPyNbCell.compare_outputs = _compare_with_tolerance
