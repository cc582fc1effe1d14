"""What a reader sees on a laptop (1280x800) and a phone (390x844) (issue 34): icons the size of
icons, the footer's previous/next links readable, a search page whose first result is on the
first screen, display equations that fit their column (or, on a phone, scroll with their number
outside the scrolled part), inline code in tables that never breaks inside an identifier, every
chapter reachable from the intro's table and filed under its own part in the sidebar, and a phone
"On this page" drawer that closes once an entry is tapped.

Run with ``make test-site`` (with the rest of site_tests) or ``pytest site_tests/test_reader.py``.
The browser, the HTTP server and the built site are the session fixtures of conftest.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from layout import SIZES, measurement
from test_site import TIMEOUT_MS, book_pages, layout_group, toc_files

CHAPTER = "book/ch05_rope.html"   # has a previous and a next page, equations and a contents list
ICON_EM = 1.5                     # no icon taller or wider than this many times its font size
IDENTIFIER = re.compile(r"\w")    # letters, digits and "_": a line break between two of these
                                  # splits an identifier ("attenti|on", "mixtra|l", "0xxxxxx|x")


def _open(site, url: str, size: str, dark: bool = False):
    """A fresh page at ``size`` on ``url`` (relative to the HTTP base), fonts and images loaded."""
    width, height = SIZES[size]
    context = site.browser.new_context(viewport={"width": width, "height": height},
                                       service_workers="block",
                                       color_scheme="dark" if dark else "light")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(site.base["http"] + url, wait_until="load")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_timeout(300)   # FontAwesome swaps its <i> for <svg> after load
    return context, page


def _chapter(html_root: Path) -> str:
    if not (html_root / CHAPTER).is_file():
        pytest.skip(f"{CHAPTER} not built")
    return CHAPTER


# ------------------------------------------------------------------------------------ icons
_BIG_ICONS_JS = """
(limit) => [...document.querySelectorAll('svg, i[class*="fa-"]')]
  .filter(el => !el.closest('figure, .cell_output, .figure-frame, mjx-container, .output'))
  .filter(el => el.checkVisibility())
  .map(el => {
    const r = el.getBoundingClientRect();
    const em = parseFloat(getComputedStyle(el).fontSize);
    return {what: (el.getAttribute('class') || el.tagName) + ' in '
                  + (el.parentElement.className || el.parentElement.tagName),
            w: Math.round(r.width), h: Math.round(r.height), em};
  })
  .filter(i => Math.max(i.w, i.h) > limit * i.em + 1)
"""


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("where", ["chapter", "search"])
def test_icons_are_icon_sized(site, html_root, where, size):
    """No icon (FontAwesome, the copy and toggle buttons' SVGs) is drawn wider or taller than
    ICON_EM times its font size: a stylesheet rule meant for figures must not reach them."""
    url = _chapter(html_root) if where == "chapter" else "search.html?q=RoPE"
    context, page = _open(site, url, size)
    try:
        page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
        big = page.evaluate(_BIG_ICONS_JS, ICON_EM)
    finally:
        context.close()
    assert not big, f"{url} at {size}: icons drawn too large:\n" + "\n".join(
        f"{i['what']}: {i['w']}x{i['h']} px at font size {i['em']} px" for i in big)


# Is the element's text drawn where the reader can see it: inside the viewport sideways, not
# clipped by an ancestor that hides overflow, and on top (no other element covers its middle)?
_SHOWN_JS = """
(el) => {
  el.scrollIntoView({block: 'center'});
  const range = document.createRange();
  range.selectNodeContents(el);
  const text = range.getBoundingClientRect();
  const problems = [];
  if (text.width < 1 || text.height < 1) problems.push('not drawn');
  if (text.left < -1 || text.right > document.documentElement.clientWidth + 1)
    problems.push(`outside the screen (${Math.round(text.left)}..${Math.round(text.right)} px)`);
  for (let a = el; a && a !== document.body; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
    const box = a.getBoundingClientRect();
    if (text.left < box.left - 1 || text.right > box.right + 1
        || text.top < box.top - 1 || text.bottom > box.bottom + 1) {
      problems.push(`cut by ${a.tagName.toLowerCase()}.${a.className}`);
      break;
    }
  }
  for (const [fx, fy] of [[0.5, 0.5], [0.05, 0.5], [0.95, 0.5]]) {
    const x = text.left + fx * text.width, y = text.top + fy * text.height;
    const top = document.elementFromPoint(x, y);
    if (top && !el.contains(top) && !top.contains(el))
      problems.push(`covered at ${Math.round(x)},${Math.round(y)} by ${top.tagName.toLowerCase()}.`
                    + `${top.getAttribute('class') || ''}`);
  }
  return problems;
}
"""


@pytest.mark.parametrize("size", list(SIZES))
def test_footer_names_previous_and_next(site, html_root, size):
    """The foot of a chapter shows "previous" and "next" with the titles of those pages, whole
    and uncovered."""
    rel = _chapter(html_root)
    context, page = _open(site, rel, size)
    try:
        texts = page.query_selector_all(".prev-next-area .prev-next-subtitle, "
                                        ".prev-next-area .prev-next-title")
        assert len(texts) == 4, f"{rel}: expected previous and next, each with its title"
        problems = [f"{t.inner_text()!r}: {p}" for t in texts for p in t.evaluate(_SHOWN_JS)]
        icons = page.evaluate("""(limit) => [...document.querySelectorAll('.prev-next-area svg')]
            .map(el => { const r = el.getBoundingClientRect();
                         const em = parseFloat(getComputedStyle(el).fontSize);
                         return {w: r.width, h: r.height, em, right: r.right}; })
            .filter(i => Math.max(i.w, i.h) > limit * i.em + 1
                         || i.right > document.documentElement.clientWidth + 1)""", ICON_EM)
        problems += [f"chevron {i['w']:.0f}x{i['h']:.0f} px at font size {i['em']} px, right "
                     f"edge at {i['right']:.0f} px" for i in icons]
    finally:
        context.close()
    assert not problems, f"{rel} at {size}: the footer's links:\n" + "\n".join(problems)


@pytest.mark.parametrize("size", list(SIZES))
def test_search_page_shows_results_first(site, html_root, size):
    """search.html?q=RoPE: the first result starts on the first screen, and the query box in
    the page is wide enough to read a query, uncovered, and searches again when used."""
    context, page = _open(site, "search.html?q=RoPE", size)
    try:
        page.wait_for_selector("#search-results ul.search li")
        first = page.eval_on_selector("#search-results ul.search li",
                                      "li => li.getBoundingClientRect().top")
        boxes = [b for b in page.query_selector_all(".bd-search-container input[name=q], "
                                                    "main input[name=q]") if b.is_visible()]
        assert boxes, "no visible query box on the search page"
        box = boxes[0]
        width = box.bounding_box()["width"]
        covered = box.evaluate("""b => { const r = b.getBoundingClientRect();
            const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            return top === b || b.contains(top) ? '' : top.tagName + '.' + top.className; }""")
        column = page.eval_on_selector("#search-results", "r => r.getBoundingClientRect().width")
        assert first < SIZES[size][1], (
            f"at {size} the first search result starts at {first:.0f} px, below the first screen")
        assert width >= 0.5 * column, (
            f"at {size} the query box is {width:.0f} px wide in a {column:.0f} px column")
        assert not covered, f"at {size} the query box is covered by {covered}"
        box.fill("SwiGLU")
        box.press("Enter")
        page.wait_for_url(re.compile(r"q=SwiGLU"))
        page.wait_for_selector("#search-results ul.search li")
    finally:
        context.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_contents_label_and_first_entry_uncovered(site, html_root, size):
    """The page's contents list (the right sidebar on a laptop, the "On this page" drawer on a
    phone) shows its label whole and its first entry uncovered by the label's icon."""
    rel = _chapter(html_root)
    context, page = _open(site, rel, size)
    try:
        if size == "phone":
            [b for b in page.query_selector_all(".secondary-toggle") if b.is_visible()][0].click()
            page.wait_for_timeout(400)
            scope = "#pst-secondary-sidebar-modal"
        else:
            scope = ".bd-sidebar-secondary"
        label = page.query_selector(f"{scope} .onthispage")
        entry = page.query_selector(f"{scope} nav.page-toc a")
        assert label is not None and entry is not None, f"{rel}: no contents list in {scope}"
        label_text = label.inner_text().strip()
        problems = [f"label {label_text!r}: {p}" for p in label.evaluate(_SHOWN_JS)]
        problems += [f"entry {entry.inner_text()!r}: {p}" for p in entry.evaluate(_SHOWN_JS)]
    finally:
        context.close()
    assert label_text == "Contents", f"{rel}: the contents label reads {label_text!r}"
    assert not problems, f"{rel} at {size}:\n" + "\n".join(problems)


# ----------------------------------------------------------------------- code in tables
# Every place where inline code in a table cell is broken across lines, with the two characters
# around the break: each character's box is measured, and a character that starts a new line
# (its top below the previous character's) marks a break.
_TABLE_CODE_BREAKS_JS = """
() => {
  const found = [];
  for (const code of document.querySelectorAll('main td code, main th code')) {
    const text = code.textContent;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const chars = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rects = range.getClientRects();
        if (rects.length) chars.push({c: node.data[i], top: rects[rects.length - 1].top,
                                      h: rects[rects.length - 1].height});
      }
    }
    for (let i = 1; i < chars.length; i++) {
      if (chars[i].top > chars[i - 1].top + chars[i - 1].h / 2)
        found.push({text, before: chars[i - 1].c, after: chars[i].c,
                    at: text.slice(0, Math.max(0, chars.slice(0, i).map(x => x.c).join('').length))});
    }
  }
  return found;
}
"""


@measurement("table_code", sizes=("phone",))
def _measure_table_code(page, rel, site, size):
    """How much inline code the page's tables hold, and where it breaks across lines."""
    return {"count": page.evaluate("() => document.querySelectorAll('main td code, main th code').length"),
            "breaks": page.evaluate(_TABLE_CODE_BREAKS_JS)}


@layout_group("phone")
def test_table_code_never_breaks_inside_an_identifier(layout, html_root):
    """At 390 px no inline code in a table cell is broken between two identifier characters
    (letters, digits, "_"): "layers.{i}.attenti|on.wq" or "mixtra|l-8x7b" read as other names,
    and "0xxxxxx|x" as another bit pattern. Breaks after "." or "-" or at a space are fine."""
    bad, seen = [], 0
    for rel in dict.fromkeys(book_pages(html_root) + ["book/intro.html"]):   # intro: once
        if not (html_root / rel).is_file():
            continue
        found = layout.read(rel, "phone", "table_code")
        seen += found["count"]
        for b in found["breaks"]:
            if IDENTIFIER.match(b["before"]) and IDENTIFIER.match(b["after"]):
                bad.append(f"{rel}: {b['at']}|{b['text'][len(b['at']):]}")
    assert seen, "no inline code in any table: the selector is broken"
    assert not bad, f"{len(bad)} breaks inside an identifier at 390 px:\n" + "\n".join(bad[:40])


# ------------------------------------------------------------------------ display equations
# Each display equation as typeset: how far its box scrolls (its content wider than the box),
# whether its number shares a line with the box, and whether the box shows the scroll shade.
_EQUATIONS_JS = """
async () => {
  await MathJax.startup.promise;
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  return [...document.querySelectorAll('main mjx-container[display="true"]')].map(box => {
    const div = box.closest('div.math');
    const number = div && div.querySelector(':scope > .eqno');
    const b = box.getBoundingClientRect();
    const n = number && number.getBoundingClientRect();
    return {
      label: (number ? number.textContent.replace('#', '').trim() : '')
             || box.textContent.trim().slice(0, 40),
      over: box.scrollWidth - box.clientWidth,
      numberBeside: !!n && n.bottom > b.top + 2 && n.top < b.bottom - 2,
      shade: getComputedStyle(box).backgroundImage.includes('gradient'),
    };
  });
}
"""


def _has_display_math(html_root, rel: str) -> bool:
    return '<div class="math notranslate' in (html_root / rel).read_text(encoding="utf-8")


@measurement("equations")
def _measure_equations(page, rel, site, size):
    if not _has_display_math(site.root, rel):
        return None   # no display math on this page (and maybe no MathJax to wait for)
    return page.evaluate(_EQUATIONS_JS)


def _equations(layout, html_root, size):
    for rel in book_pages(html_root):
        if _has_display_math(html_root, rel):
            yield rel, layout.read(rel, size, "equations")


@layout_group("desktop")
def test_display_equations_fit_the_column(layout, html_root):
    """At 1280 px no display equation is wider than its column: none scrolls (equations joined
    with \\qquad are broken onto lines, a number that does not fit beside goes below)."""
    wide, seen = [], 0
    for rel, equations in _equations(layout, html_root, "desktop"):
        seen += len(equations)
        wide += [f"{rel}: {e['label']} is {e['over']} px too wide" for e in equations if e["over"] > 1]
    assert seen, "no display equation found: the selector is broken"
    assert not wide, f"{len(wide)} display equations cut at 1280 px:\n" + "\n".join(wide)


@layout_group("phone")
def test_phone_equation_numbers_never_hide_a_cut(layout, html_root):
    """At 390 px an equation wider than the screen scrolls with a visible shade, and its number
    is not beside it (where it sat at the clipped edge and made the cut equation look whole)."""
    bad, seen = [], 0
    for rel, equations in _equations(layout, html_root, "phone"):
        seen += len(equations)
        for e in equations:
            if e["over"] > 1 and e["numberBeside"]:
                bad.append(f"{rel}: {e['label']} scrolls {e['over']} px with its number beside it")
            if e["over"] > 1 and not e["shade"]:
                bad.append(f"{rel}: {e['label']} scrolls {e['over']} px without a shade")
    assert seen, "no display equation found: the selector is broken"
    assert not bad, f"{len(bad)} equations on a phone:\n" + "\n".join(bad)


# ------------------------------------------------------------------ the book's own structure
def test_intro_and_sidebar_cover_every_chapter(site, html_root):
    """The intro's "What you will build" table links every chapter of _toc.yml, and the sidebar
    files each chapter under a part of its own: only the lab (Chapter 11) under a part named
    "Lab" (Chapters 12 and 13 are not lab work)."""
    chapters = sorted(Path(c).name for c in toc_files() if Path(c).name.startswith("ch"))
    context, page = _open(site, "book/intro.html", "desktop")
    try:
        table = page.evaluate("""() => {
            const section = document.querySelector('section#what-you-will-build');
            return section ? [...section.querySelectorAll('table a')].map(a => a.getAttribute('href')) : null;
        }""")
        parts = page.evaluate("""() => [...document.querySelectorAll('.bd-sidebar-primary p.caption')]
            .map(p => [p.textContent.trim(),
                       [...p.nextElementSibling.querySelectorAll('a')].map(a => a.getAttribute('href'))])""")
    finally:
        context.close()
    assert table is not None, "book/intro.html has no section 'What you will build'"
    linked = {Path(h.split("#")[0]).stem for h in table}
    assert not set(chapters) - linked, (
        f"the intro's table does not list {sorted(set(chapters) - linked)}")
    filed = {Path(h.split("#")[0]).stem: caption for caption, hrefs in parts for h in hrefs}
    assert not set(chapters) - set(filed), f"the sidebar lacks {sorted(set(chapters) - set(filed))}"
    misfiled = [f"{c} under {filed[c]!r}" for c in chapters
                if ("lab" in filed[c].lower()) != c.startswith("ch11_")]
    assert not misfiled, "chapters under the wrong part of the sidebar: " + ", ".join(misfiled)


@measurement("empty_toggles", sizes=("desktop",))
def _measure_empty_toggles(page, rel, site, size):
    """The first line of each folded code cell with no output to show."""
    return page.evaluate("""() =>
        [...document.querySelectorAll('main div.cell')]
          .filter(cell => cell.querySelector(':scope > details.above-input'))
          .filter(cell => !cell.querySelector('.cell_output > *'))
          .map(cell => (cell.querySelector('pre') || cell).textContent.trim().split('\\n')[0])""")


@layout_group("desktop")
def test_no_empty_code_toggle(layout, html_root):
    """No chapter shows a "Show code cell source" bar with nothing under it: a folded cell
    (hide-input) must have an output to show; a cell the reader need not see at all (the Colab
    install cell) is removed from the page."""
    empty = []
    for rel in book_pages(html_root):
        if not re.match(r"book/ch\d+_", rel):
            continue
        empty += [f"{rel}: {first!r}" for first in layout.read(rel, "desktop", "empty_toggles")]
    assert not empty, "folded code cells with nothing to show:\n" + "\n".join(empty)


def test_phone_contents_drawer_closes_on_a_tap(site, html_root):
    """At 390 px, tapping an entry of the "On this page" drawer closes the drawer (the text is in
    view), leaves no tooltip over the header, and the next tap (the book menu) works."""
    rel = _chapter(html_root)
    context, page = _open(site, rel, "phone")
    try:
        [b for b in page.query_selector_all(".secondary-toggle") if b.is_visible()][0].click()
        page.wait_for_timeout(400)
        dialog = page.query_selector("#pst-secondary-sidebar-modal")
        assert dialog.evaluate("d => d.open"), "the drawer did not open"
        entry = dialog.query_selector("nav.page-toc a")
        target = entry.get_attribute("href")
        entry.click()
        page.wait_for_timeout(600)
        still_open = dialog.evaluate("d => d.open")
        tips = page.evaluate("""() => [...document.querySelectorAll('.tooltip')]
                                  .filter(t => t.checkVisibility()).map(t => t.textContent.trim())""")
        heading_top = page.eval_on_selector(target, "h => h.getBoundingClientRect().top")
        assert not still_open, "the 'On this page' drawer stays open over the text after a tap"
        assert not tips, f"tooltips left over the header: {tips}"
        assert 0 <= heading_top < SIZES["phone"][1], (
            f"the tapped section is not in view ({heading_top} px)")
        [b for b in page.query_selector_all(".primary-toggle") if b.is_visible()][0].click(timeout=5000)
        page.wait_for_timeout(400)
        assert page.eval_on_selector("#pst-primary-sidebar-modal", "d => d.open"), (
            "the next tap (the book menu) did nothing")
    finally:
        context.close()
