"""Browser checks of the built book (``make test-site``; ``make test`` when Chromium is installed).

Options:
  --html-dir DIR        the built site (default: _build/html)
  --browser PATH        the Chromium to drive (default: $CHROMIUM, else chromium on PATH)
  --screenshot-dir DIR  where the first-screen screenshots go (default: <html-dir>/../screenshots,
                        i.e. _build/screenshots for the default html dir)

This folder is deliberately outside tests/ so the unit suite never collects it.
"""
from __future__ import annotations

import os
import shutil

from sitepages import REPO, html_dir, site_pages


def pytest_addoption(parser):
    group = parser.getgroup("site", "browser checks of the built book")
    group.addoption("--html-dir", default=str(REPO / "_build" / "html"),
                    help="the built site to check (default: _build/html)")
    group.addoption("--browser",
                    default=(os.environ.get("CHROMIUM") or shutil.which("chromium")
                             or "/usr/bin/chromium"),
                    help="Chromium executable (default: $CHROMIUM, else chromium on PATH)")
    group.addoption("--screenshot-dir", default=None,
                    help="where screenshots go (default: <html-dir>/../screenshots)")


def pytest_generate_tests(metafunc):
    """One case per content page and transport: ("http" | "file", "book/ch05_rope.html")."""
    if "page_id" in metafunc.fixturenames:
        pages = site_pages(html_dir(metafunc.config))
        params = [(transport, page) for transport in ("http", "file") for page in pages]
        metafunc.parametrize("page_id", params, ids=[f"{t}:{p}" for t, p in params])
