"""A chapter's first screen on a phone (390x844, issue 34): the title takes at most two lines
(at the theme's 42 px it took three to five, half the screen), and the header names the book,
whole, next to its menu buttons.

Read from the chapters' pages at 390 px that every phone layout check shares (layout.py).
"""
from __future__ import annotations

import re

from layout import measurement
from test_site import book_pages, layout_group

BOOK_TITLE = "LLaMA from the Inside"
MAX_TITLE_LINES = 2

_FIRST_SCREEN_JS = """
(title) => {
  const h1 = document.querySelector('main article h1');
  const s = h1 && getComputedStyle(h1);
  // the line boxes of the heading's text (not its hidden "#" link): rects of its text nodes,
  // grouped by their top (rects on one line differ by less than half the font size)
  const rects = [];
  if (h1) {
    const walker = document.createTreeWalker(h1, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest('.headerlink') || !n.data.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      rects.push(...[...range.getClientRects()].filter(r => r.width > 1));
    }
  }
  const tops = rects.map(r => r.top).sort((a, b) => a - b)
    .filter((t, i, all) => i === 0 || t - all[i - 1] > parseFloat(s.fontSize) / 2);
  const header = document.querySelector('#pst-header');
  const named = header ? [...header.querySelectorAll('*')].filter(el =>
      el.checkVisibility() && el.children.length === 0 && el.textContent.trim() === title) : [];
  const shown = named.map(el => {
    const r = el.getBoundingClientRect(), h = header.getBoundingClientRect();
    return r.width > 1 && r.left >= -1 && r.right <= document.documentElement.clientWidth + 1
           && el.scrollWidth <= el.clientWidth + 1 && r.top >= h.top - 1 && r.bottom <= h.bottom + 1;
  });
  return {h1: h1 ? h1.textContent.replace('#', '').trim() : null, lines: tops.length,
          fontSize: s ? s.fontSize : null, headerShown: header ? header.checkVisibility() : false,
          titleInHeader: shown.some(Boolean)};
}
"""


@measurement("first_screen", sizes=("phone",))
def _measure_first_screen(page, rel, site, size):
    return page.evaluate(_FIRST_SCREEN_JS, BOOK_TITLE)


@layout_group("phone")
def test_phone_title_lines_and_header(layout, html_root):
    """At 390 px every chapter's title takes at most MAX_TITLE_LINES lines, and the header
    shows the book's title whole."""
    long_titles, no_name, seen = [], [], 0
    for rel in book_pages(html_root):
        if not re.match(r"book/ch\d+_", rel):
            continue
        got = layout.read(rel, "phone", "first_screen")
        seen += 1
        if got["h1"] is None or got["lines"] > MAX_TITLE_LINES:
            long_titles.append(f"{rel}: {got['h1']!r} takes {got['lines']} lines at {got['fontSize']}")
        if not (got["headerShown"] and got["titleInHeader"]):
            no_name.append(rel)
    assert seen, "no chapter page found"
    assert not long_titles, "chapter titles too long on a phone:\n" + "\n".join(long_titles)
    assert not no_name, f"the phone header does not show {BOOK_TITLE!r} whole on: {no_name}"
