"""Build one edition of the book: English into _build/html, Chinese into _build/html/zh.

    python tools/build_book.py [--language zh_CN] [--all] [-W] [-n] [--keep-going]
    python tools/build_book.py --gettext [--out DIR]   the English messages, _build/gettext/book/*.pot

Both editions are built from the same pages, the same notebooks and their committed outputs
(no cell is executed). The Chinese edition is Jupyter Book's build with Sphinx's ``language``
set to zh_CN: Sphinx replaces each English message (paragraph, heading, caption, table cell...)
by its translation from locale/zh_CN/LC_MESSAGES/book/<page>.po, and leaves code, outputs and
glued numbers as they are. ``jupyter-book build`` has no option for that one setting, so this
script calls the function it calls, with the override.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jupyter_book.sphinx import build_sphinx

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"en": "html", "zh_CN": "html/zh"}     # language -> folder under _build
# How each edition names its numbered things (_config.yml's numfig_format is the English one).
NUMFIG_FORMAT = {"zh_CN": {"figure": "图 %s", "table": "表 %s", "code-block": "代码清单 %s", "section": "%s 节"}}


def build(language: str, builder: str = "html", nitpicky: bool = False, out: Path | None = None,
          **options) -> int:
    """Sphinx's exit status for one edition (0: built), written to ``out`` (by default the
    edition's folder under _build, or _build/gettext for the message catalogues)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {sorted(LANGUAGES)}, got {language!r}")
    build_dir = ROOT / "_build" if out is None else Path(out).parent     # for Sphinx's doctrees
    if out is None:
        out = build_dir / ("gettext" if builder == "gettext" else LANGUAGES[language])
    overrides = {"external_toc_path": "_toc.yml", "language": language, "nitpicky": nitpicky,
                 "latex_individualpages": False}
    if language in NUMFIG_FORMAT:
        overrides["numfig_format"] = NUMFIG_FORMAT[language]
    return build_sphinx(ROOT, out, noconfig=True, path_config=str(ROOT / "_config.yml"),
                        confoverrides=overrides, builder=builder,
                        doctreedir=build_dir / f".doctrees-{builder}-{language}", **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--language", default="en", choices=sorted(LANGUAGES))
    parser.add_argument("--gettext", action="store_true", help="write the message catalogues (.pot)")
    parser.add_argument("--out", type=Path, help="the output folder (default: under _build)")
    parser.add_argument("--all", action="store_true", help="rebuild every page")
    parser.add_argument("-W", action="store_true", help="turn warnings into errors")
    parser.add_argument("-n", action="store_true", help="nitpicky: warn about every missing reference")
    parser.add_argument("--keep-going", action="store_true", help="with -W, report every warning")
    args = parser.parse_args(argv)
    options = {"force_all": args.all, "warningiserror": args.W, "keep_going": args.keep_going,
               "nitpicky": args.n, "out": args.out}
    return build("en" if args.gettext else args.language, "gettext" if args.gettext else "html", **options)


if __name__ == "__main__":
    sys.exit(main())
