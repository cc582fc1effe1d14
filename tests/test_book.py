"""The book's notebooks follow the course's rules (COURSE_DESIGN.md, "Notebooks")."""

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOC = (REPO / "_toc.yml").read_text()
NOTEBOOKS = sorted(REPO / f"{name}.ipynb" for name in re.findall(r"file: (book/ch\d\d_\w+)", TOC))


def cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_every_chapter_notebook_in_book_is_in_the_toc():
    on_disk = sorted((REPO / "book").glob("ch[0-9][0-9]_*.ipynb"))
    assert [p.name for p in on_disk] == [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_figures_have_captions_and_alt_text(path):
    for i, cell in enumerate(cells(path)):
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if images:
            meta = cell.get("metadata", {}).get("mystnb", {})
            assert meta.get("figure", {}).get("caption"), f"{path.name} cell {i}: figure without a caption"
            assert meta.get("figure", {}).get("name"), f"{path.name} cell {i}: figure without a name"
            assert meta.get("image", {}).get("alt"), f"{path.name} cell {i}: figure without alt text"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_structure_and_clean_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert re.search(r"^## Summary", markdown, re.M), "a chapter ends with a summary"
    assert "Check your understanding" in markdown and ":class: dropdown" in markdown
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in code), "a parameters cell"
    assert any("google.colab" in "".join(c["source"]) for c in code[:2]), "a Colab set-up cell first"
    for c in code:
        assert c.get("execution_count") is not None, "the notebook is executed and its outputs committed"
        for output in c.get("outputs", []):
            assert output["output_type"] != "error"
            assert output.get("name") != "stderr", f"stderr output stored in {path.name}: {''.join(output['text'])[:80]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_listed_with_the_grader_command(path):
    number = int(path.stem[2:4])
    solutions = list((REPO / "solutions").glob(f"ch{number:02d}_*.py"))
    if not solutions:
        pytest.skip("this chapter has no graded exercises")
    markdown = "\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")
    assert "python -m llama_course.grade exercises/" in markdown
    for label in re.findall(r"# BEGIN SOLUTION (Exercise \d+\.\d+) (\w+)", solutions[0].read_text()):
        assert label[0] in markdown, f"{path.name} does not list {label[0]}"


GLOSSARY = (REPO / "book" / "glossary.md").read_text(encoding="utf-8")
# the glossary's terms: the unindented lines inside the {glossary} directive
GLOSSARY_TERMS = re.findall(r"^(\S[^\n]*)\n  \S", GLOSSARY.split("```{glossary}", 1)[1].split("\n```", 1)[0], re.M)
TERM_LINK = re.compile(r"\{term\}`(?:[^`<]*<([^>`]+)>|([^`]+))`")


def term_links(path):
    markdown = "\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")
    return [(target or text).strip().lower() for target, text in TERM_LINK.findall(markdown)]


def test_glossary_terms_are_english_and_chinese():
    assert len(GLOSSARY_TERMS) >= 40
    for term in GLOSSARY_TERMS:
        assert re.search(r"\([^)]*[\u4e00-\u9fff][^)]*\)$", term), f"glossary term without its Chinese: {term}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_links_its_terms_to_the_glossary_once(path):
    links = term_links(path)
    assert len(links) >= 5, f"{path.name} links only {len(links)} terms to the glossary"
    known = {t.lower() for t in GLOSSARY_TERMS}
    assert set(links) <= known, f"{path.name} links terms not in the glossary: {set(links) - known}"
    repeated = {t for t in links if links.count(t) > 1}
    assert not repeated, f"{path.name} links {repeated} more than once (only the first use is linked)"


def test_every_glossary_term_is_linked_from_a_chapter():
    linked = {t for path in NOTEBOOKS for t in term_links(path)}
    assert not [t for t in GLOSSARY_TERMS if t.lower() not in linked]
