"""One open page per (book page, screen size), shared by every layout check at that size.

The layout checks (figures' shape and text, outputs and equations that fit, code in tables,
titles on a phone, ...) each used to open every book page in a fresh browser context: eleven
whole-site passes. Here each check registers what it measures on an open page (a function of
the page), and ``Layout.read(rel, size, name)`` opens ``rel`` at ``size`` once, runs every
registered measurement for that size on it, closes it, and hands each check its own result.
The checks' assertions are unchanged and each still fails on its own.

Measurements run in the order of their ``order`` (the lowest first); one that changes what the
page shows for the rest (the dark theme) must come last. A measurement that raises fails the
checks that read it, with its error, and no other.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Screen sizes in CSS px (issue 34): a laptop and a phone.
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@dataclass(frozen=True)
class Measurement:
    name: str
    sizes: tuple[str, ...]
    fn: Callable            # (page, rel, site, size) -> result (None: not measured here)
    order: int


MEASUREMENTS: dict[str, Measurement] = {}


def measurement(name: str, sizes=tuple(SIZES), order: int = 0):
    """Register ``fn(page, rel, site, size)`` as the measurement ``name`` at ``sizes`` (``site``:
    conftest's Site, with the built site's ``root`` and the screenshot folder ``shots``)."""
    unknown = set(sizes) - set(SIZES)
    if unknown:
        raise ValueError(f"sizes: {sorted(unknown)} are not among {sorted(SIZES)}")

    def register(fn):
        if name in MEASUREMENTS and MEASUREMENTS[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"name: a measurement {name!r} is registered already")
        MEASUREMENTS[name] = Measurement(name, tuple(sizes), fn, order)
        return fn

    return register


class MeasurementError(Exception):
    pass


_IMAGES_LOADED_JS = """
async () => {
  await Promise.all([...document.images].map(img => img.complete ? null : new Promise(done => {
    img.addEventListener('load', done, {once: true});
    img.addEventListener('error', done, {once: true});
  })));
  await document.fonts.ready;
  return true;
}
"""


class Layout:
    """Opens each book page once per size (light theme, fonts and images loaded) and keeps what
    every registered measurement found on it."""

    def __init__(self, site, timeout_ms: int):
        self.site = site
        self.timeout_ms = timeout_ms
        self.results: dict[tuple[str, str], dict[str, tuple[bool, object]]] = {}
        self.opened: list[tuple[str, str]] = []   # (rel, size) in the order they were opened

    def read(self, rel: str, size: str, name: str):
        """What measurement ``name`` found on ``rel`` at ``size`` (raises its error)."""
        if size not in SIZES:
            raise ValueError(f"size: {size!r} is not among {sorted(SIZES)}")
        if name not in MEASUREMENTS or size not in MEASUREMENTS[name].sizes:
            raise ValueError(f"name: no measurement {name!r} registered at {size!r}")
        key = (rel, size)
        if key not in self.results:
            self.results[key] = self._measure(rel, size)
        found = self.results[key].get(name)
        if found is None:   # registered after this page was measured: measure it on its own
            found = self._measure(rel, size, only=name)[name]
            self.results[key][name] = found
        ok, value = found
        if not ok:
            raise MeasurementError(f"{rel} at {size}: measuring {name!r} failed: {value}")
        return value

    def _measure(self, rel: str, size: str, only: str | None = None) -> dict:
        todo = sorted((m for m in MEASUREMENTS.values()
                       if size in m.sizes and (only is None or m.name == only)),
                      key=lambda m: m.order)
        width, height = SIZES[size]
        self.opened.append((rel, size))
        context = self.site.browser.new_context(viewport={"width": width, "height": height},
                                                service_workers="block", color_scheme="light")
        out: dict[str, tuple[bool, object]] = {}
        try:
            page = context.new_page()
            page.set_default_timeout(self.timeout_ms)
            try:
                page.goto(self.site.base["http"] + rel, wait_until="load")
                page.evaluate(_IMAGES_LOADED_JS)   # every image loaded (or failed), fonts too
                page.wait_for_timeout(300)         # FontAwesome swaps its <i> for <svg> after load
            except Exception as exc:  # noqa: BLE001 - reported by every check reading this page
                why = f"the page did not load: {type(exc).__name__}: {exc}".splitlines()[0]
                return {m.name: (False, why) for m in todo}
            for m in todo:
                try:
                    out[m.name] = (True, m.fn(page, rel, self.site, size))
                except Exception as exc:  # noqa: BLE001 - reported by the check that reads it
                    out[m.name] = (False, f"{type(exc).__name__}: {exc}".splitlines()[0])
        finally:
            context.close()
        return out
