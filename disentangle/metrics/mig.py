"""Mutual Information Gap (MIG) on equal-width binned latents.

Chen et al. 2018, "Isolating Sources of Disentanglement in Variational Autoencoders", §4.1. Settings follow
disentanglement_lib's defaults as Friede et al.'s code uses them (``david-friede/lddr``; 20 equal-width
histogram bins, plug-in MI in nats, gap normalised by the factor entropy); the ``"minmax"`` variant follows
the metric code of Roth et al. 2023 (``facebookresearch/disentangling-correlated-factors``,
``dent/metrics/mig.py``), whose Shapes3D setup Cliff reuses (Cliff paper App. F.4). The binning and MI-matrix
helpers, shared with modularity.py, live in ``common.py`` (still importable from here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from disentangle.checks import check_choice
from disentangle.metrics.common import (
    DISCRETIZATIONS,
    checked_inputs,
    entropy_discrete,
    equal_width_bins,
    label_encode_columns,
    mi_matrix,
    warn_skipped,
)

__all__ = ["DISCRETIZATIONS", "equal_width_bins", "mi_matrix", "mig"]


def _encode_sources(s: np.ndarray, n_bins: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and cardinalities of the sources for the chosen discretisation.

    Histogram mode treats sources as class labels (label-encoded, disentanglement_lib). Minmax mode bins the
    label codes like the latents (dent min-max scales and bins the factors too), which merges classes only when a
    source has more than ``n_bins`` of them.
    """
    codes, card = label_encode_columns(s)
    if method == "minmax":
        codes, card = label_encode_columns(equal_width_bins(codes, n_bins=n_bins, method="minmax"))
    return codes, card


def mig(sources: Any, latents: Any, *, n_bins: int = 20, discretize: str = "histogram") -> dict[str, Any]:
    """Mutual Information Gap (Chen et al. 2018; disentanglement_lib settings; Roth et al.'s: ``"minmax"``).

    Each latent is binned into ``n_bins`` equal-width bins (discrete latents too), m[j, k] = I(z_j; s_k) by
    plug-in counts (nats), and per source MIG_k = (m_(1)k − m_(2)k) / H(s_k), the gap between the two most
    informative latents over the source entropy; MIG is the mean over sources. Reported ×100 in the papers.

    Args:
        sources: (n, n_sources) class labels (label-encoded per column).
        latents: (n, n_latents) numbers; at least 2 columns (a gap needs two latents).
        n_bins: bins per latent (20 in both papers).
        discretize: ``"histogram"`` (disentanglement_lib) or ``"minmax"`` (Cliff/dent: sources binned too).

    Returns:
        ``{"mig": float, "per_source": (n_sources,), "mi": (n_latents, n_sources)}``. Single-valued sources
            are skipped with a RuntimeWarning (per-source value 0, excluded from the mean; MIG 0 if none is
            left).
    """
    check_choice("discretize", discretize, DISCRETIZATIONS)
    s, z = checked_inputs(sources, latents)
    if z.shape[1] < 2:
        raise ValueError(f"MIG needs at least 2 latents (a gap between the top two), got {z.shape[1]}")
    s_codes, s_card = _encode_sources(s, n_bins, discretize)
    usable = warn_skipped(s_card, "MIG")
    mi = mi_matrix(s_codes, s_card, equal_width_bins(z, n_bins=n_bins, method=discretize))

    per_source = np.zeros(s.shape[1])
    top_two = -np.sort(-mi, axis=0)[:2]
    for k in np.flatnonzero(usable):
        h = entropy_discrete(s_codes[:, k])
        per_source[k] = (top_two[0, k] - top_two[1, k]) / h
    score = float(per_source[usable].mean()) if usable.any() else 0.0
    return {"mig": score, "per_source": per_source, "mi": mi}
