"""The Chinese edition's message catalogues: refresh them, and find what is left to translate.

    python tools/translations.py update     English messages -> locale/zh_CN/LC_MESSAGES/book/*.po
    python tools/translations.py check      every untranslated or fuzzy message, page by page
    python tools/translations.py export PAGE FILE.json   what PAGE still needs, for a translator
    python tools/translations.py import FILE.json        write those translations into PAGE's .po

``update`` (``make translations``) runs Sphinx's gettext builder on the English pages
(_build/gettext/book/<page>.pot, one catalogue per page) and merges them into the Chinese
catalogues with sphinx-intl: a new English message arrives untranslated, a changed one keeps its
old Chinese marked *fuzzy* (with the old English beside it, ``#| msgid``), so the translator sees
exactly what changed. Sphinx never shows a fuzzy translation; the page falls back to English
there, and ``check`` (and tests/book/test_translations.py) fail until it is translated again.

A message with no letters in it (a number in a table, a formula alone) needs no translation.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from babel.messages.pofile import read_po, write_po
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "locale"
LANGUAGE = "zh_CN"
CATALOGUES = LOCALE / LANGUAGE / "LC_MESSAGES" / "book"
POT = ROOT / "_build" / "gettext" / "book"
# The pages of the Chinese edition. The instructors' page stays English (its Chinese page says so).
PAGES = ("intro", "ch01_decoder_only", "ch02_tokens", "ch03_norm", "ch04_attention", "ch05_rope",
         "ch06_ffn", "ch07_model", "ch08_decode", "ch09_gqa", "ch10_moe", "ch11_lab",
         "ch12_after_llama", "ch13_parallel", "ch14_capstone", "labs", "glossary", "bibliography")
# The pages translated so far: tests/book/test_translations.py requires each of these to be complete
# and current, and expects every other page of PAGES to fail that check (strict xfail) until its
# translation is done and the page is added here.
TRANSLATED: tuple[str, ...] = PAGES     # every page of the Chinese edition is translated
_LETTER = re.compile(r"[^\W\d_]")
# Roles, inline code and maths are copied into a translation, not translated: `...` and $...$.
# A role's own text may be translated where it has a target: {doc}`Chapter 4 <ch04_attention>`
# becomes {doc}`第 4 章 <ch04_attention>`; the role and the target stay.
_KEPT = re.compile(r"\{[\w:-]+\}`[^`]*`|`[^`]*`|\$[^$]+\$")
# A chapter title "13. Beyond one GPU" translated as "13. 超越单块 GPU" parses as an enumerated list,
# which Sphinx rejects for a heading without a warning; "13\\. 超越单块 GPU" is the title.
_NUMBERED = re.compile(r"\d+\. ")
_MARKDOWN = MarkdownIt("commonmark")
_ROLE_WITH_TARGET = re.compile(r"(\{[\w:-]+\})`[^`<]*<([^`>]*)>`")


def literal_stars(text: str) -> int:
    """How many * a Markdown reader shows as text (emphasis it did not take as emphasis)."""
    tokens = _MARKDOWN.parseInline(text)
    return sum(child.content.count("*") for token in tokens for child in (token.children or [])
               if child.type == "text")


def kept(text: str) -> set[str]:
    """What a translation must copy from its English: roles (with their targets), code, maths."""
    return {_ROLE_WITH_TARGET.sub(r"\1<\2>", item) for item in _KEPT.findall(text)}


@dataclass(frozen=True)
class Problem:
    page: str
    message: str
    why: str          # "untranslated", "fuzzy", or what the translation lost

    def __str__(self) -> str:
        short = self.message if len(self.message) <= 100 else self.message[:97] + "..."
        return f"{self.page}: {self.why}: {short!r}"


def needs_translation(message: str) -> bool:
    """Whether a message has words (not only numbers, code or maths)."""
    return bool(_LETTER.search(_KEPT.sub("", message)))


def read_catalogue(path: Path):
    with path.open("rb") as f:
        return read_po(f)


def problems(page: str, pot_dir: Path = POT, po_dir: Path = CATALOGUES) -> list[Problem]:
    """Every message of ``page``'s English catalogue that its Chinese catalogue does not translate
    (missing, empty or fuzzy), or whose translation dropped a role, inline code or formula."""
    english = read_catalogue(pot_dir / f"{page}.pot")
    po_path = po_dir / f"{page}.po"
    chinese = read_catalogue(po_path) if po_path.is_file() else None
    found = []
    for message in english:
        if not message.id or not needs_translation(message.id):
            continue
        translated = chinese.get(message.id) if chinese is not None else None
        if translated is None or not translated.string:
            found.append(Problem(page, message.id, "untranslated"))
        elif translated.fuzzy:
            found.append(Problem(page, message.id, "fuzzy (the English changed)"))
        elif _NUMBERED.match(translated.string):
            found.append(Problem(page, message.id, "begins 'N. ', which Sphinx reads as a numbered list "
                                                   "and then drops (the English title stays): write 'N\\. '"))
        elif literal_stars(translated.string) > literal_stars(message.id):
            found.append(Problem(page, message.id, "an emphasis ** or * shows literally (CommonMark does not "
                                                   "close it next to Chinese punctuation: put the 。，outside)"))
        else:
            lost = sorted(kept(message.id) - kept(translated.string))
            if lost:
                found.append(Problem(page, message.id, f"the translation lost {', '.join(lost)}"))
    return found


def export(page: str, path: Path) -> int:
    """Write to ``path`` (JSON) the messages of ``page`` that need a translation, each with its
    English, the Chinese it has (if any) and why it is listed; returns how many."""
    english = {m.id: m for m in read_catalogue(POT / f"{page}.pot") if m.id}
    po_path = CATALOGUES / f"{page}.po"
    chinese = read_catalogue(po_path) if po_path.is_file() else None
    todo = []
    for problem in problems(page):
        old = chinese.get(problem.message) if chinese is not None else None
        todo.append({"en": english[problem.message].id, "zh": old.string if old else "", "why": problem.why})
    path.write_text(json.dumps({"page": page, "messages": todo}, ensure_ascii=False, indent=1), encoding="utf-8")
    return len(todo)


def import_(path: Path) -> int:
    """Write the translations of ``path`` (as ``export`` wrote it, with "zh" filled in) into the
    page's catalogue, no longer fuzzy; returns how many it wrote."""
    data = json.loads(path.read_text(encoding="utf-8"))
    po_path = CATALOGUES / f"{data['page']}.po"
    catalogue = read_catalogue(po_path)
    written = 0
    for item in data["messages"]:
        message = catalogue.get(item["en"])
        if message is None:
            raise ValueError(f"{data['page']}: no such English message in {po_path.name}: {item['en'][:80]!r}")
        if item["zh"].strip():
            zh = item["zh"]
            if _NUMBERED.match(zh):
                zh = zh.replace(". ", "\\. ", 1)
            message.string, written = zh, written + 1
            message.flags.discard("fuzzy")
            message.previous_id = []
    with po_path.open("wb") as f:
        write_po(f, catalogue, width=0)
    return written


def gettext(out: Path = POT.parent) -> None:
    """Write the English catalogues (Sphinx's gettext builder) into ``out``."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_book.py"), "--gettext", "--out", str(out)],
                   check=True, cwd=ROOT)


def update() -> None:
    """Refresh the English catalogues and merge them into the Chinese ones."""
    gettext()
    subprocess.run([sys.executable, "-m", "sphinx_intl", "update", "-p", str(POT.parent), "-d", str(LOCALE),
                    "-l", LANGUAGE, "-w", "0"], check=True, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "check", "export", "import"))
    parser.add_argument("args", nargs="*", help="export: PAGE FILE.json; import: FILE.json")
    args = parser.parse_args(argv)
    if args.command == "update":
        update()
        return 0
    if not POT.is_dir():
        gettext()
    if args.command == "export":
        page, path = args.args
        print(f"{export(page, Path(path))} message(s) of {page} written to {path}")
        return 0
    if args.command == "import":
        print(f"{import_(Path(args.args[0]))} translation(s) written")
        return 0
    found = [p for page in PAGES for p in problems(page)]
    for problem in found:
        print(problem)
    print(f"{len(found)} message(s) to translate" if found else "every message is translated")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
