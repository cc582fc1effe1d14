"""Browser checks of the built book (``make test-site``; ``make test`` when Chromium is installed).

Options:
  --html-dir DIR        the built site (default: _build/html)
  --browser PATH        the Chromium to drive (default: $CHROMIUM, else chromium on PATH)
  --screenshot-dir DIR  where the first-screen screenshots go (default: <html-dir>/../screenshots,
                        i.e. _build/screenshots for the default html dir)

This folder is deliberately outside tests/ so the unit suite never collects it.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

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


# ------------------------------------------------------- session fixtures, one set per process
# Here, not in a test module, so that every module of site_tests shares one browser, one HTTP
# server and one Site per process (Playwright's sync API cannot be started twice in a thread).
@pytest.fixture(scope="session")
def html_root(pytestconfig) -> Path:
    return html_dir(pytestconfig)


@pytest.fixture(scope="session")
def screenshot_dir(pytestconfig, html_root) -> Path:
    opt = pytestconfig.getoption("--screenshot-dir")
    path = Path(opt).resolve() if opt else html_root.parent / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="session")
def http_base(html_root):
    """http://127.0.0.1:<free port>/ serving the built site, for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(html_root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser(pytestconfig):
    exe = pytestconfig.getoption("--browser")
    resolved = shutil.which(exe) if exe else None
    if not resolved:
        pytest.skip(f"Chromium not found at {exe!r} (set --browser or $CHROMIUM; install it with "
                    "apt-get install -y --no-install-recommends chromium): skipping the browser "
                    "checks of the site")
    from playwright.sync_api import sync_playwright  # pinned in requirements.lock

    pw = sync_playwright().start()
    try:
        # executable_path: drive the system Chromium; never `playwright install` (a download).
        from test_site import CHROMIUM_ARGS

        b = pw.chromium.launch(executable_path=resolved, headless=True, args=CHROMIUM_ARGS)
    except Exception:
        pw.stop()
        raise
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="session")
def site(browser, html_root, http_base, screenshot_dir):
    from test_site import Site

    return Site(browser, html_root, http_base, screenshot_dir)


@pytest.fixture(scope="session")
def layout(site):
    """Each book page opened once per screen size for all the layout checks (layout.py)."""
    from layout import Layout
    from test_site import TIMEOUT_MS

    return Layout(site, TIMEOUT_MS)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make ``--dist loadgroup`` group again. pytest-xdist 3.8 puts a test in its xdist_group by
    appending "@group" to ``item._nodeid``, which pytest 9 no longer reads (a node's id is
    ``item._id``), so each group was split over the workers and every worker opened the same
    pages (measured: the two checks of ``layout:phone`` ran on gw0 and gw1). Append it where
    pytest reads it; with an xdist that already did, the id ends with the group and is left."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(item.nodeid + suffix)
