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
* **Code in tables breaks at its dots.** ``break_table_code`` puts a ``<wbr>`` after each "."
  and "/" of inline code in a table; course.css lets such code break nowhere else in a cell
  (never inside an identifier, issue 34).
* **Figures readable on a phone.** ``frame_figures`` gives every content image (a notebook
  figure, a drawn diagram of book/figures) the width at which its smallest text is shown at
  ``READABLE_PX`` CSS pixels, as ``--readable-width`` in its style, and puts it (with the link
  to its full-size file) in a frame that scrolls sideways; course.css makes that width the
  image's minimum and course.js shows the scroll cue. On a wide screen the column is wider than
  every such width and nothing changes; on a 390 px phone a figure is shown at a readable size
  and scrolled instead of shrunk to 5-8 px text (issue 22). The width comes from the file:

  - a notebook figure (a PNG of ``jupyter_execute``) is drawn by ``llama_course.plots.
    book_style``: no text under ``MIN_POINTS`` points, ``MIN_POINTS * 100/72`` px when the
    figure is shown at its own size at 100 dpi, which is ``width * 100 / dpi`` CSS px for a
    PNG of ``width`` pixels whose pHYs chunk says ``dpi`` (200: the notebooks save retina PNGs);
  - a drawn diagram (SVG) states its font sizes in user units of its viewBox.
* **Page weight** (issue 34: the largest chapter weighed 4.65 MB, the first screen of a phone on a
  slow line). What every page loaded that no page needs:

  - FontAwesome's JavaScript (1.49 MB), which replaces each ``<i class="fa-...">`` with an inline
    SVG. The theme's stylesheet already draws the same icons from its webfonts (``.fa-bars::before``
    with ``fa-solid-900.woff2``), so ``lighten_pages`` drops the script tag from every page and
    the script from ``_static``;
  - MathJax's combined ``tex-chtml.js`` (1.16 MB), of which 0.43 MB is its right-click menu.
    ``use_lean_mathjax`` loads MathJax's own ``startup.js`` with the components the book needs
    instead: TeX input (whose ``autoload`` fetches any rarer package on demand), CommonHTML
    output and the hidden MathML copy that screen readers read (``a11y/assistive-mml``);
  - Sphinx's search index and search code (0.17 MB) on every page, for the theme's
    search-as-you-type, which the book does not turn on (``search_as_you_type``); the search page
    keeps them;
  - sphinx-design's stylesheet and script (62 kB; Jupyter Book adds the extension) on a page that
    uses none of its components (no ``sd-`` class);
  - FontAwesome's brands webfont (118 kB) for the one GitHub mark of the header: course.css draws
    it from an inline SVG.
"""
from __future__ import annotations

import math
import re
import struct
import sys
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "_static"
REPO = Path(__file__).resolve().parents[2]
READABLE_PX = 11.0   # the smallest text a reader is shown, in CSS px (issue 22)


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


def min_points() -> float:
    """``llama_course.plots.MIN_POINTS``: the smallest text of every notebook figure, in points."""
    try:
        from llama_course.plots import MIN_POINTS
    except ImportError:
        sys.path.insert(0, str(REPO))
        from llama_course.plots import MIN_POINTS
    return MIN_POINTS


def png_size_and_dpi(path: Path) -> tuple[int, float | None]:
    """A PNG's width in pixels and the dots per inch of its pHYs chunk (None without one)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"path: {path} is not a PNG")
    width, at = struct.unpack(">I", data[16:20])[0], 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"pHYs":
            per_unit, _, unit = struct.unpack(">IIB", data[at + 8:at + 17])
            return width, per_unit * 0.0254 if unit == 1 else None   # unit 1: per metre
        if kind == b"IDAT":   # pHYs must come before the image data
            break
        at += 12 + length
    return width, None


def svg_text(path: Path) -> tuple[float, float] | None:
    """An SVG's smallest font size and its viewBox width, in user units (None: no viewBox)."""
    source = path.read_text(encoding="utf-8")
    viewbox = re.search(r'<svg\b[^>]*\bviewBox="\s*[-0-9.]+[\s,]+[-0-9.]+[\s,]+([0-9.]+)', source)
    if not viewbox:
        return None
    sizes = [float(s) for s in re.findall(r'font-size(?:="|:\s*)([0-9.]+)', source)]
    return min(sizes, default=16.0), float(viewbox.group(1))   # 16: SVG's default font size


def readable_width(path: Path) -> int | None:
    """CSS px at which the image's smallest text is READABLE_PX (None: not known for it)."""
    if path.suffix == ".svg":
        found = svg_text(path)
        return math.ceil(found[1] * READABLE_PX / found[0]) if found else None
    if path.suffix == ".png" and "jupyter_execute" in path.parts:
        width, dpi = png_size_and_dpi(path)
        if dpi:
            own_px = width * 100 / dpi                      # the figure at 100 dpi, CSS px
            return math.ceil(own_px * READABLE_PX / (min_points() * 100 / 72))
    return None


_IMAGE = re.compile(r'(<a class="reference internal image-reference"[^>]*>\s*)?'
                    r'(<img\b[^>]*?\bsrc="[^"]*?_images/([^"/]+)"[^>]*>)(\s*</a>)?')


def frame_figures(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: each content image gets its readable width and a scrolling frame."""
    body = context.get("body")
    if not body or "_images/" not in body:
        return
    sources = {out: Path(app.srcdir) / src for src, out in app.builder.images.items()}

    def frame(match: re.Match) -> str:
        link, img, name, end = match.group(1) or "", match.group(2), match.group(3), match.group(4) or ""
        source = sources.get(name)
        width = readable_width(source) if source is not None and source.is_file() else None
        if width is None:
            return match.group(0)
        style = f"--readable-width: {width}px;"
        if ' style="' in img:
            img = img.replace(' style="', f' style="{style} ', 1)
        else:
            img = img.replace("<img", f'<img style="{style}"', 1)
        return (f'<span class="figure-frame"><span class="figure-scroll">{link}{img}{end}'
                "</span></span>")

    context["body"] = _IMAGE.sub(frame, body)


_TABLE = re.compile(r"<table\b.*?</table>", re.S)
_PRE_TEXT = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
_BREAK_AFTER = re.compile(r"([./])(?=[^\s<])")


def break_table_code(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: inline code in a table may break after "." and "/" (a <wbr> there).

    course.css keeps such code from breaking anywhere else in a cell, so a dotted name
    ("layers.{i}.attention.wq.weight") wraps at its dots instead of inside a word."""
    body = context.get("body")
    if not body or "<table" not in body:
        return

    def in_code(match: re.Match) -> str:
        return match.group(1) + _BREAK_AFTER.sub(r"\1<wbr>", match.group(2)) + match.group(3)

    context["body"] = _TABLE.sub(lambda t: _PRE_TEXT.sub(in_code, t.group(0)), body)


_FONTAWESOME_JS = re.compile(r'\s*<script\b[^>]*\bsrc="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*>'
                             r"\s*</script>")
_SEARCH_JS = re.compile(r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|'
                        r'searchindex\.js)"></script>')
_DESIGN = re.compile(r'\s*<(?:link rel="stylesheet" type="text/css" href|script[^>]*src)='
                     r'"[^"]*_static/(?:sphinx-design\.min\.css|design-tabs\.js)[^"]*"[^>]*>(?:</script>)?')
_USES_DESIGN = re.compile(r'class="(?:[^"]*\s)?sd-')
LEAN_MATHJAX = ["input/tex", "output/chtml", "a11y/assistive-mml"]


def use_lean_mathjax(app, config) -> None:
    """config-inited: MathJax's startup.js with the components the book needs (not tex-chtml.js
    with its menu). sphinx-mathjax-offline set mathjax_path to its tex-chtml.js at setup."""
    if not str(config.mathjax_path).startswith("mathjax/"):
        return   # not the offline MathJax: leave whatever was chosen alone
    config.mathjax_path = "mathjax/startup.js"
    settings = dict(config.mathjax3_config or {})
    loader = dict(settings.get("loader", {}))
    loader["load"] = list(LEAN_MATHJAX)
    settings["loader"] = loader
    config.mathjax3_config = settings


def lighten_pages(app, exc) -> None:
    """build-finished: no FontAwesome script on any page, no search index but on the search
    page (unless search-as-you-type is on), and FontAwesome's script gone from _static."""
    if exc is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    search_everywhere = bool(app.config.html_theme_options.get("search_as_you_type"))
    for page in outdir.rglob("*.html"):
        if "_static" in page.relative_to(outdir).parts:
            continue
        html = page.read_text(encoding="utf-8")
        lighter = _FONTAWESOME_JS.sub("", html)
        if not search_everywhere and page.relative_to(outdir).as_posix() != "search.html":
            lighter = _SEARCH_JS.sub("", lighter)
        if not _USES_DESIGN.search(lighter):
            lighter = _DESIGN.sub("", lighter)
        if lighter != html:
            page.write_text(lighter, encoding="utf-8")
    for name in ("fontawesome.js", "fontawesome.js.map", "fontawesome.js.LICENSE.txt"):
        (outdir / "_static" / "scripts" / name).unlink(missing_ok=True)


_PST_HEADER_TOGGLE = re.compile(r'(<header id="pst-header"[^>]*>\s*<div class="bd-header__inner[^"]*">\s*'
                                r'<button class="[^"]*primary-toggle"[^>]*>.*?</button>)', re.S)
_BRAND = re.compile(r'<a class="navbar-brand logo" href="([^"]+)">\s*<p class="title logo__title">'
                    r'([^<]+)</p>')


def name_the_book(app, exc) -> None:
    """build-finished: the phone header (#pst-header, hidden on a wide screen by course.css)
    names the book next to its menu button, linking to the book's first page as the sidebar's
    title does (issue 34: on a phone nothing on the first screen said which book it was)."""
    if exc is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in outdir.rglob("*.html"):
        if "_static" in page.relative_to(outdir).parts:
            continue
        html = page.read_text(encoding="utf-8")
        brand = _BRAND.search(html)
        if not brand or 'class="course-header-title"' in html:
            continue
        link = f'<a class="course-header-title" href="{brand.group(1)}">{brand.group(2).strip()}</a>'
        named = _PST_HEADER_TOGGLE.sub(lambda m: m.group(1) + "\n  " + link, html, count=1)
        if named != html:
            page.write_text(named, encoding="utf-8")


def root_favicon(app, exc) -> None:
    """The site's root holds a favicon.ico too: jupyter-book's redirecting index.html has no icon
    link, so a browser asks for /favicon.ico there (a 404 in the console). Drawn like favicon.svg."""
    if exc is not None or app.builder.format != "html":
        return
    from PIL import Image, ImageDraw

    icon = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    draw = ImageDraw.Draw(icon)
    draw.rounded_rectangle((0, 0, 31, 31), radius=6, fill="#3b6ea5")
    draw.text((16, 16), "L", fill="#ffffff", anchor="mm", font_size=18)
    icon.save(Path(app.outdir) / "favicon.ico", sizes=[(32, 32)])


def setup(app):
    app.connect("config-inited", add_static)
    app.connect("config-inited", use_lean_mathjax)
    app.connect("build-finished", lighten_pages)
    app.connect("build-finished", name_the_book)
    app.connect("build-finished", root_favicon)
    app.connect("html-page-context", dedupe_scripts)
    app.connect("html-page-context", frame_figures)
    app.connect("html-page-context", break_table_code)
    app.add_css_file("course.css")
    app.add_js_file("course.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
