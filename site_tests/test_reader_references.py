"""The bibliography and the Index as a reader uses them (issue 34): each bibliography entry is
labelled as the text cites it (author–year, not "[12]"), links back to the places that cite it
(as book/bibliography.md promises), and shows no raw TeX ("$O(n^2)$"); the Index lists the
chapters that use each key term, not only the glossary.

The bibliography and the Index are each opened once in the shared browser (conftest.py); the
citations of the chapters are read from the built files.
"""
from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest
from test_reader import _open
from test_site import book_pages, toc_files

BIBLIOGRAPHY = "book/bibliography.html"
_CITE = re.compile(r'<span class="bibtex-citation" id="([^"]+)">\[(.*?)\]</span>', re.S)
_CITE_LINK = re.compile(r'<a class="reference internal" href="bibliography\.html#([^"]+)"[^>]*>(.*?)</a>',
                        re.S)


def _text(fragment: str) -> str:
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def _citations(html_root: Path) -> dict[str, list[tuple[str, str, str]]]:
    """entry id -> (page, id of the citation's span, text of the link) for every citation."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    for rel in book_pages(html_root):
        if rel == BIBLIOGRAPHY:
            continue
        for span in _CITE.finditer((html_root / rel).read_text(encoding="utf-8")):
            for entry, text in _CITE_LINK.findall(span.group(2)):
                found.setdefault(entry, []).append((rel, span.group(1), _text(text)))
    return found


_ENTRIES_JS = """
() => [...document.querySelectorAll('main div.citation')].map(c => ({
  id: c.id,
  label: (c.querySelector('.label') || {}).textContent || '',
  text: [...c.querySelectorAll(':scope > p:not(.citation-backlinks)')].map(p => p.textContent).join(' '),
  back: [...c.querySelectorAll('a')].filter(a => !/^https?:/.test(a.getAttribute('href') || ''))
          .map(a => a.getAttribute('href')),
}))
"""


def test_bibliography_matches_the_citations(site, html_root):
    """Each entry is labelled "[<what the text cites>]", links back to every page citing it
    (to the citation itself), and shows no TeX source."""
    if not (html_root / BIBLIOGRAPHY).is_file():
        pytest.skip(f"{BIBLIOGRAPHY} not built")
    context, page = _open(site, BIBLIOGRAPHY, "desktop")
    try:
        entries = page.evaluate(_ENTRIES_JS)
    finally:
        context.close()
    cited = _citations(html_root)
    assert entries and cited, "no bibliography entries or no citations found: the selectors are broken"
    problems = []
    for e in entries:
        label = " ".join(e["label"].split())
        for rel, _, text in cited.get(e["id"], []):
            if label != f"[{text}]":
                problems.append(f"{e['id']}: labelled {label!r}, cited as {text!r} in {rel}")
                break
        if "$" in e["text"] or "\\" in e["text"]:
            problems.append(f"{e['id']} {label}: TeX source shown: {e['text'][:100]!r}")
        back = {(Path(BIBLIOGRAPHY).parent / h.split("#")[0]).as_posix() + "#" + h.split("#")[1]
                for h in e["back"] if "#" in h}
        want = {f"{rel}#{span}" for rel, span, _ in cited.get(e["id"], [])}
        if want - back:
            problems.append(f"{e['id']} {label}: no link back to {sorted(want - back)[:3]}")
    assert not problems, f"{len(problems)} bibliography problems:\n" + "\n".join(problems[:30])


def test_index_lists_the_chapters_using_each_term(site, html_root):
    """The Index links every chapter (where its key terms are used), not only the glossary."""
    context, page = _open(site, "genindex.html", "desktop")
    try:
        hrefs = page.evaluate("() => [...document.querySelectorAll('main table.indextable a')]"
                              ".map(a => a.getAttribute('href'))")
    finally:
        context.close()
    assert hrefs, "the Index has no entries"
    linked = {Path(h.split("#")[0]).stem for h in hrefs}
    chapters = {Path(c).name for c in toc_files() if Path(c).name.startswith("ch")}
    missing = sorted(chapters - linked)
    assert not missing, (f"the Index links no place in {missing}; it links only "
                         f"{sorted(linked)}")
