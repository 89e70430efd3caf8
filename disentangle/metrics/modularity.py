"""Modularity and explicitness (Ridgeway & Mozer 2018, "Learning Deep Disentangled Embeddings With the F-Statistic
Loss", §3).

Modularity follows disentanglement_lib as Friede et al.'s code uses it (``david-friede/lddr``; 20-bin
discretisation, MI matrix, θ/δ formula, mean over latents). Explicitness follows the paper and
disentanglement_lib's ``modularity_explicitness.py``: one-vs-rest logistic regression per factor value on all
latents, ROC-AUC per value on the test split, mean over values, then mean over factors.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from disentangle.metrics.common import (
    checked_inputs,
    equal_width_bins,
    label_encode_columns,
    mi_matrix,
    split_train_test,
    warn_skipped,
)

__all__ = ["explicitness", "modularity", "modularity_from_mi", "split_train_test"]


def modularity_from_mi(mi: Any) -> tuple[float, np.ndarray]:
    """Modularity from an MI matrix m (n_latents, n_sources) (Ridgeway & Mozer 2018; disentanglement_lib).

    θ_i = max_k m_ik², δ_i = (Σ_k m_ik² − θ_i) / (θ_i (d − 1)), modularity_i = 1 − δ_i, and 0 where θ_i = 0
    (a latent informative about nothing). With a single source (d = 1) δ is 0/0; every informative latent is
    then trivially modular (1). Returns (mean over latents, per-latent array).
    """
    sq = np.square(np.asarray(mi, dtype=np.float64))
    if sq.ndim != 2 or sq.shape[1] == 0:
        raise ValueError(f"mi must have shape (n_latents, n_sources) with n_sources >= 1, got {sq.shape}")
    theta = sq.max(axis=1)
    informative = theta > 0
    per_latent = np.zeros(sq.shape[0])
    if sq.shape[1] == 1:
        per_latent[informative] = 1.0
    else:
        delta = (sq.sum(axis=1)[informative] - theta[informative]) / (theta[informative] * (sq.shape[1] - 1))
        per_latent[informative] = 1.0 - delta
    return float(per_latent.mean()), per_latent


def modularity(sources: Any, latents: Any, *, n_bins: int = 20) -> dict[str, Any]:
    """Modularity score (Ridgeway & Mozer 2018 §3; disentanglement_lib settings).

    Latents are binned into ``n_bins`` equal-width bins (``np.histogram`` edges, as for MIG), m_ik is the plug-in
    MI (nats) with each label-encoded source, and :func:`modularity_from_mi` gives the score. Single-valued sources
    are skipped with a RuntimeWarning (they are left out of the MI matrix, so d counts usable sources only).

    Returns ``{"modularity": float, "per_latent": (n_latents,), "mi": (n_latents, n_sources)}`` (skipped
    sources have a zero MI column). If no source is usable the score is 0.
    """
    s, z = checked_inputs(sources, latents)
    s_codes, s_card = label_encode_columns(s)
    usable = warn_skipped(s_card, "modularity")
    mi = mi_matrix(s_codes, s_card, equal_width_bins(z, n_bins=n_bins))
    mi[:, ~usable] = 0.0  # a constant source has exactly zero MI; keep the column for shape stability
    if not usable.any():
        return {"modularity": 0.0, "per_latent": np.zeros(z.shape[1]), "mi": mi}
    score, per_latent = modularity_from_mi(mi[:, usable])
    return {"modularity": score, "per_latent": per_latent, "mi": mi}


def _one_vs_rest_auc(z_tr: np.ndarray, y_tr: np.ndarray, z_te: np.ndarray, y_te: np.ndarray) -> tuple[float, float]:
    """Mean ROC-AUC over the classes of one factor, one binary logistic regression per class (train, test).

    sklearn-default ``LogisticRegression`` (L2, C=1, lbfgs) on the raw latents, as in disentanglement_lib. The
    caller guarantees at least two training classes. A class absent from the training split cannot be fit and one
    absent from (or filling) the test split has no AUC; such classes are left out of the mean.
    """
    aucs: dict[str, list[float]] = {"train": [], "test": []}
    for c in np.unique(y_tr):
        pos_tr = y_tr == c
        model = LogisticRegression()
        # Thin matrices: multi-threaded BLAS only adds overhead (see infomec._fit_log_loss). lbfgs may hit the
        # default max_iter on raw, unscaled latents; that is the reference setting, so the warning is noise.
        with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(z_tr, pos_tr)
        for split, x, y in (("train", z_tr, pos_tr), ("test", z_te, y_te == c)):
            if 0 < y.sum() < y.size:
                aucs[split].append(roc_auc_score(y, model.decision_function(x)))
    mean = {k: float(np.mean(v)) if v else float("nan") for k, v in aucs.items()}
    return mean["train"], mean["test"]


def explicitness(
    sources: Any,
    latents: Any,
    *,
    test_size: float = 1 / 3,
    seed: int = 0,
    sources_test: Any | None = None,
    latents_test: Any | None = None,
) -> dict[str, Any]:
    """Explicitness (Ridgeway & Mozer 2018 §3; disentanglement_lib ``modularity_explicitness.py`` semantics).

    Per factor and per factor value, a one-vs-rest logistic regression on all latents is fit on the train split
    and scored by ROC-AUC; the factor's explicitness is the mean AUC over its values and the score is the mean
    over factors, on the test split (also reported on train). Default split: 1/3 test, i.e. disentanglement_lib's
    10,000 train / 5,000 test; pass ``sources_test``/``latents_test`` to use a separate test draw.

    Single-valued sources are skipped with a RuntimeWarning; a source with only one class in the training split
    raises ValueError (too few samples). Returns ``{"explicitness": test score, "explicitness_train": float,
    "per_source": (n_sources,) test means}`` (0 for skipped sources).
    """
    y_tr, y_te, z_tr, z_te, card = split_train_test(sources, latents, sources_test, latents_test, test_size, seed)
    usable = warn_skipped(card, "explicitness")
    per_train = np.zeros(card.size)
    per_test = np.zeros(card.size)
    for k in np.flatnonzero(usable):
        if np.unique(y_tr[:, k]).size < 2:
            raise ValueError(f"source {k} has a single class in the training split: too few samples")
        per_train[k], per_test[k] = _one_vs_rest_auc(z_tr, y_tr[:, k], z_te, y_te[:, k])
        if np.isnan(per_test[k]):
            raise ValueError(f"source {k}: no class has both positives and negatives in the test split")
    if not usable.any():
        return {"explicitness": 0.0, "explicitness_train": 0.0, "per_source": per_test}
    return {
        "explicitness": float(per_test[usable].mean()),
        "explicitness_train": float(per_train[usable].mean()),
        "per_source": per_test,
    }
