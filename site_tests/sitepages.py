"""Which pages of the built site the browser checks visit (shared by conftest.py and the tests)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Not content: Sphinx's search page (tested on its own by test_search_finds_chapter) and the
# generated indexes; nor the theme's and Sphinx's support folders.
NOT_CONTENT = {"search.html", "genindex.html", "py-modindex.html"}
NOT_CONTENT_DIRS = {"_static", "_sources", "_images", "_downloads"}


def html_dir(config) -> Path:
    return Path(config.getoption("--html-dir")).resolve()


def site_pages(root: Path) -> list[str]:
    """Every content page of the built site, as a posix path relative to ``root``."""
    if not root.is_dir():
        return []
    pages = []
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_CONTENT_DIRS or rel.as_posix() in NOT_CONTENT:
            continue
        pages.append(rel.as_posix())
    return pages
