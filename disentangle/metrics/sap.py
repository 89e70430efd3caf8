"""Separated Attribute Predictability (SAP).

Kumar et al. 2018, "Variational Inference of Disentangled Latent Concepts from Unlabeled Observations", §3;
discrete-factor settings of disentanglement_lib, as Friede et al.'s code uses them (``david-friede/lddr``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from disentangle.metrics.common import split_train_test, warn_skipped

__all__ = ["sap"]


def sap(
    sources: Any,
    latents: Any,
    *,
    test_size: float = 1 / 3,
    seed: int = 0,
    sources_test: Any | None = None,
    latents_test: Any | None = None,
) -> dict[str, Any]:
    """SAP score (Kumar et al. 2018; disentanglement_lib defaults, as in Friede et al.'s code).

    For every (latent j, source k) a ``LinearSVC(C=0.01, class_weight="balanced")`` is fit on the single latent
    j of the train split; S[j, k] is its test accuracy. SAP = mean over sources of (top1 − top2) of S[:, k].
    Default split: 1/3 test (disentanglement_lib's 10,000 train / 5,000 test); pass ``sources_test`` /
    ``latents_test`` for a separate test draw. Needs at least 2 latents.

    Single-valued sources are skipped with a RuntimeWarning (zero column, excluded from the mean); a source with
    a single class in the training split raises ValueError (too few samples). Returns ``{"sap": float,
    "per_source": (n_sources,), "score_matrix": S (n_latents, n_sources)}``.
    """
    y_tr, y_te, z_tr, z_te, card = split_train_test(sources, latents, sources_test, latents_test, test_size, seed)
    if z_tr.shape[1] < 2:
        raise ValueError(f"SAP needs at least 2 latents (a gap between the top two), got {z_tr.shape[1]}")
    usable = warn_skipped(card, "SAP")
    scores = np.zeros((z_tr.shape[1], card.size))
    for k in np.flatnonzero(usable):
        if np.unique(y_tr[:, k]).size < 2:
            raise ValueError(f"source {k} has a single class in the training split: too few samples")
        for j in range(z_tr.shape[1]):
            svm = LinearSVC(C=0.01, class_weight="balanced")
            # C=0.01 is the reference setting; liblinear may stop at its iteration cap on hard columns, which
            # is part of that setting, so the warning is noise here.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                svm.fit(z_tr[:, j : j + 1], y_tr[:, k])
            scores[j, k] = np.mean(svm.predict(z_te[:, j : j + 1]) == y_te[:, k])
    top_two = -np.sort(-scores, axis=0)[:2]
    per_source = np.where(usable, top_two[0] - top_two[1], 0.0)
    score = float(per_source[usable].mean()) if usable.any() else 0.0
    return {"sap": score, "per_source": per_source, "score_matrix": scores}
