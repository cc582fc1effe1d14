"""Sphinx extension for *LLaMA from the Inside*: the course version, and per-chapter numbers.

Registered in ``_config.yml`` under ``sphinx: local_extensions: {course_version: book/_ext}``
(Jupyter Book 1 puts ``book/_ext`` on ``sys.path`` and adds the module to ``extensions``).

**One version.** The book and the ``llama_course`` package are released together and share
one version number, whose single source of truth is ``llama_course.__version__`` (pyproject.toml
reads it from there too). This extension imports it when the configuration is read, so no
second copy exists that could drift, and

* sets Sphinx's ``version`` and ``release``;
* defines the MyST substitution ``version``: ``{{ version }}`` in a page renders it;
* appends a line naming it to the footer of every page (sphinx-book-theme's ``extra_footer``
  theme option, which ``html.extra_footer`` in _config.yml also maps to; any text set there
  is kept in front of ours).

**Numbers per chapter.** The chapters number their own headings by hand ("# 4. Attention",
"## 4.2 ..."), so the toctree is not numbered (``:numbered:`` would number them twice), and
without it Sphinx numbers figures, tables, listings and equations through the whole book
(Chapter 4's first figure was "Figure 7", its first equation "(14)"). After Sphinx has
assigned those numbers (``env.toc_fignumbers``, on ``env-get-updated``) we rewrite them to
(chapter, k): "Figure 4.1", "Figure 4.2", ... and "(4.1)", "(4.2)", ... for equations in
``book/ch04_*``, the chapter taken from the file name. Pages without a chapter number
(intro, labs, glossary, ...) number from 1 on each page. Captions, ``{numref}`` and ``{eq}``
references all read these numbers.
"""
from __future__ import annotations

import copy
import html
import re
import sys
from pathlib import Path

CHAPTER_DOC = re.compile(r"^book/ch(\d+)_")   # book/ch04_attention -> chapter 4
REPO = Path(__file__).resolve().parents[2]


def course_version() -> str:
    """``llama_course.__version__``; from this checkout if the package is not installed."""
    try:
        import llama_course
    except ImportError:
        sys.path.insert(0, str(REPO))
        import llama_course
    return llama_course.__version__


def footer_line(version: str) -> str:
    return (f'<p class="course-version">LLaMA from the Inside, version {html.escape(version)}'
            " &mdash; the same version as the <code>llama_course</code> package.</p>")


def set_version(app, config) -> None:
    """config-inited: put the package's version wherever the site shows or uses it."""
    version = course_version()
    config.version = config.release = version
    config.myst_substitutions = {**(getattr(config, "myst_substitutions", None) or {}),
                                 "version": version}
    options = dict(config.html_theme_options or {})
    options["extra_footer"] = (options.get("extra_footer") or "") + footer_line(version)
    config.html_theme_options = options


def chapter_of(docname: str) -> int | None:
    match = CHAPTER_DOC.match(docname)
    return int(match.group(1)) if match else None


def number_per_chapter(app, env) -> list[str]:
    """env-get-updated, after Sphinx's TocTreeCollector.assign_figure_numbers (priority 900 >
    its 500): renumber every page's figures/tables/listings/equations as (chapter, k), or (k,)
    on a page without a chapter number. ``toc_fignumbers[doc][figtype]`` maps node id -> number
    tuple, filled in document order, so k is the position in that dict."""
    env.course_raw_fignumbers = copy.deepcopy(env.toc_fignumbers)   # see restore_raw_numbers
    for docname, by_type in env.toc_fignumbers.items():
        chapter = chapter_of(docname)
        prefix = (chapter,) if chapter is not None else ()
        for figtype, numbers in by_type.items():
            by_type[figtype] = {node_id: (*prefix, k) for k, node_id in enumerate(numbers, 1)}
    return []   # a page whose numbers change has changed Sphinx's numbers too: it is rewritten


def restore_raw_numbers(app, env) -> list[str]:
    """env-get-updated, before the collector (priority 100): give it back its own numbers of
    the previous build to compare with, so that an incremental build rewrites only the pages
    whose numbers changed, not every page that has a figure. (None stored: compare with
    nothing, so every page with a number is rewritten.)"""
    env.toc_fignumbers = getattr(env, "course_raw_fignumbers", {})
    return []


def setup(app):
    app.connect("config-inited", set_version)
    app.connect("env-get-updated", restore_raw_numbers, priority=100)
    app.connect("env-get-updated", number_per_chapter, priority=900)
    return {"version": course_version(), "parallel_read_safe": True,
            "parallel_write_safe": True}
