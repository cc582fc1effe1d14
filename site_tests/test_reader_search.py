"""Searching the book as a reader does (issue 34): one search box on a laptop and no empty bar
above the page, a query box whose magnifier sits beside the query (not over its first letters),
and results whose summaries quote the chapter's text around the match, not the page's toolbar
("...Binder"), its contents list ("...Contents 12.1...") or its title.

The browser, the HTTP server and the built site are the session fixtures of conftest.py.
"""
from __future__ import annotations

import re

import pytest
from test_reader import SIZES, _chapter, _open

CHROME_WORDS = ("Binder", "Colab", "Contents", ".ipynb", ".pdf")   # the theme's toolbar and lists


def test_one_search_box_and_no_empty_bar_on_a_laptop(site, html_root):
    """At 1280 px a chapter shows one search field (the sidebar's), and the page starts with
    its own toolbar: no bar above it (the site header held nothing but a second search button)."""
    rel = _chapter(html_root)
    context, page = _open(site, rel, "desktop")
    try:
        boxes = page.evaluate("""() => [...document.querySelectorAll(
              '.search-button-field, .search-button, form.bd-search input[name=q]')]
            .filter(el => el.checkVisibility() && el.getBoundingClientRect().width > 0)
            .map(el => (el.closest('[id]') || {}).id + ' ' + el.className)""")
        bars = page.evaluate("""() => [...document.querySelectorAll('header, .bd-header, nav.navbar')]
            .filter(el => el.checkVisibility() && el.getBoundingClientRect().height > 8
                          && el.getBoundingClientRect().top < 1
                          && !el.closest('.bd-sidebar-primary, .bd-header-article'))
            .map(el => `${el.tagName.toLowerCase()}#${el.id}.${el.className}: `
                       + `${Math.round(el.getBoundingClientRect().height)} px high, holding `
                       + JSON.stringify(el.innerText.replace(/\\s+/g, ' ').trim()))""")
        toolbar = page.eval_on_selector(".bd-header-article", "e => e.getBoundingClientRect().top")
    finally:
        context.close()
    assert len(boxes) == 1, f"{rel} at 1280 px shows {len(boxes)} search fields: {boxes}"
    assert not bars, f"{rel} at 1280 px: a bar above the page:\n" + "\n".join(bars)
    assert toolbar < 8, f"{rel} at 1280 px: the page's toolbar starts {toolbar:.0f} px down"


@pytest.mark.parametrize("size", list(SIZES))
def test_search_magnifier_beside_the_query(site, html_root, size):
    """On the search page the query box's magnifier ends before the field's text starts."""
    context, page = _open(site, "search.html?q=RoPE", size)
    try:
        found = page.evaluate("""() => {
            const form = document.querySelector('main form.bd-search');
            const icon = form && form.querySelector('.fa-magnifying-glass, svg');
            const input = form && form.querySelector('input[name=q]');
            if (!icon || !input) return null;
            const i = icon.getBoundingClientRect(), f = input.getBoundingClientRect();
            return {iconRight: i.right, iconWidth: i.width,
                    textLeft: f.left + parseFloat(getComputedStyle(input).paddingLeft)};
        }""")
    finally:
        context.close()
    assert found, "no query box with a magnifier in the search page's main column"
    assert found["iconWidth"] > 0, "the magnifier is not drawn"
    assert found["iconRight"] <= found["textLeft"] + 1, (
        f"at {size} the magnifier (right edge {found['iconRight']:.0f} px) covers the query "
        f"text (from {found['textLeft']:.0f} px)")


def test_search_summaries_quote_the_text(site, html_root):
    """search.html?q=RoPE over HTTP: every result's summary contains the query and none of the
    page's chrome (toolbar menus, contents list) nor its title, which is the result's link."""
    context, page = _open(site, "search.html?q=RoPE", "desktop")
    try:
        page.wait_for_function("""() => { const s = document.querySelector('#search-results .search-summary');
                                          return s && /Search finished/.test(s.innerText); }""")
        results = page.evaluate("""() => [...document.querySelectorAll('#search-results ul.search li')]
            .map(li => ({title: (li.querySelector('a') || {}).textContent || '',
                         summary: (li.querySelector('.context') || {}).textContent || null}))""")
    finally:
        context.close()
    summaries = [r for r in results if r["summary"] is not None]
    assert len(summaries) >= 3, f"too few results with a summary: {results}"
    bad = []
    for r in summaries:
        text, title = " ".join(r["summary"].split()), " ".join(r["title"].split())
        chrome = [w for w in CHROME_WORDS if w in text]
        if chrome:
            bad.append(f"{title}: {', '.join(chrome)} in {text[:120]!r}")
        if not re.search("rope", text, re.I):
            bad.append(f"{title}: no 'RoPE' in {text[:120]!r}")
        if title and title in text:
            bad.append(f"{title}: the summary quotes the page's title: {text[:120]!r}")
    assert not bad, "search summaries that do not quote the text:\n" + "\n".join(bad)
