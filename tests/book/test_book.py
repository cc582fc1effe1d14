"""The book's notebooks follow the course's rules: executed, seeded, numbers glued, terms in the glossary,
exercises listed with their points, diagrams drawn."""

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
            assert output.get("name") != "stderr", (
                f"stderr output stored in {path.name}: {''.join(output['text'])[:80]}")


# The exercise files a student gets (the instructor's tree keeps them in sync with solutions/:
# `make test-unit` runs `python -m llama_course.grade.stubs --check`), so this test checks the same
# thing in the instructor's tree and in the student release, which has no solutions/.
EXERCISE_FILES = sorted((REPO / "exercises").glob("ch[0-9][0-9]_*.py"))
# each stub's `raise NotImplementedError("Exercise 4.1 softmax (Chapter 4, ...)")`
STUB_LABEL = re.compile(r"""NotImplementedError\(\s*['"]((?:Exercise|Homework) \d+\.\w+) (\w+) \(Chapter (\d+)""")


def exercise_labels(path):
    """[(label, function name)] of an exercise file's stubs, e.g. ("Exercise 4.1", "softmax")."""
    found = STUB_LABEL.findall(path.read_text(encoding="utf-8"))
    assert {int(chapter) for *_, chapter in found} == {int(path.stem[2:4])}, f"{path.name}: {found}"
    return [(label, name) for label, name, _ in found]


def test_every_exercise_file_belongs_to_a_chapter_notebook():
    assert len(EXERCISE_FILES) >= 10, "exercises/ holds the students' stubs"
    chapters = {p.stem[:4] for p in NOTEBOOKS}
    assert [p.name for p in EXERCISE_FILES if p.stem[:4] not in chapters] == []


@pytest.mark.parametrize("path", EXERCISE_FILES, ids=lambda p: p.stem)
def test_exercises_are_listed_with_the_grader_command(path):
    """The chapter's Exercises section lists every exercise of its file (label and function, as
    **Exercise 4.1 `softmax`**, the function's arguments optional) and the command that grades them."""
    notebook = next(p for p in NOTEBOOKS if p.stem[:4] == path.stem[:4])
    labels = exercise_labels(path)
    assert labels, f"{path.name} has no exercise stub"
    markdown = "\n".join("".join(c["source"]) for c in cells(notebook) if c["cell_type"] == "markdown")
    assert "python -m llama_course.grade exercises/" in markdown
    for label, name in labels:
        assert re.search(rf"\*\*{re.escape(label)} `{re.escape(name)}(\([^`]*\))?`\*\*", markdown), \
            f"{notebook.name} does not list {label} `{name}`"


GLOSSARY = (REPO / "book" / "glossary.md").read_text(encoding="utf-8")
# the glossary's terms: the unindented lines inside its {glossary} directives (one per letter)
GLOSSARY_BLOCKS = re.findall(r"^```\{glossary\}\n(.*?)\n```$", GLOSSARY, re.S | re.M)
GLOSSARY_TERMS = [t for block in GLOSSARY_BLOCKS for t in re.findall(r"^(\S[^\n]*)\n  \S", block, re.M)]
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


def glossary_key(term):
    """The glossary's order: the English term, case-insensitively (the 中文 follows it)."""
    return term.casefold()


def test_glossary_is_alphabetical_with_a_letter_index():
    terms = list(GLOSSARY_TERMS)
    assert terms == sorted(terms, key=glossary_key), "glossary entries are not in alphabetical order"
    # one section per initial letter: a label, a heading with the letter, one {glossary} block
    sections = re.findall(r"^\(([\w-]+)\)=\n## ([A-Z])\n+```\{glossary\}\n(.*?)\n```$", GLOSSARY, re.S | re.M)
    assert len(sections) == len(GLOSSARY_BLOCKS), "every {glossary} block sits under its own letter heading"
    letters = [letter for _, letter, _ in sections]
    assert letters == sorted({t[0].upper() for t in terms}), "a section for each initial letter, in order"
    for _, letter, block in sections:
        for term in re.findall(r"^(\S[^\n]*)\n  \S", block, re.M):
            assert term[0].upper() == letter, f"{term!r} is filed under {letter}"
    # the index: before the first section, a {ref} link to every section, in order, and nothing else
    head = GLOSSARY.split("```{glossary}", 1)[0].rsplit("\n(", 1)[0]
    index = re.findall(r"\{ref\}`([^`<]+?) <([\w-]+)>`", head)
    assert index == [(letter, label) for label, letter, _ in sections], "the letter index must link every section"
    labels = set(re.findall(r"^\(([\w-]+)\)=$", GLOSSARY, re.M))
    assert {target for _, target in index} <= labels, "an index link points at no label of the glossary"
    assert "glossary" in labels, "the page keeps its (glossary)= label"


# symbols that belong in math: a definition that writes them outside $...$ is plain-text math
GLOSSARY_PLAIN_MATH = re.compile(r"[√Σ∑ᵀ⊙⌈⌉≤≥−∞γβτηλωσ×]|\b[A-Za-z]_[A-Za-z]")


def test_glossary_writes_formulas_as_math():
    for block in GLOSSARY_BLOCKS:
        for term, definition in re.findall(r"^(\S[^\n]*)\n((?:  [^\n]*\n?)+)", block, re.M):
            prose = re.sub(r"(?<!\\)\$[^$\n]+?\$|\{[\w:\-]+\}`[^`]*`|`[^`\n]*`", "", definition)
            plain = GLOSSARY_PLAIN_MATH.search(prose)
            assert not plain, f"{term}: write the formula as MyST math: {plain[0]!r} in {prose.strip()!r}"


# ------------------------------------------------------------------------------ number guard
# "Numbers in prose are glued from code, never typed." This guard scans every chapter's markdown
# for digits outside what may hold them: glue roles and every other role ({glue:text}`...`,
# {ref}, {eq}, {cite:p}...), math, inline code and code/directive fences, labels, links, and
# sentences that cite a source (a number quoted from a paper travels with its citation). What is
# left must match the general allow-list below or a chapter's explicit entry, each with a reason;
# anything else is a typed-in number and fails the test. (test_number_guard_catches_a_typed_number
# shows it failing.)
_FENCE = re.compile(r"^(`{3,}|:{3,})([^\n]*)\n(.*?)^\1[ \t]*$", re.S | re.M)
# Directives whose text is prose, read like the rest: admonitions and dropdowns (their title and
# body), figures (their caption and alt text). Every other fence (code, math, listings) is skipped.
_PROSE_DIRECTIVES = {"admonition", "note", "tip", "hint", "important", "warning", "caution", "attention",
                     "danger", "error", "seealso", "dropdown", "figure"}
_DIRECTIVE = re.compile(r"\{([\w-]+)\}[ \t]*(.*)")
_OPTION = re.compile(r"^[ \t]*:(\w[\w-]*):[ \t]*(.*)$", re.M)
_STRIP = [
    re.compile(r"\$\$.*?\$\$", re.S),                      # display math
    re.compile(r"(?<!\\)\$(?:[^$\n]|\n(?![ \t]*\n))+?\$"),   # inline math, across a line break too
    re.compile(r"\{[\w:\-]+\}`[^`]*`"),                    # roles: glue, ref, eq, numref, cite, term
    re.compile(r"`[^`\n]*`"),                               # inline code
    re.compile(r"^\([\w\-]+\)=[ \t]*$", re.M),              # labels
    re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+"),  # link targets
    re.compile(r"<[^>]+>"),                                 # HTML tags
    re.compile(r"^[ \t]*\d+\.[ \t]|\|[ \t]*\d+\.[ \t]", re.M),  # list items, chapter rows
]
_HEADING_NUMBER = re.compile(r"^(#+)[ \t]+\d+(\.\d+)*\.?[ \t]", re.M)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z{*(\[$_`])")
NUMBER_ALLOW = [   # (pattern, why a number matching it is not a measurement)
    (r"\b(1[89]|20)\d\d\b(?![.,]\d)", "years"),
    (r"\b(Sections?|Chapters?|Exercises?|Homework|Figures?|Tables?|Listings?|Equations?|Parts?|Labs?)"
     r"\s+\d+(\.\d+)*([–-]\d+(\.\d+)*)?((\s*(,|and|or|to)\s*)+\d+(\.\d+)*)*",
     "section, chapter, figure and exercise numbers"),
    (r"\b(Llama|LLaMA|Qwen|GPT|Mistral|Mixtral|Gemma|Phi|DeepSeek)[ -]?\d+(\.\d+)?", "model family names"),
    (r"(?<![\w.,])\d+(\.\d+)?([xX×]\d+)?[BMKTbm](-A\d+(\.\d+)?[BM])?\b", "model sizes: 7B, 8x7B, 30B-A3B"),
    (r"\bU\+[0-9A-F]{4,6}\b", "Unicode code points"),
    (r"(?<![\w.,])\d+-bit\b", "number formats: 16-bit, 32-bit"),
    (r"\b[A-Za-z][\w-]*\d[\w.-]*", "names with digits: float32, H100, Qwen3, UTF-8"),
    (r"(?<![\w.,])\d(?!\w|[.,]\d)", "single digits: the constants of definitions (sum to 1, layer 0)"),
    (r"\b\d+ points\b", "exercise points: tests/e2e/test_points.py checks each against the points table"),
]
ALT = "alt text and captions live in cell metadata, which cannot hold glue; "
NUMBER_ALLOW_CHAPTER = {   # chapter -> [(pattern, reason)]: numbers typed on purpose
    "ch11_lab": [
        (r"\b256 single bytes", "the 256 values of a byte"),
        (r"\b65,536 tokens|need 32 bits", "2^16 ids fit 16-bit integers; Llama 3's vocabulary needs 32 bits"),
        (r"windows of 512 tokens, batches of 64 and 5,000 steps|uses\s+1e-3",
         "the GPU alternative, a comment in the parameters cell that nothing runs"),
        (r"0\.95 rather than the usual 0\.999", "AdamW's published beta_2 (LLaMA) and Adam's default"),
        (r"\b10%\s+rather\s+than\s+at\s+zero|decay\s+to\s+10%|decay\s+0\.1\s+on|clipping\s+at\s+1\.0",
         "LLaMA's published recipe (Section 11.4 cites it)"),
        (r"down to 10% of the peak", "LLaMA's published decay to 10% (Section 11.4 cites it), in a caption"),
        (r"twenty times longer means passing over the same\s+text about\s+× 20",
         "the factor a question poses, spelled out in its answer"),
        (r"Chinchilla's 20|\b20 tokens per parameter|the 20-token rule",
         "Chinchilla's published rule (Section 11.9 cites it)"),
        (r"a 90/10 split", "the package's default split (llama_course.data.split)"),
    ],
    "ch12_after_llama": [
        (r"a name that\s+appeared 20,000 tokens earlier|does reach 20,000 tokens back",
         "the distance a question poses, chosen by hand, and its answer"),
        (r"its 4096-token window|until 4096 tokens and then stays flat|from 512 to 131,072 tokens",
         ALT + "Mistral 7B v0.1's window and the plot's range, both set in the cell that draws it"),
        (r"on 4096 fresh tokens", ALT + "the test batch of the balancing experiment (its cell's code)"),
    ],
    "ch13_parallel": [
        (r"one process with 16 rows if rank 0 had 10 rows",
         "the rows of a question's made-up split (8 + 8 against 10 + 6); the answer works them out"),
        (r"key/value heads on 16 GPUs|key/value heads and 16 ranks",
         "the sizes a question poses (more GPUs than key/value heads), and its answer"),
        (r"grey 80 GB line|the 80 GB line at 16 GPUs|flat at about 1100 GB|near 300 and 150 GB",
         ALT + "readings of the memory figure (GPU_MEMORY_GB and Llama-2 70B's 16, 4 and 2 bytes per parameter)"),
        (r"weights 2P, gradients 2P and AdamW state 12P", "ZeRO's bytes per parameter, the legend of a drawn diagram"),
    ],
    "ch02_tokens": [(r"\b25[56]\b", "a byte has 256 values, 0 to 255: a fact of the byte"),
                    (r"from 257 to 4096", ALT + "the plot's range of vocabulary sizes, set in its cell")],
    "ch03_norm": [(r"below 1e-6|above 1e6", ALT + "orders of magnitude read off a log-scale figure")],
    "ch04_attention": [(r"from 16 to 1024|from about 0\.7|near 0\.25|near 0\.3\b",
                        ALT + "the plot's range of head widths and readings of its curves")],
    "ch05_rope": [(r"pair index 0 to 63", ALT + "the pairs of a 128-wide head, the plot's axis")],
    "ch06_ffn": [(r"Why 11008", "the heading names LLaMA-7B's published FFN width; the section computes it"),
                 (r"x = -1\.28|minimum of about -0\.28", "SiLU's minimum, a constant of the function (Section 6.2)")],
    "ch08_decode": [(r"rising at 45 degrees", "a slope of one on log-log axes: geometry, not a measurement")],
    "ch09_gqa": [(r"reaching 64 GiB|from about 6\.2", ALT + "readings of the figure's curves")],
    "ch10_moe": [(r"moving average over (10|20) steps", ALT + "the smoothing window set in the cell that draws it")],
    "labs": [(r"\b\d+ min\b", "the time a lab takes: the author's estimate, stated as such"),
             (r"grader, chapter \d+", "chapter numbers")],
}
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?")


def _prose_of_fence(match: re.Match) -> str:
    """What of a fenced block the guard reads: an admonition's or dropdown's title and body, a
    figure's caption and alt text (not its file name), nested fences handled the same way;
    nothing of any other block."""
    directive = _DIRECTIVE.match(match[2].strip())
    if directive is None or directive[1] not in _PROSE_DIRECTIVES:
        return " "
    title = "" if directive[1] == "figure" else directive[2]
    alt = " ".join(value for name, value in _OPTION.findall(match[3]) if name == "alt")
    body = _OPTION.sub("", match[3])
    return "\n\n".join(part for part in (title, alt, unfence(body)) if part.strip()) + "\n"


def unfence(markdown: str) -> str:
    return _FENCE.sub(_prose_of_fence, markdown)


def typed_numbers(markdown: str, allow=()) -> list[tuple[str, str]]:
    """The numbers of ``markdown`` that no rule explains, each with a little context."""
    paragraphs = []
    for para in re.split(r"\n\s*\n", unfence(markdown)):
        if "{cite:" in para:   # a sentence that cites its source may quote the source's numbers
            para = " ".join(s for s in _SENTENCE.split(para) if "{cite:" not in s)
        for rx in _STRIP:
            para = rx.sub(" ", para)
        paragraphs.append(_HEADING_NUMBER.sub(r"\1 ", para))
    text = "\n\n".join(paragraphs)
    for pattern, _ in [*allow, *NUMBER_ALLOW]:   # a chapter's phrases first, whole
        text = re.sub(pattern, lambda m: " " * len(m.group(0)), text)
    return [(m.group(0).rstrip(","), " ".join(text[max(0, m.start() - 50):m.end() + 30].split()))
            for m in _NUMBER.finditer(text)]


def prose_of(path: Path) -> str:
    """The prose of a chapter or a page: markdown cells, and the captions and alt text that code
    cells give their figures in metadata."""
    if path.suffix == ".md":
        return path.read_text(encoding="utf-8")
    parts = []
    for c in cells(path):
        if c["cell_type"] == "markdown":
            parts.append("".join(c["source"]))
        meta = c.get("metadata", {}).get("mystnb", {})
        parts += [meta.get("figure", {}).get("caption", ""), meta.get("image", {}).get("alt", "")]
    return "\n\n".join(p for p in parts if p)


PAGES = [*NOTEBOOKS, REPO / "book" / "labs.md"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_no_typed_numbers_in_prose(path):
    found = typed_numbers(prose_of(path), NUMBER_ALLOW_CHAPTER.get(path.stem, ()))
    assert not found, (f"{path.name}: numbers typed into the prose (glue them from code, or allow them "
                       f"in NUMBER_ALLOW_CHAPTER with a reason):\n"
                       + "\n".join(f"  {n!r} in ...{ctx}..." for n, ctx in found))


def test_number_guard_catches_a_typed_number():
    typed = "A decode step of Llama-2 7B reads 13.5 GB and takes 4.02 ms on an H100."
    assert [n for n, _ in typed_numbers(typed)] == ["13.5", "4.02"]
    assert [n for n, _ in typed_numbers("The cache holds 1,024 positions.")] == ["1,024"]
    # the same facts glued, in math, in code, quoted with a citation, or as names, pass
    fine = ("(ch08-x)=\n## 8.6 The roofline\n\n"
            "A decode step of Llama-2 7B reads {glue:text}`dc_gb:.2f` GB ($T = 4096$, `max_len=4096`)\n"
            "in float16 on an H100, as Section 8.3 and {numref}`fig-ch08-roofline` show. The paper\n"
            "reports 1.4T tokens {cite:p}`hoffmann2022training`. In 2023 it was sum to 1.\n\n"
            "```python\nx = 13.5\n```\n")
    assert typed_numbers(fine) == []
    # a chapter's explicit entry allows exactly its phrase, not the number elsewhere
    allow = [(r"windows of 512 tokens", "the GPU alternative")]
    assert typed_numbers("windows of 512 tokens", allow) == []
    assert [n for n, _ in typed_numbers("a loss of 512 nats", allow)] == ["512"]


def test_number_guard_reads_admonitions_dropdowns_figures_and_metadata():
    # the prose inside admonitions and dropdown answers, a figure's caption and alt text, and the
    # captions and alt text of a notebook's figures are read; code and math fences are not
    page = ("Intro.\n\n:::{admonition} Note\n:class: tip\nA decode step reads 13.5 GB.\n:::\n\n"
            ":::{admonition} Answer\n:class: dropdown\nIt takes 4.02 ms.\n```python\nx = 99.5\n```\n:::\n\n"
            "```{figure} figures/roofline.svg\n:name: fig-x\n:alt: A line rising to 989 TFLOP/s.\n\n"
            "The roofline of 3350 GB/s.\n```\n\n```{math}\nx = 77.5\n```\n")
    assert [n for n, _ in typed_numbers(page)] == ["13.5", "4.02", "989", "3350"]
    cell = {"cell_type": "code", "source": [], "metadata": {"mystnb": {"figure": {"caption": "Loss after 300 steps."},
                                                                      "image": {"alt": "A bar of 0.75."}}}}
    notebook = {"cells": [cell], "metadata": {}}
    path = REPO / "_build" / "guard_probe.ipynb"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(notebook), encoding="utf-8")
    try:
        assert [n for n, _ in typed_numbers(prose_of(path))] == ["300", "0.75"]
    finally:
        path.unlink()
    assert (REPO / "book" / "labs.md") in PAGES


# ------------------------------------------------------------------------------ drawn diagrams
FIGURES = REPO / "book" / "figures"
DIAGRAM_CHAPTERS = {*range(1, 11), 12, 13}   # every chapter but the lab draws its architecture
DIAGRAM = re.compile(r"```\{figure\} (figures/[\w-]+\.svg)\n((?::\w+: [^\n]*\n)*)\n(.+?)\n```", re.S)


def load_diagrams():
    spec = importlib.util.spec_from_file_location("make_diagrams", FIGURES / "make_diagrams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_diagram_files_are_what_the_script_draws():
    drawn = load_diagrams().render()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in FIGURES.glob("*.svg")}
    assert drawn == on_disk, "book/figures/*.svg differ from make_diagrams.py: run it and commit"
    for name, svg in drawn.items():
        assert "<title>" in svg and "<desc>" in svg, f"{name}: no title/description for screen readers"
        assert "http" not in svg.replace("http://www.w3.org/2000/svg", ""), f"{name} loads something"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_drawn_diagrams_have_alt_text_captions_and_a_reference(path):
    markdown = "\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")
    found = DIAGRAM.findall(markdown)
    if int(path.stem[2:4]) in DIAGRAM_CHAPTERS:
        assert found, f"{path.name}: chapters {sorted(DIAGRAM_CHAPTERS)} each show at least one drawn diagram"
    for target, options, caption in found:
        assert (REPO / "book" / target).is_file(), f"{path.name}: {target} does not exist"
        name = re.search(r":name: (\S+)", options)
        assert name and re.search(r":alt: \S", options), f"{path.name}: {target} without name or alt text"
        assert caption.strip(), f"{path.name}: {target} without a caption"
        assert f"{{numref}}`{name.group(1)}`" in markdown, f"{path.name}: the text never refers to {name.group(1)}"
    # a diagram's name must not clash with a plotted figure's (Sphinx would drop one of the two targets)
    names = [re.search(r":name: (\S+)", options)[1] for _, options, _ in found]
    names += [c["metadata"]["mystnb"]["figure"]["name"] for c in cells(path)
              if c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")]
    assert len(names) == len(set(names)), f"{path.name}: figure names used twice: {sorted(names)}"


def test_every_drawn_diagram_is_shown_by_a_chapter():
    shown = {}
    for path in NOTEBOOKS:
        markdown = "\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")
        for target, _, _ in DIAGRAM.findall(markdown):
            shown.setdefault(Path(target).name, path.name)
    drawn = set(load_diagrams().render())
    on_disk = {p.name for p in FIGURES.glob("*.svg")}
    assert not (drawn | on_disk) - set(shown), f"diagrams no chapter shows: {sorted((drawn | on_disk) - set(shown))}"


# ------------------------------------------------------------ printed listings read like formulas
LITERALINCLUDE = re.compile(r"```\{literalinclude\} \.\./(llama_course/[\w/]+\.py)\n(?:[^`\n]*\n)*?:pyobject: ([\w.]+)")
# Checks that are not argument checks: guards on what the function computed (the loss and
# gradient train_step computed, the logits stream_generate computed).
NOT_ARGUMENT_CHECKS = {("llama_course/train/loop.py", "train_step"): "check_finite",
                      ("llama_course/generate.py", "stream_generate"): "check_no_nan"}


def printed_objects() -> set[tuple[str, str]]:
    sources = ["".join(c["source"]) for p in NOTEBOOKS for c in cells(p) if c["cell_type"] == "markdown"]
    sources += [p.read_text(encoding="utf-8") for p in (REPO / "book").glob("*.md")]
    return {m.groups() for text in sources for m in LITERALINCLUDE.finditer(text)}


# A listing the text presents as an equation computes it in plain sight: the operations of the
# equation are in the printed code (calls by name, operators, [] for indexing; docstrings and
# comments do not count), so its maths cannot move into an unprinted helper. Key: (file, :pyobject:).
EQUATIONS = {
    ("llama_course/tokenizer/bpe.py", "merge_pair"): ("==", "append"),                  # eq-ch02-merge
    ("llama_course/tokenizer/bpe.py", "train_bpe"): ("heappop", "merge_everywhere"),    # argmax of the counts
    ("llama_course/tokenizer/bpe.py", "bpe_merge"): ("heapify", "heappop", "[]"),       # eq-ch02-rank
    ("llama_course/embedding.py", "embed"): ("[]",),                                    # x_i = E[t_i]
    ("llama_course/norm.py", "rms_norm"): ("rsqrt", "mean", "pow", "+", "*"),           # eq-ch03-rmsnorm
    ("llama_course/attention.py", "scaled_dot_product_attention"):                      # eq-ch04-attention
        ("@", "transpose", "sqrt", "masked_fill", "softmax"),
    ("llama_course/attention.py", "softmax"): ("amax", "-", "exp", "sum", "/"),         # eq-ch04-softmax
    ("llama_course/attention.py", "causal_mask"): ("tril",),
    ("llama_course/attention.py", "padding_mask"): ("!=",),
    ("llama_course/attention.py", "split_heads"): ("view", "transpose"),
    ("llama_course/attention.py", "merge_heads"): ("transpose", "reshape"),
    ("llama_course/attention.py", "MultiHeadAttention"):                                # eq-ch04-mha
        ("q_proj", "k_proj", "v_proj", "split_heads", "scaled_dot_product_attention", "merge_heads", "o_proj"),
    ("llama_course/rope.py", "_rotate"): ("*", "-", "+"),                               # eq-ch05-pair-update
    ("llama_course/ffn.py", "silu"): ("sigmoid", "*"),
    ("llama_course/ffn.py", "swiglu"): ("silu", "*"),                                   # eq-ch06-swiglu
    ("llama_course/ffn.py", "SwiGLU"): ("gate_proj", "up_proj", "silu", "*", "down_proj"),
    ("llama_course/model.py", "LlamaBlock"):                                            # eq-ch07-*-step
        ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp", "+"),
    ("llama_course/model.py", "Llama.forward"): ("embed_tokens", "layer", "norm", "lm_head"),  # eq-ch07-model
    ("llama_course/generate.py", "top_p_filter"): ("sort", "softmax", "cumsum", ">=", "masked_fill"),
    ("llama_course/cost.py", "kv_cache_bytes"): ("*",),                                 # eq-ch08-kv-bytes
    ("llama_course/gqa.py", "repeat_kv"): ("expand", "reshape"),
    ("llama_course/gqa.py", "mha_to_gqa"): ("mean",),                                   # eq-ch09-mean-pool
    ("llama_course/moe.py", "route_topk"):                                              # eq-ch10-router, eq-ch12-route
        ("softmax", "sigmoid", "+", "best_groups_only", "topk", "gather", "/", "*"),
    ("llama_course/moe.py", "load_balancing_loss"): ("softmax", "*", "sum"),
    ("llama_course/moe.py", "router_z_loss"): ("logsumexp", "pow", "mean"),
    ("llama_course/train/loop.py", "lr_at"): ("cos",),                                       # eq-ch11-lr
    ("llama_course/sliding_window.py", "sliding_window_mask"): ("-", ">=", "<", "&"),   # eq-ch12-band
}
# Listings printed beside an equation that compute something else (the step that wires it in).
NOT_AN_EQUATION = {
    ("llama_course/model.py", "Attention.__init__"): "makes the QK-norm modules; Attention.forward applies them",
    ("llama_course/model.py", "Attention.forward"): "one line per chapter's step; the maths is in the printed steps",
    ("llama_course/rope.py", "apply_rope"): "looks up the angles; _rotate, printed beside it, rotates the pairs",
    ("llama_course/kv_cache.py", "KVCache.update"): "stores keys and values; the equation is the buffer's shape",
    ("llama_course/gqa.py", "gqa_attention"): "regroups the queries, then calls scaled_dot_product_attention",
    ("llama_course/moe.py", "MoE.forward"): "dispatch; the routing equation is route_topk's",
    ("llama_course/moe.py", "MoE.route"): "calls route_topk with Mixtral's arguments",
    ("llama_course/deepseek_moe.py", "DeepSeekMoE"): "route_topk with DeepSeek's arguments, MoE.forward, shared",
    ("llama_course/train/loop.py", "make_optimizer"): "chooses AdamW's hyperparameters; torch computes the update",
    ("llama_course/train/loop.py", "train"): "the loop; lr_at and train_step are printed on their own",
    ("llama_course/train/loop.py", "train_step"): "calls the loss, clipping and the optimizer",
    ("llama_course/kv_cache.py", "KVCache.update_window"): "stores the window's keys",
    ("llama_course/mla.py", "MultiHeadLatentAttention.absorbed"): "Chapter 12's absorbed form (its helper's area)",
}
OPERATORS = {ast.MatMult: "@", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Add: "+", ast.Sub: "-",
             ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.Invert: "~", ast.USub: "-", ast.Eq: "==",
             ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def printed_node(path: str, name: str) -> ast.AST:
    node = ast.parse((REPO / path).read_text(encoding="utf-8"))
    for part in name.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)
    return node


def operations(node: ast.AST) -> set[str]:
    """The operations a listing's code performs: names of the functions and methods it calls,
    its operators, "[]" for indexing. Strings (docstrings) and comments are not code."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            found.add(getattr(n.func, "attr", None) or getattr(n.func, "id", ""))
        elif isinstance(n, (ast.BinOp, ast.UnaryOp, ast.AugAssign)):
            found.add(OPERATORS.get(type(n.op), ""))
        elif isinstance(n, ast.Compare):
            found.update(OPERATORS.get(type(op), "") for op in n.ops)
        elif isinstance(n, ast.Subscript):
            found.add("[]")
    return found - {""}


def equation_cells() -> set[tuple[str, str]]:
    """Printed listings whose markdown cell states or cites a numbered equation before the listing."""
    found = set()
    for p in NOTEBOOKS:
        for c in cells(p):
            text = "".join(c["source"]) if c["cell_type"] == "markdown" else ""
            for m in LITERALINCLUDE.finditer(text):
                if re.search(r"\(eq-[\w-]+\)|\{eq\}`", text[:m.start()]):
                    found.add(m.groups())
    return found


def test_a_listing_presented_as_an_equation_contains_its_operations():
    """Each listing of EQUATIONS is printed, and its code contains every operation of its equation."""
    printed = printed_objects()
    assert len(printed) > 40, f"found only {len(printed)} printed objects: the pattern is broken"
    missing = []
    for (path, name), wanted in sorted(EQUATIONS.items()):
        if (path, name) not in printed:
            missing.append(f"{path}:{name} is declared but the book does not print it")
            continue
        absent = [op for op in wanted if op not in operations(printed_node(path, name))]
        if absent:
            missing.append(f"{path}:{name} does not compute {absent} in the printed code")
    assert not missing, "printed listings without their equation's operations:\n" + "\n".join(missing)


def test_every_listing_printed_beside_an_equation_is_declared():
    """A listing whose paragraph states or cites an equation is in EQUATIONS (with its operations)
    or in NOT_AN_EQUATION (with the reason): a new listing cannot skip the rule."""
    beside = equation_cells()
    assert len(beside) > 15, f"found only {len(beside)} listings beside an equation: the pattern is broken"
    undeclared = sorted(beside - set(EQUATIONS) - set(NOT_AN_EQUATION))
    assert not undeclared, f"listings beside an equation, not declared: {undeclared}"
    assert not set(NOT_AN_EQUATION) - printed_objects(), "NOT_AN_EQUATION names a listing the book no longer prints"


def test_the_equation_rule_fails_a_listing_whose_maths_is_in_a_helper():
    hidden = ast.parse("def attention(q, k, v):\n    check(q, k, v)\n"
                       "    return _attend(q, k, v)  # softmax(q @ k.T) v\n")
    shown = ast.parse("def attention(q, k, v):\n    return softmax(q @ k.transpose(-2, -1) / math.sqrt(d)) @ v\n")
    wanted = EQUATIONS[("llama_course/attention.py", "scaled_dot_product_attention")]
    assert [op for op in wanted if op not in operations(hidden)] == list(wanted)
    assert [op for op in wanted if op not in operations(shown)] == ["masked_fill"]


def check_lines(function: ast.FunctionDef, guard: str = "") -> list[int]:
    """Source lines of the body's argument checks: a statement of the body that calls check_* or
    _check_* (but not ``guard``, a check of what the function computed), and an ``if`` of the body
    that raises (its test and its raise). Errors raised deeper (a loader's file errors) are not
    argument checks."""
    lines = set()
    for stmt in function.body:
        raised = [s for s in stmt.body if isinstance(s, ast.Raise)] if isinstance(stmt, ast.If) else []
        if raised:
            lines.update(range(stmt.lineno, stmt.test.end_lineno + 1))
            lines.update(range(raised[0].lineno, raised[0].end_lineno + 1))
        elif not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
            calls = [getattr(c.func, "attr", None) or getattr(c.func, "id", "")
                     for c in ast.walk(stmt) if isinstance(c, ast.Call)]
            if isinstance(stmt, ast.Raise) or any(c.startswith(("check_", "_check")) and c != guard for c in calls):
                lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return sorted(lines)


MAX_CHECK_LINES = 3


def test_the_book_prints_functions_whose_argument_checks_are_short():
    """A separate rule: every function (or method of a class) the book prints spends at most
    MAX_CHECK_LINES lines on argument checks, so the listing reads checks, then maths."""
    heavy = []
    for path, name in sorted(printed_objects()):
        node = printed_node(path, name)
        functions = [node] if isinstance(node, ast.FunctionDef) else \
            [n for n in node.body if isinstance(n, ast.FunctionDef)]
        for f in functions:
            lines = check_lines(f, NOT_ARGUMENT_CHECKS.get((path, f.name), ""))
            if len(lines) > MAX_CHECK_LINES:
                heavy.append(f"{path}:{name} ({f.name}): check lines {lines}")
    assert not heavy, f"printed functions with more than {MAX_CHECK_LINES} lines of checks:\n" + "\n".join(heavy)


def test_the_listing_check_counts_the_lines_of_checks():
    two = ast.parse("def f(x, n):\n    check_tensor('x', x)\n    if n < 0:\n        raise ValueError('n')\n"
                    "    return x * n\n").body[0]
    assert check_lines(two) == [2, 3, 4]
    guarded = ast.parse("def f(x):\n    x = x * 2\n    check_finite('x', x)\n    return x\n").body[0]
    assert check_lines(guarded) == [3] and check_lines(guarded, guard="check_finite") == []


# ------------------------------------------------------------ printed listings fit the column
# At 1280 px the book's column holds about 80 characters of its monospace type (measured in the
# browser by site_tests/test_reader_listings.py), so every line the book prints from llama_course/
# is at most LISTING_WIDTH characters (llama_course/ruff.toml's line length), as printed (after
# :dedent:). Files other work is still rewriting would be left out until it merges (issue 34);
# none is now: attention, mla, moe and deepseek_moe were narrowed to 79 too.
LISTING_WIDTH = 79
NARROWED_AFTER_THE_REDESIGN: set[str] = set()
DIRECTIVE = re.compile(r"```\{literalinclude\} \.\./(llama_course/[\w/]+\.py)\n((?::[\w-]+:[^\n]*\n)*)")


def listing_lines(path: str, options: dict[str, str]) -> list[str]:
    """The lines a literalinclude of ``path`` with ``options`` prints, as Sphinx selects them."""
    lines = (REPO / path).read_text(encoding="utf-8").splitlines()
    if "pyobject" in options:
        node = printed_node(path, options["pyobject"])
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        lines = lines[start - 1:node.end_lineno]
    if "start-at" in options:
        at = options["start-at"].strip('"')
        lines = lines[next(i for i, line in enumerate(lines) if at in line):]
    if "end-at" in options:
        at = options["end-at"].strip('"')
        lines = lines[:next(i for i, line in enumerate(lines) if at in line) + 1]
    if "end-before" in options:
        at = options["end-before"].strip('"')
        lines = lines[:next(i for i, line in enumerate(lines) if at in line)]
    dedent = int(options.get("dedent", 0))
    return [line[dedent:] for line in lines]


def printed_listings() -> list[tuple[str, dict[str, str], list[str]]]:
    found = []
    for p in NOTEBOOKS:
        for c in cells(p):
            if c["cell_type"] == "markdown":
                for m in DIRECTIVE.finditer("".join(c["source"])):
                    options = dict(re.findall(r":([\w-]+): ?([^\n]*)", m.group(2)))
                    found.append((m.group(1), options, listing_lines(m.group(1), options)))
    return found


def test_printed_listings_fit_the_column():
    listings = printed_listings()
    assert len(listings) > 40, f"found only {len(listings)} listings: the pattern is broken"
    wide = [f"{path} {options.get('pyobject') or options.get('start-at')}: {len(line)} characters: "
            f"{line.strip()[:50]!r}"
            for path, options, lines in listings if path not in NARROWED_AFTER_THE_REDESIGN
            for line in lines if len(line) > LISTING_WIDTH]
    assert not wide, f"{len(wide)} printed lines wider than {LISTING_WIDTH} characters:\n" + "\n".join(wide)


def test_the_listing_width_check_reads_the_directive_as_sphinx_does():
    lines = listing_lines("llama_course/model.py", {"pyobject": "Attention.forward",
                                                    "start-at": "if self.window is not None",
                                                    "end-at": "mask = window_mask", "dedent": "8"})
    assert lines[0].startswith("if self.window is not None") and "window_mask" in lines[-1]
    assert listing_lines("llama_course/norm.py", {"pyobject": "rms_norm"})[0].startswith("def rms_norm(")
