"""Mean Correlation Coefficient (MCC) under the best one-to-one matching of latents to sources.

As used in nonlinear ICA / identifiability work (e.g. Hyvärinen & Morioka 2016; Lachapelle et al. 2023);
settings follow Cliff (Cliff paper §3.1; App. E: Spearman for the balls) and the code of its predecessor
(``facebookresearch/quantized_identifiability``, ``mcc.py``: |ρ| matrix, Hungarian matching maximising the
sum, Pearson).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import rankdata

from disentangle.checks import check_choice
from disentangle.metrics.common import checked_inputs

__all__ = ["CORRELATIONS", "abs_correlation", "mcc"]

CORRELATIONS = ("pearson", "spearman")


def _zscore(x: np.ndarray) -> np.ndarray:
    """Per-column z-scores; constant columns (detected exactly, by range 0) become zeros.

    Checking the range rather than std > 0 matters: the mean of a constant column can be off by one ulp, which
    leaves a tiny non-zero std and z-scores of ±1 made of pure rounding.
    """
    centred = x - x.mean(axis=0)
    std = centred.std(axis=0)
    varies = np.ptp(x, axis=0) > 0
    return np.divide(centred, std, out=np.zeros_like(centred), where=varies & (std > 0))


def _abs_corr(s: np.ndarray, z: np.ndarray, method: str) -> np.ndarray:
    """|ρ| matrix (n_latents, n_sources) of validated 2-D arrays; see :func:`abs_correlation`."""
    s = s.astype(np.float64)
    if not np.isfinite(s).all():
        raise ValueError("sources contain NaN or infinite values")
    if method == "spearman":
        s, z = rankdata(s, axis=0), rankdata(z, axis=0)
    corr = _zscore(z).T @ _zscore(s) / z.shape[0]
    # Rounding can push a perfect correlation to 1 + 1e-16.
    return np.clip(np.abs(corr), 0.0, 1.0)


def abs_correlation(sources: Any, latents: Any, *, method: str = "pearson") -> np.ndarray:
    """|ρ(z_j, s_k)| for every latent j and source k, shape (n_latents, n_sources).

    ``"spearman"`` is Pearson on average ranks (ties share a rank). A constant column has correlation 0 with
    everything (instead of NaN). Sources are used as given (numeric; not label-encoded, so continuous
    ground truth works too).
    """
    check_choice("method", method, CORRELATIONS)
    return _abs_corr(*checked_inputs(sources, latents), method)


def mcc(sources: Any, latents: Any, *, method: str = "pearson") -> dict[str, Any]:
    """MCC (Cliff paper §3.1, App. E): mean matched |correlation| between latents and sources, in [0, 1].

    The |ρ| matrix (n_latents, n_sources) is matched one-to-one by ``scipy.optimize.linear_sum_assignment``
    maximising the total; with n_latents ≠ n_sources min(n_latents, n_sources) pairs are matched and the rest are
    ignored. MCC is the mean matched |ρ|; the papers report it ×100. ``method``: ``"pearson"`` (invariant to
    per-column affine maps) or ``"spearman"`` (invariant to strictly monotone maps; Cliff's balls experiment).

    Constant (single-valued) sources are skipped with a RuntimeWarning (left out of the matching; MCC 0 if none
    is left); constant latents just correlate 0. Returns ``{"mcc": float, "correlation": (n_latents,
    n_sources), "matching": (n_pairs, 2) int array of (latent, source) pairs}``.
    """
    check_choice("method", method, CORRELATIONS)
    s, z = checked_inputs(sources, latents)
    corr = _abs_corr(s, z, method)
    usable = np.ptp(s, axis=0) > 0
    for k in np.flatnonzero(~usable):
        warnings.warn(f"source {k} has a single value; it is skipped by MCC", RuntimeWarning, stacklevel=2)
    cols = np.flatnonzero(usable)
    if cols.size == 0:
        return {"mcc": 0.0, "correlation": corr, "matching": np.zeros((0, 2), dtype=np.int64)}
    rows, matched = linear_sum_assignment(corr[:, cols], maximize=True)
    pairs = np.stack([rows, cols[matched]], axis=1).astype(np.int64)
    return {"mcc": float(corr[pairs[:, 0], pairs[:, 1]].mean()), "correlation": corr, "matching": pairs}
