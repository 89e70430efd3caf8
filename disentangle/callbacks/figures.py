"""Figures for a trained representation: NMI heatmap, DCI importance heatmap, decoded latent interventions,
a reconstruction grid, latent scatters, factor recovery and a generative model's samples.

Functions of numpy arrays and a path only (no model, no callback, nothing of the package): the evaluation's outputs
(:mod:`.outputs`) draw them, and anything above the callbacks (reports, scripts) can too.

NMI heatmap: sources as rows, latents as columns, inactive latents' labels in red (QLAE paper Fig. 3 /
App. D). DCI importance heatmap: the importance matrix R (latents x factors) of nonlinear DCI (QLAE paper
App. C.5). Intervention grid: one encoded image, each latent swept over its range on the evaluation set while
the others stay fixed, decoded without re-quantizing (QLAE paper §5, Fig. 4). Reconstruction grid: evaluation
images on the top row, their reconstructions below. Latent scatter: two latent dimensions, one panel per
factor, points coloured by the true factor value (Friede et al.'s Circles latent spaces, Fig. 3, Figs. 10/11).
Factor recovery: true factors and the latents MCC matched to them, jointly and pair by pair (Cliff paper
Fig. 1).

Every function draws with matplotlib's object API (``Figure`` + the Agg canvas), never ``pyplot``: there is no
global figure state, so the figures can be rendered in the evaluation callback's worker thread while training
goes on, and importing this module does not change the user's matplotlib backend.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # attaches itself; savefig renders with Agg, no GUI, no pyplot
    return fig


def _save(fig: Figure, path: str | Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)


def _annotated_heatmap(ax, values: np.ndarray, vmax: float = 1.0) -> None:
    ax.imshow(values, vmin=0, vmax=vmax, cmap="viridis", aspect="equal")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if values[i, j] > 0.6 * vmax else "white")


def nmi_heatmap(nmi: np.ndarray, active: np.ndarray, factor_names: Sequence[str], path: str | Path) -> Path:
    """Annotated heatmap of NMI (n_sources x n_latents) saved to ``path``; returns the path."""
    nmi = np.asarray(nmi)
    n_s, n_z = nmi.shape
    fig = _figure(0.55 * n_z + 2.5, 0.5 * n_s + 1.5)
    ax = fig.add_subplot()
    _annotated_heatmap(ax, nmi)
    ax.set_xticks(range(n_z), [f"z{j}" for j in range(n_z)], fontsize=8)
    ax.set_yticks(range(n_s), list(factor_names), fontsize=8)
    for j, label in enumerate(ax.get_xticklabels()):
        if not active[j]:
            label.set_color("red")
    ax.set_xlabel("latent (red: inactive)")
    ax.set_title("normalized mutual information")
    return _save(fig, path)


def dci_importance_heatmap(importance: np.ndarray, factor_names: Sequence[str], path: str | Path) -> Path:
    """Annotated heatmap of the DCI importance matrix R (n_latents x n_factors; each factor's column sums to
    1: forest importances, QLAE paper App. C.5), latents as rows and factors as columns, saved to ``path``;
    returns the path."""
    importance = np.asarray(importance)
    n_z, n_s = importance.shape
    fig = _figure(0.6 * n_s + 2.5, 0.4 * n_z + 1.8)
    ax = fig.add_subplot()
    _annotated_heatmap(ax, importance)
    ax.set_xticks(range(n_s), list(factor_names), rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n_z), [f"z{j}" for j in range(n_z)], fontsize=8)
    ax.set_xlabel("factor")
    ax.set_ylabel("latent")
    ax.set_title("DCI importance (random forests)")
    return _save(fig, path)


def _tile(images: np.ndarray, pad: int = 2) -> np.ndarray:
    """(n_rows, n_cols, C, H, W) in [0, 1] -> one RGB canvas with ``pad`` white pixels between tiles."""
    n_rows, n_cols, c, h, w = images.shape
    canvas = np.ones((n_rows * (h + pad) - pad, n_cols * (w + pad) - pad, 3), dtype=np.float32)
    for r in range(n_rows):
        for k in range(n_cols):
            tile = images[r, k].transpose(1, 2, 0)
            if c == 1:
                tile = np.repeat(tile, 3, axis=2)
            canvas[r * (h + pad) : r * (h + pad) + h, k * (w + pad) : k * (w + pad) + w] = tile
    return np.clip(canvas, 0, 1)


def intervention_grid(images: np.ndarray, column_labels: Sequence[str], path: str | Path,
                      row_labels=None, start: str | None = None) -> Path:
    """Save a grid of decoded interventions: ``images`` is (n_rows, n_cols, C, H, W) in [0, 1];
    column j sweeps latent j (labels), rows go down the interpolation; ``start`` names the latent the sweeps edit
    (shown in the title)."""
    n_rows, n_cols, _, h, w = images.shape
    pad = 2
    fig = _figure(max(4.0, 0.8 * n_cols + 1), max(3.0, 0.8 * n_rows + 1))
    ax = fig.add_subplot()
    ax.imshow(_tile(images, pad), interpolation="nearest")
    ax.set_xticks([k * (w + pad) + w / 2 for k in range(n_cols)], list(column_labels), rotation=60,
                  ha="right", fontsize=7)
    if row_labels is not None:
        ax.set_yticks([r * (h + pad) + h / 2 for r in range(n_rows)], list(row_labels), fontsize=7)
    else:
        ax.set_yticks([])
    title = "decoded latent interventions (column: one latent varied across its evaluation-set values)"
    ax.set_title(title if start is None else f"{title}\nstarting from {start}")
    return _save(fig, path)


def reconstruction_grid(originals: np.ndarray, reconstructions: np.ndarray, path: str | Path, *,
                        title: str = "reconstructions") -> Path:
    """Save evaluation images (top row) above their reconstructions (bottom row); both (n, C, H, W) in
    [0, 1]."""
    originals, reconstructions = np.asarray(originals), np.asarray(reconstructions)
    if originals.shape != reconstructions.shape or originals.ndim != 4:
        raise ValueError(f"originals and reconstructions must both be (n, C, H, W); got {originals.shape} "
                         f"and {reconstructions.shape}")
    n, _, h, _ = originals.shape
    pad = 2
    fig = _figure(max(4.0, 0.8 * n + 1.5), 3.0)
    ax = fig.add_subplot()
    ax.imshow(_tile(np.stack([originals, reconstructions]), pad), interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([h / 2, h + pad + h / 2], ["original", "reconstruction"], fontsize=8)
    ax.set_title(title)
    return _save(fig, path)


MAX_SCATTER_PANELS = 8  # latent_scatter draws at most this many factors


def latent_scatter(latents: np.ndarray, factors: np.ndarray, factor_names: Sequence[str], path: str | Path, *,
                   dims: Sequence[int] = (0, 1), title: str = "", directions: np.ndarray | None = None) -> Path:
    """Scatter of latent dims ``dims`` (two of them) of the evaluation set, one panel per factor (at most
    :data:`MAX_SCATTER_PANELS`) with the points coloured by that factor's true value: Friede et al.'s Circles
    latent-space figures (Fig. 3, Figs. 10/11). ``directions`` (n_latents, n_factors), e.g.
    the unit regression directions of :func:`disentangle.metrics.rotation`, are drawn as an arrow from the latent mean
    in each factor's panel. ``title`` goes above the panels. Saved to ``path``; returns the path."""
    latents, factors = np.asarray(latents, dtype=np.float64), np.asarray(factors)
    if latents.ndim != 2 or factors.ndim != 2 or len(latents) != len(factors):
        raise ValueError(f"latents and factors must be (n, d) and (n, k) arrays; got {latents.shape} and "
                         f"{factors.shape}")
    dims = [int(d) for d in dims]
    if len(dims) != 2 or not all(0 <= d < latents.shape[1] for d in dims):
        raise ValueError(f"dims must be two latent indices below {latents.shape[1]}, got {dims}")
    points = latents[:, dims]
    n_panels = min(factors.shape[1], MAX_SCATTER_PANELS)
    fig = _figure(4.0 * n_panels + 0.5, 4.3)
    span = float(np.ptp(points, axis=0).max()) or 1.0
    centre = points.mean(axis=0)
    for k in range(n_panels):
        ax = fig.add_subplot(1, n_panels, k + 1)
        order = np.argsort(factors[:, k], kind="stable")  # draw high values last, like a colour ramp
        sc = ax.scatter(points[order, 0], points[order, 1], c=factors[order, k], s=5, cmap="viridis",
                        linewidths=0, rasterized=True)
        fig.colorbar(sc, ax=ax, fraction=0.046, pad=0.04).set_label(f"true {factor_names[k]}", fontsize=8)
        if directions is not None:
            arrow = np.asarray(directions)[dims, k] * 0.35 * span
            ax.annotate("", xy=centre + arrow, xytext=centre,
                        arrowprops={"arrowstyle": "->", "color": "red", "linewidth": 1.5})
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(f"z{dims[0]}")
        ax.set_ylabel(f"z{dims[1]}")
        ax.set_title(f"coloured by {factor_names[k]}", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def factor_recovery_scatter(latents: np.ndarray, factors: np.ndarray, factor_names: Sequence[str],
                            path: str | Path, *, matching: np.ndarray | None = None, title: str = "") -> Path:
    """True vs recovered factors (Cliff paper §3.1, Fig. 1): with at least two matched pairs, the
    true factors of the first two pairs against each other ("true z") and their matched latents against each other
    ("recovered z'", the grid should come back axis-aligned); then one panel per matched pair (at most
    :data:`MAX_SCATTER_PANELS`), the true factor (min-max scaled to [0, 1]) against its latent. ``matching``
    (n_pairs, 2) holds (latent, factor) pairs, e.g. MCC's Hungarian matching; None pairs latent k with factor k.
    Saved to ``path``; returns the path."""
    latents, factors = np.asarray(latents, dtype=np.float64), np.asarray(factors, dtype=np.float64)
    if latents.ndim != 2 or factors.ndim != 2 or len(latents) != len(factors):
        raise ValueError(f"latents and factors must be (n, d) and (n, k) arrays; got {latents.shape} and "
                         f"{factors.shape}")
    if matching is None:
        k = min(latents.shape[1], factors.shape[1])
        matching = np.stack([np.arange(k), np.arange(k)], axis=1)
    matching = np.asarray(matching, dtype=np.int64).reshape(-1, 2)
    if len(matching) == 0 or not ((matching[:, 0] < latents.shape[1]).all() and (matching[:, 1] < factors.shape[1])
                                  .all() and (matching >= 0).all()):
        raise ValueError(f"matching must be non-empty (latent, factor) index pairs within {latents.shape[1]} "
                         f"latents and {factors.shape[1]} factors; got {matching.tolist()}")
    span = np.ptp(factors, axis=0)
    scaled = (factors - factors.min(axis=0)) / np.where(span > 0, span, 1.0)
    pairs = matching[np.argsort(matching[:, 1], kind="stable")][:MAX_SCATTER_PANELS]   # in factor order
    joint = len(pairs) >= 2
    n_panels = len(pairs) + (2 if joint else 0)
    fig = _figure(3.6 * n_panels + 0.3, 3.9)
    style = {"s": 3, "linewidths": 0, "alpha": 0.5, "rasterized": True}
    panel = 1
    if joint:
        (j1, k1), (j2, k2) = pairs[0], pairs[1]
        ax = fig.add_subplot(1, n_panels, panel)
        ax.scatter(scaled[:, k1], scaled[:, k2], c="tab:blue", **style)
        ax.set_xlabel(f"true {factor_names[k1]} (scaled)")
        ax.set_ylabel(f"true {factor_names[k2]} (scaled)")
        ax.set_title("true factors", fontsize=9)
        ax = fig.add_subplot(1, n_panels, panel + 1)
        ax.scatter(latents[:, j1], latents[:, j2], c="tab:orange", **style)
        ax.set_xlabel(f"latent {j1}")
        ax.set_ylabel(f"latent {j2}")
        ax.set_title("recovered factors", fontsize=9)
        panel += 2
    for j, k in pairs:
        ax = fig.add_subplot(1, n_panels, panel)
        ax.scatter(scaled[:, k], latents[:, j], c="tab:green", **style)
        ax.set_xlabel(f"true {factor_names[k]} (scaled)")
        ax.set_ylabel(f"latent {j}")
        ax.set_title(f"{factor_names[k]} vs latent {j}", fontsize=9)
        panel += 1
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def samples_grid(images: np.ndarray, path: str | Path, title: str = "generated samples") -> Path:
    """Save (n, C, H, W) images in [0, 1] as a near-square grid (row-major) with ``title``; returns the path (a GAN's
    ``samples.png``)."""
    n = len(images)
    cols = max(1, round(n**0.5))
    rows = -(-n // cols)
    padded = np.ones((rows * cols, *images.shape[1:]), dtype=np.float32)  # blank tiles fill the last row
    padded[:n] = images
    fig = _figure(max(3.0, 0.7 * cols + 0.5), max(3.0, 0.7 * rows + 0.8))
    ax = fig.add_subplot()
    ax.imshow(_tile(padded.reshape(rows, cols, *images.shape[1:])), interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)
