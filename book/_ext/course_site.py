"""Sphinx extension for *LLaMA from the Inside*: what the published pages need beyond the theme.

Registered in ``_config.yml`` next to ``course_version`` (``local_extensions``).

* **Static files.** ``book/_static`` is added to ``html_static_path`` and its ``course.css`` and
  ``course.js`` to every page. The stylesheet keeps images in proportion (``height: auto``:
  the notebooks store each figure's width *and* height, the theme caps the width, and without
  this rule the height stayed, stretching every figure), lets wide tables and equations scroll
  inside the column with a visible cue, and the script repairs the phone navigation (see
  ``course.js``).
* **One copy of each inline script.** Sphinx 7.4 (pinned by jupyter-book 1) emits an inline
  script added by an extension twice when its file name is stored once as ``None`` and once as
  ``''`` (fixed upstream in sphinx-doc/sphinx#13402, not in 7.x). sphinx-thebe's inline script
  declares ``const THEBE_JS_URL``, so the second copy threw "already declared" on every page.
  ``dedupe_scripts`` drops the second copy of any inline script with the same body.
"""
from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "_static"


def add_static(app, config) -> None:
    """config-inited: serve book/_static with the site."""
    paths = list(config.html_static_path or [])
    if str(STATIC) not in paths:
        paths.append(str(STATIC))
    config.html_static_path = paths


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: keep the first of several identical inline scripts."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        body = getattr(js, "attributes", {}).get("body")
        if body is not None and not getattr(js, "filename", None):
            if body in seen:
                continue
            seen.add(body)
        kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.connect("config-inited", add_static)
    app.connect("html-page-context", dedupe_scripts)
    app.add_css_file("course.css")
    app.add_js_file("course.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
