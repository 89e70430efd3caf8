"""Figures for a trained representation: NMI heatmap and decoded latent interventions.

NMI heatmap: sources as rows, latents as columns, inactive latents' labels in red (QLAE paper Fig. 3 /
App. D; spec qlae.md §9.2). Intervention grid: one encoded image, each latent swept over its range on
the evaluation set while the others stay fixed, decoded without re-quantizing (spec qlae.md §9.1).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures go to files and loggers
import matplotlib.pyplot as plt
import numpy as np


def nmi_heatmap(nmi: np.ndarray, active: np.ndarray, factor_names: Sequence[str], path: str | Path):
    """Annotated heatmap of NMI (n_sources x n_latents) saved to ``path``; returns the path."""
    n_s, n_z = nmi.shape
    fig, ax = plt.subplots(figsize=(0.55 * n_z + 2.5, 0.5 * n_s + 1.5))
    ax.imshow(nmi, vmin=0, vmax=1, cmap="viridis", aspect="equal")
    for i in range(n_s):
        for j in range(n_z):
            ax.text(j, i, f"{nmi[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if nmi[i, j] > 0.6 else "white")
    ax.set_xticks(range(n_z), [f"z{j}" for j in range(n_z)], fontsize=8)
    ax.set_yticks(range(n_s), list(factor_names), fontsize=8)
    for j, label in enumerate(ax.get_xticklabels()):
        if not active[j]:
            label.set_color("red")
    ax.set_xlabel("latent (red: inactive)")
    ax.set_title("normalized mutual information")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def intervention_grid(images: np.ndarray, column_labels: Sequence[str], path: str | Path, row_labels=None):
    """Save a grid of decoded interventions: ``images`` is (n_rows, n_cols, C, H, W) in [0, 1];
    column j sweeps latent j (labels), rows go down the interpolation."""
    n_rows, n_cols, c, h, w = images.shape
    pad = 2
    canvas = np.ones((n_rows * (h + pad) - pad, n_cols * (w + pad) - pad, 3), dtype=np.float32)
    for r in range(n_rows):
        for k in range(n_cols):
            tile = images[r, k].transpose(1, 2, 0)
            if c == 1:
                tile = np.repeat(tile, 3, axis=2)
            canvas[r * (h + pad) : r * (h + pad) + h, k * (w + pad) : k * (w + pad) + w] = tile
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * n_cols + 1), max(3.0, 0.8 * n_rows + 1)))
    ax.imshow(np.clip(canvas, 0, 1), interpolation="nearest")
    ax.set_xticks([k * (w + pad) + w / 2 for k in range(n_cols)], list(column_labels), rotation=60,
                  ha="right", fontsize=7)
    if row_labels is not None:
        ax.set_yticks([r * (h + pad) + h / 2 for r in range(n_rows)], list(row_labels), fontsize=7)
    else:
        ax.set_yticks([])
    ax.set_title("decoded latent interventions (column: latent swept over its range)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
