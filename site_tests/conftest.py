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

import pytest
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


def _page_params(pairs):
    """pytest params for (transport, page) pairs, each in the xdist group of its visit, so that
    under ``-n 2 --dist loadgroup`` every check of one visit runs in the worker that made it
    (a page is opened once per transport, not once per worker)."""
    return [pytest.param((t, p), id=f"{t}:{p}", marks=pytest.mark.xdist_group(f"{t}:{p}"))
            for t, p in pairs]


def pytest_generate_tests(metafunc):
    """One case per content page and transport: ("http" | "file", "book/ch05_rope.html");
    ``book_page_id``: the chapters and other book/ pages over HTTP only (the screenshots)."""
    pages = site_pages(html_dir(metafunc.config))
    if "page_id" in metafunc.fixturenames:
        metafunc.parametrize("page_id", _page_params(
            (transport, page) for transport in ("http", "file") for page in pages))
    if "book_page_id" in metafunc.fixturenames:
        metafunc.parametrize("book_page_id", _page_params(
            ("http", page) for page in pages if page.startswith("book/")))
