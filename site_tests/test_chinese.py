"""The book's Chinese text on a machine without a CJK font (issue 34): every Chinese character
is drawn with a glyph of its own (the site ships a subset font, book/_ext/course_cjk.py), not as
the tofu box of a missing glyph, and Chinese text is marked ``lang="zh"``.

The glyph check runs its own Chromium with a fontconfig that knows one Latin font and no CJK font
(whatever this machine has installed: the CI installs fonts-wqy-microhei for its screenshots),
checks that the system's CJK fonts are indeed out of its reach, then draws each character of the
page with the font the page gives it.
"""
from __future__ import annotations

import glob
import html.parser
import os
import re
import shutil

import pytest
from sitepages import site_pages
from test_site import CHROMIUM_ARGS, TIMEOUT_MS

CJK = re.compile("[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                 "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
PAGE = "book/glossary.html"   # every Chinese term of the book, with its translation


class _Unmarked(html.parser.HTMLParser):
    """CJK text in the <body> that is not inside an element marked lang="zh"."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None]] = []   # (tag, lang given on it)
        self.in_body = False
        self.unmarked: list[str] = []
        self.marked = 0

    def _lang(self) -> str:
        return next((lang for _, lang in reversed(self.stack) if lang is not None), "")

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.in_body = True
        if tag not in self.VOID:
            self.stack.append((tag, dict(attrs).get("lang")))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):   # tolerate unclosed children
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if not self.in_body or not CJK.search(data):
            return
        if any(tag in ("script", "style") for tag, _ in self.stack):
            return
        if self._lang().lower().startswith("zh"):
            self.marked += len(CJK.findall(data))
        else:
            self.unmarked.append(data.strip()[:60])


def test_chinese_text_is_marked_lang_zh(html_root):
    """On every built page, each Chinese character of the body text is inside lang="zh" (so
    screen readers speak it as Chinese and browsers choose a Chinese font for it)."""
    unmarked, marked = [], 0
    for rel in site_pages(html_root):
        parser = _Unmarked()
        parser.feed((html_root / rel).read_text(encoding="utf-8"))
        marked += parser.marked
        unmarked += [f"{rel}: {text!r}" for text in parser.unmarked]
    assert not unmarked, (f"{len(unmarked)} runs of Chinese text without lang=\"zh\":\n"
                          + "\n".join(unmarked[:30]))
    assert marked, "no Chinese text found on any page: the book has some (the glossary)"


# A fontconfig that knows one Latin font (DejaVu Sans, where this machine has it) and nothing else.
_FONTCONFIG = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir>{fonts}</dir>
  <cachedir>{cache}</cachedir>
</fontconfig>
"""


@pytest.fixture
def browser_without_cjk_fonts(site, pytestconfig, tmp_path):
    fonts, cache = tmp_path / "fonts", tmp_path / "cache"
    fonts.mkdir()
    cache.mkdir()
    latin = sorted(glob.glob("/usr/share/fonts/**/DejaVuSans.ttf", recursive=True))
    if latin:
        shutil.copy(latin[0], fonts / "DejaVuSans.ttf")
    config = tmp_path / "fonts.conf"
    config.write_text(_FONTCONFIG.format(fonts=fonts, cache=cache), encoding="utf-8")
    exe = shutil.which(pytestconfig.getoption("--browser"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FONTCONFIG")}
    env["FONTCONFIG_FILE"] = str(config)
    browser = site.browser.browser_type.launch(executable_path=exe, headless=True,
                                               args=CHROMIUM_ARGS, env=env)
    yield browser
    browser.close()


# For each distinct CJK character of the main text: the font the page gives it, and the pixels of
# the character drawn in that font on a canvas, next to the pixels of an unassigned code point
# (U+0378: no font has it, so it is always the missing-glyph box) in the same font. A control:
# the same character drawn with the Latin fonts alone must be that box too, or the system's CJK
# fonts were not hidden and the check would prove nothing.
_GLYPHS_JS = """
async () => {
  await document.fonts.ready;
  const found = new Map();
  const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const c of node.data.match(CJK) || []) {
      if (found.has(c)) continue;
      const s = getComputedStyle(node.parentElement);
      found.set(c, `${s.fontStyle} ${s.fontWeight} 40px ${s.fontFamily}`);
    }
  }
  const canvas = document.createElement('canvas');
  canvas.width = 48; canvas.height = 48;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (font, text) => {
    ctx.clearRect(0, 0, 48, 48);
    ctx.font = font;
    ctx.textBaseline = 'top';
    ctx.fillText(text, 2, 2);
    return Array.from(ctx.getImageData(0, 0, 48, 48).data.filter((_, i) => i % 4 === 3)).join(',');
  };
  for (const font of new Set(found.values())) await document.fonts.load(font, [...found.keys()].join(''));
  const results = [];
  const latin = '400 40px "DejaVu Sans", sans-serif';
  for (const [c, font] of found) {
    const pixels = draw(font, c);
    results.push({c, font, tofu: pixels === draw(font, '\\u0378'), blank: !/[1-9]/.test(pixels),
                  pixels: pixels.length > 0 ? pixels.split(',').reduce((a, v) => (a * 31 + +v) % 1000000007, 7) : 0,
                  controlTofu: draw(latin, c) === draw(latin, '\\u0378')});
  }
  const faces = [...document.fonts].map(f => `${f.family}: ${f.status}`);
  return {results, faces};
}
""".replace("CJK", "/" + CJK.pattern + "/g")


def test_chinese_glyphs_render_without_system_fonts(browser_without_cjk_fonts, site, html_root):
    """On the glossary (every Chinese term of the book), in a Chromium that can reach no CJK font
    of this machine, each Chinese character is drawn with a glyph of its own: not the
    missing-glyph box, not blank, and no two characters drawn alike."""
    if not (html_root / PAGE).is_file():
        pytest.skip(f"{PAGE} not built")
    context = browser_without_cjk_fonts.new_context(viewport={"width": 1280, "height": 800},
                                                    service_workers="block")
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(site.base["http"] + PAGE, wait_until="load")
        found = page.evaluate(_GLYPHS_JS)
    finally:
        context.close()
    results = found["results"]
    assert len(results) >= 20, f"{PAGE}: only {len(results)} Chinese characters found"
    leaked = [r["c"] for r in results if not r["controlTofu"]]
    assert not leaked, (f"the system's CJK fonts were not hidden from the test browser (it drew "
                        f"{''.join(leaked[:20])} without the site's font): the check cannot be made")
    tofu = [r["c"] for r in results if r["tofu"] or r["blank"]]
    assert not tofu, (f"{PAGE}: {len(tofu)} of {len(results)} Chinese characters drawn as the "
                      f"missing-glyph box or blank: {''.join(tofu[:40])}\nfont: {results[0]['font']}"
                      f"\nweb fonts: {found['faces']}")
    alike = len(results) - len({r["pixels"] for r in results})
    assert not alike, f"{PAGE}: {alike} Chinese characters drawn the same as another one"
