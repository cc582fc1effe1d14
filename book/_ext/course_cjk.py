"""Sphinx extension for *LLaMA from the Inside*: the book's Chinese text, readable everywhere.

The chapters quote Chinese words (tokenizer examples, the glossary's translations). A reader
whose machine has no CJK font saw every one of them as a tofu box (issue 34). So the site ships
its own font for exactly the characters it uses, and marks Chinese text as Chinese:

* **A subset font, made at build time.** When the build has written every page
  (``build-finished``), ``write_subset`` collects the CJK characters of the built HTML and cuts
  them out of WenQuanYi Micro Hei (Apache-2.0; the Debian package ``fonts-wqy-microhei``, which
  the CI installs) with fontTools, as ``_static/fonts/course-cjk.woff`` (WOFF: zlib, which
  needs nothing beyond the standard library; WOFF2 would need brotli). ``_static/course-cjk.css``
  declares it as the family "Course CJK" with a ``unicode-range`` of exactly those characters,
  so a page without Chinese never downloads it. course.css puts "Course CJK" after the theme's
  fonts (any Chinese character anywhere falls back to it before the system's fonts) and first
  for ``:lang(zh)``. The font's licence travels with it: book/_static/fonts/LICENSE-WenQuanYi.txt.
  The build stays offline: the font is read from the disk. Where it is missing the build fails
  and says what to install (``COURSE_CJK_FONT`` may name another copy of the font).
* **lang="zh" on Chinese text.** ``mark_chinese`` wraps each run of CJK characters (with the CJK
  punctuation between them) in the page body in ``<span lang="zh">``, outside tags, scripts,
  styles and math (a span inside TeX source would break MathJax), so that screen readers speak
  it as Chinese and the browser picks a Chinese font and line breaking for it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from sphinx.errors import ExtensionError

FAMILY = "Course CJK"
FONT_FILE = "fonts/course-cjk.woff"     # under the output's _static
CSS_FILE = "course-cjk.css"             # under the output's _static
# Where Debian and Ubuntu's fonts-wqy-microhei put the font (font 0 of the collection is the
# proportional "WenQuanYi Micro Hei", font 1 its monospaced twin).
FONT_CANDIDATES = ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
                   "/usr/share/fonts/wqy-microhei/wqy-microhei.ttc")
# CJK radicals, symbols and punctuation, kana, Ext. A, unified ideographs, compatibility
# ideographs, vertical and small forms, and full-width forms (，：（）).
CJK_CLASS = ("\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
             "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef")
CJK = re.compile(f"[{CJK_CLASS}]")
_RUN = re.compile(f"[{CJK_CLASS}]+")
_SKIP = {"script", "style", "textarea", "title"}
_TAG = re.compile(r"(<[^>]*>)")
_OPEN = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)\b([^>]*)>")
_CLOSE = re.compile(r"</([a-zA-Z][a-zA-Z0-9]*)\s*>")
_MATH_CLASS = re.compile(r'\bclass="[^"]*\bmath\b')


def font_path() -> Path:
    """The WenQuanYi Micro Hei collection on this machine, or an error that says what to do."""
    named = os.environ.get("COURSE_CJK_FONT")
    if named:
        if not Path(named).is_file():
            raise ExtensionError(f"COURSE_CJK_FONT={named!r} is not a file")
        return Path(named)
    for candidate in FONT_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    raise ExtensionError(
        "the book ships a subset of WenQuanYi Micro Hei for its Chinese characters, and the font "
        "is not on this machine: apt-get install fonts-wqy-microhei (Debian, Ubuntu), or set "
        "COURSE_CJK_FONT to the path of wqy-microhei.ttc")


def mark_text(html: str) -> str:
    """``html`` with each run of CJK characters outside tags, scripts, styles and math in a
    ``<span lang="zh">`` (an element already marked lang="zh" is left as it is)."""
    out, skip, depth = [], None, 0        # skip: the tag name whose element we are inside
    for piece in _TAG.split(html):
        if not piece:
            continue
        if piece.startswith("<"):
            opened, closed = _OPEN.match(piece), _CLOSE.match(piece)
            if skip is None and opened:
                name, attrs = opened.group(1).lower(), opened.group(2)
                void = attrs.rstrip().endswith("/")
                if not void and (name in _SKIP or _MATH_CLASS.search(attrs)
                                 or 'lang="zh' in attrs):
                    skip, depth = name, 1
            elif skip is not None and opened and opened.group(1).lower() == skip:
                depth += 0 if opened.group(2).rstrip().endswith("/") else 1
            elif skip is not None and closed and closed.group(1).lower() == skip:
                depth -= 1
                if depth == 0:
                    skip = None
            out.append(piece)
        elif skip is None and CJK.search(piece):
            out.append(_RUN.sub(lambda m: f'<span lang="zh">{m.group(0)}</span>', piece))
        else:
            out.append(piece)
    return "".join(out)


def mark_chinese(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: lang="zh" on the Chinese text of the page body (the Chinese edition,
    whose <html> says lang="zh-CN", needs none)."""
    body = context.get("body")
    if body and CJK.search(body) and not (app.config.language or "en").startswith("zh"):
        context["body"] = mark_text(body)


def characters_used(outdir: Path) -> set[str]:
    """Every CJK character of the built pages (text, attributes and all), without the Chinese
    edition built inside the English site (``zh/``: it has its own font)."""
    found: set[str] = set()
    for page in outdir.rglob("*.html"):
        parts = page.relative_to(outdir).parts
        if "_static" in parts or parts[0] == "zh":
            continue
        found.update(CJK.findall(page.read_text(encoding="utf-8", errors="replace")))
    return found


def unicode_range(codepoints: list[int]) -> str:
    """CSS unicode-range for sorted code points, consecutive ones joined: U+4E00-4E01, U+4E09."""
    parts, start = [], None
    for i, cp in enumerate(codepoints):
        if start is None:
            start = cp
        if i + 1 == len(codepoints) or codepoints[i + 1] != cp + 1:
            parts.append(f"U+{start:X}" if start == cp else f"U+{start:X}-{cp:X}")
            start = None
    return ", ".join(parts)


def subset(source: Path, characters: set[str], target: Path) -> list[int]:
    """Write the glyphs of ``characters`` from font 0 of ``source`` to ``target`` as WOFF; the
    code points it covers, sorted (a character the font lacks is an error: it would be tofu)."""
    from fontTools import subset as ftsubset
    from fontTools.ttLib import TTFont

    font = TTFont(str(source), fontNumber=0, lazy=False)
    cmap = font.getBestCmap()
    missing = sorted(c for c in characters if ord(c) not in cmap)
    if missing:
        raise ExtensionError(f"{source.name} has no glyph for {''.join(missing)!r} "
                             f"({', '.join(f'U+{ord(c):04X}' for c in missing)}), used in the book")
    options = ftsubset.Options()
    options.flavor = "woff"
    options.hinting = False           # screens of today scale outlines well; half the size
    options.desubroutinize = True
    options.name_IDs = ["*"]          # keep the copyright and licence records
    options.notdef_outline = True
    subsetter = ftsubset.Subsetter(options)
    codepoints = sorted(ord(c) for c in characters)
    subsetter.populate(unicodes=codepoints)
    subsetter.subset(font)
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff"
    font.save(str(target), reorderTables=False)
    return codepoints


def write_subset(app, exc) -> None:
    """build-finished: the subset font and its @font-face for the characters the pages use."""
    if exc is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    static = outdir / "_static"
    characters = characters_used(outdir)
    css = ["/* Generated by book/_ext/course_cjk.py: WenQuanYi Micro Hei, cut down to the "
           f"{len(characters)} CJK characters of this site. Licence: fonts/LICENSE-WenQuanYi.txt */"]
    if characters:
        codepoints = subset(font_path(), characters, static / FONT_FILE)
        css.append("@font-face {\n"
                   f'  font-family: "{FAMILY}";\n'
                   f'  src: url("{FONT_FILE}") format("woff");\n'
                   "  font-display: swap;\n"
                   f"  unicode-range: {unicode_range(codepoints)};\n"
                   "}")
    static.mkdir(parents=True, exist_ok=True)
    (static / CSS_FILE).write_text("\n".join(css) + "\n", encoding="utf-8")


def setup(app):
    app.connect("html-page-context", mark_chinese)
    app.connect("build-finished", write_subset)
    app.add_css_file(CSS_FILE)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
