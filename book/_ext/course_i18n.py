"""Sphinx extension for *LLaMA from the Inside*: two editions, English and 中文, from one source.

The English pages are the source. ``tools/build_book.py --language zh_CN`` builds the same pages
with Sphinx's ``language = "zh_CN"``: Sphinx's own ``Locale`` transform replaces each message
(paragraph, heading, caption, table cell...) by its translation in
``locale/zh_CN/LC_MESSAGES/book/<page>.po`` and leaves code, outputs and glued numbers alone.
The Chinese site is written to ``_build/html/zh/``, inside the English one. This extension adds
what Sphinx does not:

* **A language switch on every page** (once ``course_editions`` in _config.yml lists both).
  ``add_switch`` puts a link to the same page in the other edition at the top of the article
  (``hreflang``, with the other language's name in that language), and ``<link rel="alternate"
  hreflang>`` for both in the page's head. An English page ``book/ch01.html`` and its Chinese
  twin ``zh/book/ch01.html`` differ only by the ``zh/`` folder, so each link is the relative path
  to the root, then the other edition's folder, then the page.
* **The sidebar's part captions in Chinese.** sphinx-external-toc inserts the book's table of
  contents (with the part captions of ``_toc.yml``) in a transform that runs after Sphinx's
  ``Locale`` transform, so the captions were never translated, though the gettext builder lists
  them. ``TranslateTocCaptions`` runs after it and looks each caption up in the page's catalogue.
* **Glued numbers inside translated sentences.** Sphinx parses each translation as a small
  document of its own, so myst-nb's ``{glue:text}`` role found no notebook in it ("No key ...
  found in glue data for this document") and the number vanished from the Chinese sentence.
  ``glue_from_the_page`` lets the glue roles read, in a translation, the values the page glued
  (myst-nb writes them to its glue cache when it reads the page, before translating it; the
  book glues text only, ``{glue:text}``, which needs nothing else; myst-nb 1.4 is pinned).
"""
from __future__ import annotations

import os

import myst_nb.ext.glue.directives
import myst_nb.ext.glue.roles
from myst_nb.core.variables import RetrievalError, VariableOutput
from myst_nb.ext.glue.crossref import read_glue_cache
from sphinx import addnodes
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

# Each edition: its folder under the site root, the name shown on the switch, its BCP 47 tag.
EDITIONS = {"en": ("", "English", "en"), "zh_CN": ("zh/", "中文", "zh-CN")}


def edition(language: str | None) -> str:
    """The edition a Sphinx ``language`` builds ("en" for English or unset)."""
    return "zh_CN" if (language or "en").startswith("zh") else "en"


class TranslateTocCaptions(SphinxTransform):
    """Translate the captions of the toctrees that sphinx-external-toc inserted (priority 100)."""

    default_priority = 101

    def apply(self, **kwargs) -> None:
        if edition(self.config.language) == "en":
            return
        dirs = [os.path.join(self.env.srcdir, d) for d in self.config.locale_dirs]
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        catalog, has_catalog = init_locale(dirs, self.config.language, domain)
        if not has_catalog:
            return
        for toctree in self.document.findall(addnodes.toctree):
            if toctree.get("caption"):
                toctree["caption"] = catalog.gettext(toctree["caption"])


def glue_from_the_page(retrieve):
    """myst-nb's ``retrieve_glue_data``; in a translation's document (no notebook of its own), the
    values the page glued, from the glue cache myst-nb wrote when it read the page."""
    def retrieve_glue_data(document, key):
        if "nb_renderer" in document or not hasattr(document.settings, "env"):
            return retrieve(document, key)
        env = document.settings.env
        glued = read_glue_cache(env.mystnb_config.output_folder, env.docname)
        if key not in glued:
            raise RetrievalError(f"No key {key!r} found in glue data for page {env.docname!r}.")
        return VariableOutput(data=glued[key]["data"], metadata=glued[key].get("metadata", {}),
                              nb_renderer=None, vtype="glue")
    retrieve_glue_data.course_wrapped = True
    return retrieve_glue_data


def other_edition_link(pagename: str, language: str | None) -> tuple[str, str, str]:
    """(relative URL, name, BCP 47 tag) of ``pagename`` in the other edition."""
    here = edition(language)
    there = "en" if here == "zh_CN" else "zh_CN"
    to_root = "../" * (pagename.count("/") + (1 if here == "zh_CN" else 0))
    folder, name, tag = EDITIONS[there]
    return f"{to_root}{folder}{pagename}.html", name, tag


def add_switch(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: the link to this page in the other edition, and hreflang alternates
    (only once both editions are published: ``course_editions`` in _config.yml)."""
    if app.builder.format != "html" or doctree is None or len(app.config.course_editions) < 2:
        return
    href, name, tag = other_edition_link(pagename, app.config.language)
    own_tag = EDITIONS[edition(app.config.language)][2]
    context["body"] = (f'<p class="course-lang-switch"><a href="{href}" hreflang="{tag}" lang="{tag}" '
                       f'rel="alternate">{name}</a></p>\n' + context.get("body", ""))
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{tag}" href="{href}" />'
        f'\n<link rel="alternate" hreflang="{own_tag}" href="{pagename.rsplit("/", 1)[-1]}.html" />')


def setup(app):
    app.add_config_value("course_editions", ["en"], "html", types=[list])
    for module in (myst_nb.ext.glue.roles, myst_nb.ext.glue.directives):
        if not getattr(module.retrieve_glue_data, "course_wrapped", False):
            module.retrieve_glue_data = glue_from_the_page(module.retrieve_glue_data)
    app.add_transform(TranslateTocCaptions)
    app.connect("html-page-context", add_switch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
