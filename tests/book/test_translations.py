"""The Chinese edition cannot go stale unnoticed: every message of a translated page has a current
(non-fuzzy) translation that keeps its roles, code and maths, and the glossary's Chinese terms are
the ones used (tools/translations.py; CONTRIBUTING.md, "Translations")."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

REPO = Path(__file__).resolve().parents[2]


def load(name: str, path: Path):
    """A module of the repository that is not in a package (tools/, book/_ext/)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


translations = load("translations", REPO / "tools" / "translations.py")
course_i18n = load("course_i18n", REPO / "book" / "_ext" / "course_i18n.py")


def write_catalogue(path: Path, messages: dict[str, str], fuzzy: tuple[str, ...] = ()) -> None:
    catalogue = Catalog(locale="zh_CN")
    for english, chinese in messages.items():
        catalogue.add(english, chinese, flags=("fuzzy",) if english in fuzzy else ())
    with path.open("wb") as f:
        write_po(f, catalogue)


def test_a_changed_english_sentence_is_named(tmp_path):
    pot, po = tmp_path / "pot", tmp_path / "po"
    pot.mkdir(), po.mkdir()
    old, new = "Attention mixes the values.", "Attention mixes the values of earlier positions."
    write_catalogue(po / "page.po", {old: "注意力把值混合起来。", "Keys": "键"})
    write_catalogue(pot / "page.pot", {old: "", "Keys": ""})
    assert translations.problems("page", pot, po) == []
    write_catalogue(pot / "page.pot", {new: "", "Keys": ""})           # the English sentence changed
    assert translations.problems("page", pot, po) == [translations.Problem("page", new, "untranslated")]
    write_catalogue(po / "page.po", {new: "注意力把值混合起来。", "Keys": "键"}, fuzzy=(new,))   # as merged
    found = translations.problems("page", pot, po)
    assert [(p.message, p.why) for p in found] == [(new, "fuzzy (the English changed)")]
    assert new in str(found[0]) and "page" in str(found[0])


def test_a_translation_must_keep_roles_code_and_maths(tmp_path):
    english = "The block holds $12d^2$ parameters, {glue:text}`n:,` in all; see `rms_norm`."
    write_catalogue(tmp_path / "page.pot", {english: ""})
    write_catalogue(tmp_path / "page.po", {english: "每个块有 {glue:text}`n:,` 个参数；见 `rms_norm`。"})
    (problem,) = translations.problems("page", tmp_path, tmp_path)
    assert "$12d^2$" in problem.why


def test_a_role_keeps_its_target_and_may_translate_its_text(tmp_path):
    english = "{term}`Attention <Attention (注意力)>` is {doc}`Chapter 4 <ch04_attention>`'s subject."
    write_catalogue(tmp_path / "page.pot", {english: ""})
    good = "{term}`注意力 <Attention (注意力)>`是{doc}`第 4 章 <ch04_attention>`的主题。"
    write_catalogue(tmp_path / "page.po", {english: good})
    assert translations.problems("page", tmp_path, tmp_path) == []
    write_catalogue(tmp_path / "page.po", {english: good.replace("Attention (注意力)", "Attention")})
    (problem,) = translations.problems("page", tmp_path, tmp_path)
    assert "Attention (注意力)" in problem.why


def test_a_numbered_title_must_escape_its_number(tmp_path):
    write_catalogue(tmp_path / "page.pot", {"13. Beyond one GPU": ""})
    write_catalogue(tmp_path / "page.po", {"13. Beyond one GPU": "13. 超越单块 GPU"})
    (problem,) = translations.problems("page", tmp_path, tmp_path)
    assert "numbered list" in problem.why
    write_catalogue(tmp_path / "page.po", {"13. Beyond one GPU": "13\\. 超越单块 GPU"})
    assert translations.problems("page", tmp_path, tmp_path) == []


def test_emphasis_that_chinese_punctuation_leaves_open_is_found(tmp_path):
    english = "**Not so.** The ratio is 0 to 1."
    write_catalogue(tmp_path / "page.pot", {english: ""})
    write_catalogue(tmp_path / "page.po", {english: "**并非如此。**比值在 0 到 1 之间。"})
    (problem,) = translations.problems("page", tmp_path, tmp_path)
    assert "emphasis" in problem.why
    write_catalogue(tmp_path / "page.po", {english: "**并非如此**。比值在 0 到 1 之间。"})
    assert translations.problems("page", tmp_path, tmp_path) == []


def test_numbers_code_and_maths_alone_need_no_translation():
    assert not translations.needs_translation("4,096")
    assert not translations.needs_translation("$W_q x$")
    assert not translations.needs_translation("`q_proj`")
    assert translations.needs_translation("Foundations")
    assert translations.needs_translation("the `q_proj` weight")


def test_the_switch_leads_to_the_same_page_in_the_other_edition():
    assert course_i18n.other_edition_link("book/ch01_decoder_only", "en") == \
        ("../zh/book/ch01_decoder_only.html", "中文", "zh-CN")
    assert course_i18n.other_edition_link("book/ch01_decoder_only", "zh_CN") == \
        ("../../book/ch01_decoder_only.html", "English", "en")
    assert course_i18n.other_edition_link("search", "zh_CN") == ("../search.html", "English", "en")


# Terms whose English words are also ordinary words ("the value of x"), not checked in every use.
ORDINARY_WORDS = {"Query, key, value"}
GLOSSARY = (REPO / "book" / "glossary.md").read_text(encoding="utf-8")
TERMS = dict(re.findall(r"^([A-Z][^\n(]*?) \(([^)\n]*[\u4e00-\u9fff][^)\n]*)\)$", GLOSSARY, re.M))


def term_pattern(name: str) -> re.Pattern:
    """A glossary name in text: an acronym as written ("GLU", not "glues"), a word in any case,
    either with a plural s."""
    if name.isupper():
        return re.compile(rf"(?<![\w-]){re.escape(name)}s?(?![\w-])")
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?:s|es)?(?![\w-])", re.I)


def uses_term(name: str, text: str) -> bool:
    return term_pattern(name).search(text) is not None


def test_a_glossary_acronym_is_not_a_word_that_contains_it():
    assert uses_term("GLU", "a GLU gate") and uses_term("GLU", "two GLUs")
    assert not uses_term("GLU", "the loader glues them back")
    assert uses_term("Token", "three tokens") and uses_term("Attention", "attention heads")


def glossary_problems(page: str, po_dir: Path = translations.CATALOGUES) -> list[str]:
    """Translated messages of ``page`` that use a glossary term in English but not its Chinese."""
    path = po_dir / f"{page}.po"
    if not path.is_file():
        return []
    found = []
    for message in translations.read_catalogue(path):
        if not message.id or not message.string or message.fuzzy:
            continue
        text = message.id
        for english, chinese in LONGEST_NAME_FIRST:
            names = [name.strip() for name in english.split(",")]          # "Byte-pair encoding, BPE"
            used = any(uses_term(n, text) for n in names)
            for n in names:             # "rotary position embedding" is RoPE's, not a use of Embedding
                text = term_pattern(n).sub(" ", text)
            if english in ORDINARY_WORDS:
                continue
            kept_in_english = any(n.lower() in message.string.lower() for n in names)   # "RoPE", "softmax"
            if used and chinese not in message.string and not kept_in_english:
                found.append(f"{page}: {english!r} is not {chinese!r} in {message.string[:80]!r}")
    return found


LONGEST_NAME_FIRST = sorted(TERMS.items(), key=lambda term: -max(len(n) for n in term[0].split(",")))


def test_a_term_inside_a_longer_term_is_the_longer_ones(tmp_path):
    write_catalogue(tmp_path / "page.po", {"RoPE, a rotary position embedding, turns q and k.":
                                           "旋转位置编码转动 q 和 k。",
                                           "The embedding holds a row per token.": "嵌入矩阵每个词元一行。",
                                           "Each embedding row.": "每一行。"})
    (problem,) = glossary_problems("page", tmp_path)
    assert "'Embedding'" in problem and "每一行" in problem


def test_the_glossary_lists_terms_with_chinese():
    assert len(TERMS) > 50 and TERMS["Attention"] == "注意力"


def test_a_translation_that_renames_a_glossary_term_is_found(tmp_path):
    write_catalogue(tmp_path / "page.po", {"Attention weights sum to one.": "关注权重之和为一。",
                                           "RoPE rotates queries.": "旋转位置编码旋转查询。"})
    (problem,) = glossary_problems("page", tmp_path)
    assert "'Attention'" in problem and "注意力" in problem


@pytest.fixture(scope="module")
def english_catalogues(tmp_path_factory):
    """The English messages of today's pages (Sphinx's gettext builder, ~40 s of CPU)."""
    out = tmp_path_factory.mktemp("gettext") / "gettext"
    subprocess.run([sys.executable, str(REPO / "tools" / "build_book.py"), "--gettext", "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True)
    yield out / "book"
    shutil.rmtree(out.parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("page", [
    page if page in translations.TRANSLATED else
    pytest.param(page, marks=pytest.mark.xfail(strict=True, reason="not yet translated (issue 38)"))
    for page in translations.PAGES])
def test_every_message_of_a_translated_page_is_translated(page, english_catalogues):
    found = translations.problems(page, english_catalogues)
    assert not found, f"{len(found)} message(s) of {page} to (re)translate " \
                      f"(make translations, then edit locale/zh_CN/LC_MESSAGES/book/{page}.po):\n" + \
                      "\n".join(map(str, found[:20]))
    assert not glossary_problems(page), "\n".join(glossary_problems(page)[:20])


def test_the_chinese_edition_covers_every_page_but_the_instructors():
    toc = re.findall(r"(?:root|file): book/(\w+)", (REPO / "_toc.yml").read_text())
    assert set(translations.PAGES) == set(toc) - {"instructors"}
