"""Straightforward scikit-learn implementations of InfoMEC and depth-tuned DCI: the speed baseline.

Same definitions as :func:`disentangle.metrics.infomec` and :func:`disentangle.metrics.dci` (QLAE paper
§4.1–4.2 and App. C.5), written the obvious way: one sklearn estimator call per (source, latent) pair,
a fitted null model for InfoE, one forest per (source, depth) on one thread. Used by
``python -m disentangle.bench metrics`` and by the tests that check the fast paths agree with it; not meant
for everyday use.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import mutual_info_classif
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, mutual_info_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelEncoder, StandardScaler

from disentangle.metrics.common import unpenalised_logistic_kwargs
from disentangle.metrics.dci import DEFAULT_DEPTH_GRID, dci_from_importance
from disentangle.metrics.infomec import active_latents, infom_infoc

__all__ = ["dci_reference", "infomec_reference"]


def _encode(x: np.ndarray) -> np.ndarray:
    return np.stack([LabelEncoder().fit_transform(c) for c in np.asarray(x).T], axis=1)


def _log_loss_of_fit(features: np.ndarray, y: np.ndarray) -> float:
    model = LogisticRegression(
        **unpenalised_logistic_kwargs(), solver="lbfgs", max_iter=100, tol=1e-4, fit_intercept=True,
        class_weight="balanced",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(features, y)
    return log_loss(y, model.predict_proba(features), labels=model.classes_)


def infomec_reference(
    sources: Any, latents: Any, *, discrete_latents: bool, ksg_k: int = 3, seed: int = 0
) -> dict[str, Any]:
    """InfoM, InfoE, InfoC (Hsu et al. 2023 eqs. 7–9, 13–14) pair by pair with sklearn; range active rule,
    standardised InfoE features, discrete sources with more than one value."""
    s = _encode(sources)
    z = np.asarray(latents, dtype=np.float64)
    z_std = StandardScaler().fit_transform(z)
    z_codes = _encode(z) if discrete_latents else None
    nmi = np.zeros((s.shape[1], z.shape[1]))
    for i in range(s.shape[1]):
        entropy = mutual_info_score(s[:, i], s[:, i])
        for j in range(z.shape[1]):
            if discrete_latents:
                mi = mutual_info_score(s[:, i], z_codes[:, j])
            elif z[:, j].std() == 0:
                mi = 0.0
            else:
                mi = mutual_info_classif(
                    z_std[:, j : j + 1], s[:, i], discrete_features=False, n_neighbors=ksg_k, random_state=seed
                )[0]
            nmi[i, j] = mi / entropy
    nmi = np.clip(np.nan_to_num(nmi), 0.0, 1.0)
    active = active_latents(z, discrete_latents=discrete_latents)
    infom, infoc = infom_infoc(nmi, active)

    zeros = np.zeros((z.shape[0], 1))
    nmi_v = []
    for i in range(s.shape[1]):
        h_null = _log_loss_of_fit(zeros, s[:, i])
        h_model = _log_loss_of_fit(z_std, s[:, i])
        nmi_v.append(np.clip((h_null - h_model) / h_null, 0.0, 1.0))
    return {"infom": infom, "infoe": float(np.mean(nmi_v)), "infoc": infoc, "nmi": nmi, "active": active}


def dci_reference(
    sources: Any,
    latents: Any,
    *,
    n_estimators: int = 100,
    seed: int = 0,
    depth_grid: Sequence[int | None] = DEFAULT_DEPTH_GRID,
    test_size: float = 0.1,
) -> dict[str, Any]:
    """Depth-tuned random-forest DCI (QLAE paper App. C.5): one forest per (source, depth), best held-out
    accuracy, ties to the lower held-out log-loss."""
    s = _encode(sources)
    z = StandardScaler().fit_transform(np.asarray(latents, dtype=np.float64))
    x_train, x_test, y_train, y_test = train_test_split(z, s, test_size=test_size, random_state=seed)
    importance = np.zeros((z.shape[1], s.shape[1]))
    accuracy = np.zeros(s.shape[1])
    for i in range(s.shape[1]):
        best = None
        for depth in depth_grid:
            forest = RandomForestClassifier(
                n_estimators=n_estimators, criterion="entropy", max_depth=depth, random_state=seed
            ).fit(x_train, y_train[:, i])
            proba = forest.predict_proba(x_test)
            key = (forest.score(x_test, y_test[:, i]), -log_loss(y_test[:, i], proba, labels=forest.classes_))
            if best is None or key > best[0]:
                best = (key, forest.feature_importances_)
        importance[:, i], accuracy[i] = best[1], best[0][0]
    d, c = dci_from_importance(importance)
    return {"d": d, "i": float(accuracy.mean()), "c": c, "importance": importance}
