"""Sphinx extension for *LLaMA from the Inside*: a bibliography that matches the text's citations,
and an Index of where each key term is used (issue 34).

* **Author–year labels.** The chapters cite author–year ("[Touvron et al., 2023a]",
  ``bibtex_reference_style: author_year``) but pybtex's styles label entries by number or
  "alpha" key, so the bibliography read "[1] ... [57]". ``AuthorYearLabels`` labels each entry as
  the text cites it: "Su et al., 2021", "Ba and Hinton, 2016" ... (the years of two works of one
  first author in one year carry their letter in references.bib). The formatting style
  ``course`` is pybtex's ``plain`` with these labels (``bibtex_default_style: course``).
* **Back-links.** book/bibliography.md promises "links to the places that cite it";
  sphinxcontrib-bibtex makes none. When every page is written (``build-finished``),
  ``add_backlinks`` finds each citation of the built pages (a ``<span id=...>`` around links to
  ``bibliography.html#...``) and lists under each entry the chapters that cite it, each linking
  to the citation.
* **Index entries for the chapters' key terms.** The Index repeated the glossary: one entry per
  term, pointing at the glossary. ``IndexTerms`` gives every page that uses a glossary term
  (``{term}``) an index entry for it at its first use there, under the glossary's own wording of
  the term, so the Index lists each term with the chapters that use it.
"""
from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform

GLOSSARY = Path(__file__).resolve().parents[1] / "glossary.md"


# ------------------------------------------------------------------------- author-year labels
def _last_names(person) -> str:
    from pybtex.richtext import Text

    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def author_year(entry) -> str:
    """The label the text cites: "Vaswani et al., 2017", "Ba and Hinton, 2016", "Su, 2021"."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_names(p) for p in people]
    if not names:
        who = entry.fields.get("organization") or entry.fields.get("institution") or entry.key
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


def register_styles() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.plain import Style as Plain
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            for entry in sorted_entries:
                yield author_year(entry)

    class Course(Plain):
        default_label_style = "course_author_year"

    register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "course", Course)


# ------------------------------------------------------------------------------ back-links
_CITATION = re.compile(r'<span class="bibtex-citation" id="([^"]+)">\[(.*?)\]</span>', re.S)
_TO_ENTRY = re.compile(r'href="(?:[^"#]*/)?bibliography\.html#([^"]+)"')
_ENTRY = re.compile(r'(<div class="citation" id="([^"]+)" role="doc-biblioentry">.*?)(</div>)', re.S)


def _page_name(rel: str, html: str) -> str:
    match = re.match(r"book/ch(\d+)_", rel)
    if match:
        return f"Chapter {int(match.group(1))}"
    title = re.search(r"<title>(.*?)(?:\s+&#8212;.*)?</title>", html, re.S)
    return title.group(1).strip() if title else Path(rel).stem


def add_backlinks(app, exc) -> None:
    """build-finished: under each bibliography entry, links to the pages that cite it."""
    if exc is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    bibliography = outdir / "book" / "bibliography.html"
    if not bibliography.is_file():
        return
    cited: dict[str, list[tuple[str, str, str]]] = {}   # entry id -> (page, anchor, page name)
    for page in sorted(outdir.glob("book/*.html")):
        if page == bibliography:
            continue
        html = page.read_text(encoding="utf-8")
        name = _page_name(page.relative_to(outdir).as_posix(), html)
        for span in _CITATION.finditer(html):
            for entry in dict.fromkeys(_TO_ENTRY.findall(span.group(2))):
                cited.setdefault(entry, []).append((page.name, span.group(1), name))

    def links(match: re.Match) -> str:
        refs = cited.get(match.group(2))
        if not refs:
            return match.group(0)
        by_page: dict[str, list[str]] = {}
        for page, anchor, name in refs:
            by_page.setdefault(name, []).append(f"{page}#{anchor}")
        parts = []
        for name, hrefs in by_page.items():
            more = "".join(f' <a href="{h}" aria-label="{name}, citation {i}">({i})</a>'
                           for i, h in enumerate(hrefs[1:], start=2))
            parts.append(f'<a href="{hrefs[0]}">{name}</a>{more}')
        return (f'{match.group(1)}<p class="citation-backlinks">Cited in {", ".join(parts)}.</p>'
                f"{match.group(3)}")

    html = bibliography.read_text(encoding="utf-8")
    html = re.sub(r'<p class="citation-backlinks">.*?</p>', "", html, flags=re.S)   # rebuilds
    bibliography.write_text(_ENTRY.sub(links, html), encoding="utf-8")


# ------------------------------------------------------------------------------- the Index
def glossary_terms() -> dict[str, str]:
    """Each glossary term, lower-cased (as {term} targets are) -> as the glossary writes it."""
    terms, inside = {}, False
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if line.startswith("```{glossary}"):
            inside = True
        elif line.startswith("```"):
            inside = False
        elif inside and line.strip() and not line[0].isspace():
            terms[line.strip().lower()] = line.strip()
    return terms


class IndexTerms(SphinxTransform):
    """An index entry at the first use of each glossary term on a page. A transform, not a
    doctree-read handler: the index domain collects a page's entries in SphinxDomains (priority
    850), before doctree-read, so entries added there never reached the Index."""

    default_priority = 840

    def apply(self, **kwargs) -> None:
        if self.env.docname.endswith("glossary") or not GLOSSARY.is_file():
            return
        terms = glossary_terms()
        seen = set()
        for xref in list(self.document.findall(addnodes.pending_xref)):
            if xref.get("reftype") != "term":
                continue
            key = str(xref.get("reftarget", "")).lower()
            if key in seen or key not in terms:
                continue
            seen.add(key)
            target_id = f"index-{self.env.new_serialno('index')}"
            target = nodes.target("", "", ids=[target_id])
            index = addnodes.index(entries=[("single", terms[key], target_id, "", None)])
            xref.parent.insert(xref.parent.index(xref), [index, target])
            self.document.note_explicit_target(target)


def setup(app):
    register_styles()
    app.add_transform(IndexTerms)
    app.connect("build-finished", add_backlinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
