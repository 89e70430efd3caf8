"""The report's figure: one panel per (dataset, metric), each group's centre with its interval and its runs as dots,
the published value (with its interval, when the paper prints one) marked in red."""
from __future__ import annotations

import math
from pathlib import Path

from .aggregate import format_value
from .tables import LABELS, STAT_TITLES, Report

COLUMNS = 4  # panels per row


def report_figure(rep: Report, path: Path | str) -> Path | None:
    """Draw the figure to ``path`` (PNG); None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_data = rep.by_data()
    panels = [(data, m, idx) for data, idx in by_data.items() for m in rep.columns_for(idx)]
    if not panels:
        return None
    # each dataset starts a new row of at most COLUMNS panels
    per_data = {d: rep.columns_for(idx) for d, idx in by_data.items()}
    ncols = min(COLUMNS, max(len(ms) for ms in per_data.values()))
    where, row = {}, 0
    for d, ms in per_data.items():
        for k, m in enumerate(ms):
            where[(d, m)] = (row + k // ncols, k % ncols)
        row += max(1, math.ceil(len(ms) / ncols))
    width = max(len(idx) for idx in by_data.values())
    fig, axes = plt.subplots(row, ncols, squeeze=False,
                             figsize=(max(2.8, 0.55 * width + 1.4) * ncols, 3.0 * row + 0.4))
    for ax in axes.flat:
        ax.set_visible(False)
    marked = False
    for data, metric, indices in panels:
        row_i, col_i = where[(data, metric)]
        ax = axes[row_i][col_i]
        ax.set_visible(True)
        labels = []
        for x, i in enumerate(indices):
            g = rep.groups[i]
            hp = ",".join(format_value(v) for v in g.params.values())
            labels.append(g.model + (f"\n{hp}" if hp else ""))
            s = g.stats.get(metric)
            if s is None:
                continue
            lo, hi = s.interval(rep.stat)
            centre = s.center(rep.stat)
            ax.errorbar([x], [centre], yerr=[[centre - lo], [hi - centre]], fmt="o", color="C0", capsize=4, ms=5)
            ax.scatter([x] * len(s.values), s.values, s=10, color="C0", alpha=0.35, zorder=3)
            c = rep.comparisons.get((i, metric))
            if c is not None:
                yerr = None
                if c.low is not None and c.high is not None:
                    yerr = [[max(c.published - c.low, 0.0)], [max(c.high - c.published, 0.0)]]
                ax.errorbar([x + 0.22], [c.published], yerr=yerr, fmt="D", color="crimson", ms=5, capsize=3,
                            label="published" if not marked else None)
                marked = True
        ax.set_xticks(range(len(indices)))
        ax.set_xticklabels(labels, rotation=45 if len(indices) > 3 else 0, ha="right" if len(indices) > 3 else "center",
                           fontsize=7)
        ax.set_xlim(-0.6, len(indices) - 0.4)
        ax.set_title(f"{data}: {LABELS.get(metric, metric)}", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        if not any(math.isfinite(v) for v in ax.get_ylim()):
            ax.set_ylim(0, 1)
    fig.suptitle(f"{rep.title}: {STAT_TITLES[rep.stat]}" + ("; red: published" if marked else ""), fontsize=9)
    return save_figure(fig, path)


def save_figure(fig, path: Path | str) -> Path:
    """Lay out, write ``fig`` as a PNG at ``path`` (its directory made) and close it: the report's pictures."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
