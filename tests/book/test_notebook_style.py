"""How the book's notebooks present their code: plotting code is folded the same way in every
chapter.

A cell whose job is drawing a figure carries the ``hide-input`` tag, so Jupyter Book folds its code
behind a toggle and the page shows the figure with its caption (or ``remove-input``/``remove-cell``,
which hide it altogether). Such a cell prints nothing: a number the reader is meant to see, or the
computation behind it, belongs in a visible cell of its own, not behind the fold of a plot.
"""

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "book").glob("ch[0-9][0-9]_*.ipynb"))
FOLDED = {"hide-input", "remove-input", "remove-cell"}
# the calls that make a figure, for a cell whose committed outputs were cleared
DRAWS = re.compile(r"\bplt\.(subplots|figure|subplot)\(|\bplot_\w+\(")


def draws_a_figure(cell) -> bool:
    """True for a code cell that shows an image or makes a figure."""
    outputs = cell.get("outputs", [])
    shows_image = any(key.startswith("image/") for o in outputs for key in o.get("data", {}))
    captioned = "figure" in cell.get("metadata", {}).get("mystnb", {})
    return shows_image or captioned or bool(DRAWS.search("".join(cell["source"])))


def plotting_cells(path: Path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, cell) for i, cell in enumerate(cells)
            if cell["cell_type"] == "code" and draws_a_figure(cell)]


def test_every_chapter_is_checked():
    assert len(NOTEBOOKS) >= 13, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plotting_code_is_folded(path):
    unfolded = [f"cell {i}: {''.join(c['source']).splitlines()[0][:60]!r}"
                for i, c in plotting_cells(path)
                if not FOLDED & set(c.get("metadata", {}).get("tags", []))]
    assert not unfolded, f"{path.name}: plotting cells without the hide-input tag: {unfolded}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plotting_cells_print_nothing(path):
    printing = [f"cell {i}: {''.join(o['text'])[:60]!r}"
                for i, c in plotting_cells(path)
                for o in c.get("outputs", []) if o["output_type"] == "stream"]
    assert not printing, (f"{path.name}: a folded plotting cell prints what the reader should "
                          f"see computed (split the cell): {printing}")


def test_the_check_recognises_a_plotting_cell():
    """The detector is not vacuous: a bare plotting cell and a cell with an image output count."""
    by_source = {"cell_type": "code", "source": ["fig, ax = plt.subplots()\n"], "outputs": []}
    by_output = {"cell_type": "code", "source": ["show()"],
                 "outputs": [{"output_type": "display_data", "data": {"image/png": "x"}}]}
    plain = {"cell_type": "code", "source": ["print(1 + 1)"],
             "outputs": [{"output_type": "stream", "text": ["2\n"]}]}
    assert draws_a_figure(by_source) and draws_a_figure(by_output)
    assert not draws_a_figure(plain)
