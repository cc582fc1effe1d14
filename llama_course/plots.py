"""Figures the chapters draw, and the book's one figure style.

matplotlib is imported inside each function, never at package import.

**Sizes.** The book's notebooks store PNGs at matplotlib's 100 dpi (twice that with the retina
format), and the page shows them at most as wide as its text column, about 7 inches of figure at
1280 px. A letter of ``s`` points then renders at ``s * 100/72 * min(1, COLUMN_IN / width)``
CSS pixels. ``book_style`` sets every text size to at least ``MIN_POINTS`` (11 pt) and
``figsize`` caps the width at ``MAX_WIDTH_IN``, so that text renders at 11 px or more on a
desktop column (``text_px`` computes it). Symbols in labels are written in mathtext, between dollar signs.
"""

from __future__ import annotations

from .checks import check_positive_number
from .config import LlamaConfig, count_parameters

COLUMN_IN = 7.0      # the text column at 1280 px, in inches of a 100-dpi figure (about 700 px)
MAX_WIDTH_IN = 9.0   # the widest figure; wider ones would shrink their text below 11 px
MIN_POINTS = 11.0    # the smallest text in a figure

BOOK_RC = {
    "font.size": 12.0,
    "axes.titlesize": 12.0,
    "axes.labelsize": 12.0,
    "xtick.labelsize": MIN_POINTS,
    "ytick.labelsize": MIN_POINTS,
    "legend.fontsize": MIN_POINTS,
    "legend.frameon": False,
    "figure.titlesize": 12.0,
    "figure.dpi": 100,
    "mathtext.fontset": "dejavusans",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.constrained_layout.use": False,
}


def book_style() -> None:
    """Apply the book's figure style to matplotlib (every chapter calls this once)."""
    import matplotlib as mpl

    mpl.rcParams.update(BOOK_RC)


def figsize(width: float = COLUMN_IN, height: float | None = None, aspect: float = 0.5) -> tuple:
    """A figure size in inches, no wider than ``MAX_WIDTH_IN`` (height: ``aspect * width``)."""
    check_positive_number("width", width), check_positive_number("aspect", aspect)
    width = min(width, MAX_WIDTH_IN)
    return (width, check_positive_number("height", height) if height is not None else aspect * width)


def text_px(points: float, fig_width_in: float, column_in: float = COLUMN_IN) -> float:
    """CSS pixels of a ``points``-point letter in a figure ``fig_width_in`` wide, as shown."""
    return points * 100 / 72 * min(1.0, column_in / fig_width_in)


def overlapping_tick_labels(ax, axis: str = "x", gap_px: float = 2.0) -> list[tuple[str, str]]:
    """Pairs of neighbouring tick labels of ``ax``'s ``axis`` ("x" or "y") drawn closer than
    ``gap_px`` display pixels apart, or overlapping (Chapter 2's "257300" was 257 and 300)."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis: expected 'x' or 'y', got {axis!r}")
    renderer = ax.figure.canvas.get_renderer()
    ticks = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ("x0", "x1") if axis == "x" else ("y0", "y1")
    boxes = sorted(((label.get_window_extent(renderer), label.get_text())
                    for label in ticks.get_ticklabels() if label.get_visible() and label.get_text()),
                   key=lambda item: getattr(item[0], lo))
    return [(a, b) for (box_a, a), (box_b, b) in zip(boxes, boxes[1:])
            if getattr(box_b, lo) - getattr(box_a, hi) < gap_px]


def label_ticks(ax, values, axis: str = "x", gap_px: float = 6.0) -> list:
    """Ticks at every one of ``values`` on ``ax``'s ``axis``, labelled from the first on, each
    label left out that would come closer than ``gap_px`` display pixels to the last one kept
    (the tick stays). Returns the values whose labels are shown."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis: expected 'x' or 'y', got {axis!r}")
    values = sorted(values)
    if not values:
        raise ValueError("values: expected at least one tick")
    setter = ax.set_xticks if axis == "x" else ax.set_yticks
    setter(values, [str(v) for v in values])
    ticks = ax.xaxis if axis == "x" else ax.yaxis
    renderer = ax.figure.canvas.get_renderer()
    lo, hi = ("x0", "x1") if axis == "x" else ("y0", "y1")
    shown, last = [], None
    for value, label in zip(values, ticks.get_ticklabels()):
        box = label.get_window_extent(renderer)
        if last is None or getattr(box, lo) - getattr(last, hi) >= gap_px:
            shown.append(value)
            last = box
    setter(values, [str(v) if v in shown else "" for v in values])
    return shown


def plot_parameter_breakdown(config: LlamaConfig, title: str | None = None, ax=None):
    """Horizontal bar chart of where a model's parameters live (billions, share of total).

    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    counts = count_parameters(config)
    parts = [
        (r"token embedding ($V \times d$)", counts["embedding"]),
        (r"attention ($L$ blocks)", config.n_layers * counts["attention"]),
        (r"FFN ($L$ blocks)", config.n_layers * (counts["ffn"] + counts["router"])),
        ("RMSNorm weights", config.n_layers * counts["norms"] + counts["final_norm"]),
        (r"vocabulary head ($d \times V$)", counts["lm_head"]),
    ]
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize(COLUMN_IN, 2.8))
    else:
        fig = ax.figure
    labels = [name for name, _ in parts][::-1]
    values = [n / 1e9 for _, n in parts][::-1]
    bars = ax.barh(labels, values, color="#4c72b0")
    for bar, (_, n) in zip(bars, parts[::-1]):
        share = 100 * n / counts["total"]
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f"  {n / 1e9:.3f}B ({share:.1f}%)" if n >= 1e6 else f"  {n:,} ({share:.4f}%)",
                va="center")
    ax.set_xlabel("parameters (billions)")
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_title(title or f"{counts['total'] / 1e9:.2f}B parameters")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig
