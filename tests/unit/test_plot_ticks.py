"""Tick labels that never collide (issue 34: Chapter 2's compression figure printed "257300",
the labels 257 and 300 of a log axis drawn into each other)."""
import pytest

pytest.importorskip("matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from llama_course.plots import book_style, label_ticks, overlapping_tick_labels  # noqa: E402

# The vocabulary sizes of Chapter 2's figure (BPE_VOCAB = 1000, MAX_VOCAB = 4096).
SIZES = [257, 300, 400, 500, 700, 1000, 1500, 2000, 3000, 4096]


def _chapter2_axes():
    book_style()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(SIZES, [1.0] * len(SIZES), "o-")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xlabel("vocabulary size (256 bytes + merges + 1 special token)")
    return fig, ax


def test_every_label_of_the_sizes_collides_at_257_and_300():
    """The detector sees what the reader saw: every size labelled, 257 and 300 touch."""
    fig, ax = _chapter2_axes()
    ax.set_xticks(SIZES, [str(s) for s in SIZES])
    fig.tight_layout()
    assert ("257", "300") in overlapping_tick_labels(ax)
    plt.close(fig)


def test_label_ticks_leaves_out_the_labels_that_would_touch():
    fig, ax = _chapter2_axes()
    fig.tight_layout()
    shown = label_ticks(ax, SIZES)
    assert overlapping_tick_labels(ax) == []
    assert shown[0] == 257 and 300 not in shown and 4096 in shown
    assert list(ax.get_xticks()) == SIZES          # every tick stays, only labels go
    plt.close(fig)


def test_bad_arguments_are_named():
    fig, ax = _chapter2_axes()
    with pytest.raises(ValueError, match="axis"):
        label_ticks(ax, SIZES, axis="z")
    with pytest.raises(ValueError, match="values"):
        label_ticks(ax, [])
    with pytest.raises(ValueError, match="axis"):
        overlapping_tick_labels(ax, axis="z")
    plt.close(fig)
