"""Figures the chapters draw. matplotlib is imported inside each function, never at package import."""

from __future__ import annotations

from .config import LlamaConfig, count_parameters


def plot_parameter_breakdown(config: LlamaConfig, title: str | None = None, ax=None):
    """Horizontal bar chart of where a model's parameters live (billions, share of total).

    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    counts = count_parameters(config)
    parts = [
        ("token embedding", counts["embedding"]),
        ("attention (all blocks)", config.n_layers * counts["attention"]),
        ("FFN (all blocks)", config.n_layers * (counts["ffn"] + counts["router"])),
        ("RMSNorm weights", config.n_layers * counts["norms"] + counts["final_norm"]),
        ("vocabulary head", counts["lm_head"]),
    ]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 2.8))
    else:
        fig = ax.figure
    labels = [name for name, _ in parts][::-1]
    values = [n / 1e9 for _, n in parts][::-1]
    bars = ax.barh(labels, values, color="#4c72b0")
    for bar, (_, n) in zip(bars, parts[::-1]):
        share = 100 * n / counts["total"]
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f"  {n / 1e9:.3f}B ({share:.1f}%)" if n >= 1e6 else f"  {n:,} ({share:.4f}%)",
                va="center", fontsize=9)
    ax.set_xlabel("parameters (billions)")
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_title(title or f"{counts['total'] / 1e9:.2f}B parameters")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig
