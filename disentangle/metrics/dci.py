"""Nonlinear DCI (disentanglement, completeness, informativeness) with random-forest importances.

Eastwood & Williams 2018, "A Framework for the Quantitative Evaluation of Disentangled Representations"; the
random-forest / depth-tuned variant of Hsu et al. 2023 App. C.5. Details follow the project spec
``shared/specs/qlae.md`` §8.6 and §12 row 21 (depth grid tuned per source, I = mean test accuracy).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

from disentangle.metrics.infomec import _standardize, check_inputs, label_encode_columns

__all__ = ["DEFAULT_DEPTH_GRID", "dci", "dci_from_importance", "entropy_base"]

DEFAULT_DEPTH_GRID: tuple[int | None, ...] = (2, 4, 8, 12, 16, 24, 32, None)

# Added inside the entropies (as in the reference implementation) so all-zero rows/columns give a finite value.
_ENTROPY_EPS = 1e-11


def entropy_base(p: np.ndarray, base: int) -> np.ndarray:
    """Entropy of each row of non-negative weights ``p`` (normalised after adding 1e-11), in log base ``base``."""
    q = np.asarray(p, dtype=np.float64) + _ENTROPY_EPS
    q = q / q.sum(axis=-1, keepdims=True)
    return -(q * np.log(q)).sum(axis=-1) / np.log(base)


def dci_from_importance(importance: np.ndarray) -> tuple[float, float]:
    """(D, C) from an importance matrix R of shape (n_latents, n_sources) (Eastwood & Williams 2018 §3).

    D = Σ_j ρ_j (1 − H_{n_s}(R_j· / Σ R_j·)), ρ_j = Σ_i R_ji / Σ R;  C = mean_i (1 − H_{n_z}(R_·i / Σ R_·i)).
    Entropy with base 1 is undefined, so: n_sources == 1 ⇒ D = 1 (each latent can only inform that one source);
    n_latents == 1 ⇒ C = 1 (each source is captured by that one latent). All-zero R ⇒ D = 0.
    """
    r = np.abs(np.asarray(importance, dtype=np.float64))
    n_z, n_s = r.shape
    total = r.sum()
    if n_s == 1:
        d = 1.0
    elif total <= 0:
        d = 0.0
    else:
        rho = r.sum(axis=1) / total
        d = float((rho * (1.0 - entropy_base(r, n_s))).sum())
    c = 1.0 if n_z == 1 else float((1.0 - entropy_base(r.T, n_z)).mean())
    return float(np.clip(d, 0.0, 1.0)), float(np.clip(c, 0.0, 1.0))


def _fit_forest(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    depth: int | None,
    n_estimators: int,
    seed: int,
    n_jobs: int | None,
) -> tuple[RandomForestClassifier, float, float]:
    """One information-gain random forest with its held-out accuracy and held-out mean log-loss (nats)."""
    forest = RandomForestClassifier(
        n_estimators=n_estimators, criterion="entropy", max_depth=depth, random_state=seed, n_jobs=n_jobs
    )
    forest.fit(x_train, y_train)
    proba = forest.predict_proba(x_test)
    accuracy = float(np.mean(forest.classes_[proba.argmax(axis=1)] == y_test))
    # A test label unseen in training gets probability 0; clipping keeps the log-loss finite.
    col = np.searchsorted(forest.classes_, y_test).clip(max=len(forest.classes_) - 1)
    p_true = np.where(forest.classes_[col] == y_test, proba[np.arange(y_test.size), col], 0.0)
    log_loss = float(-np.log(np.clip(p_true, 1e-15, 1.0)).mean())
    return forest, accuracy, log_loss


def dci(
    sources: Any,
    latents: Any,
    *,
    max_depth: int | None = None,
    n_estimators: int = 100,
    seed: int = 0,
    depth_grid: Sequence[int | None] = DEFAULT_DEPTH_GRID,
    test_size: float = 0.1,
    n_jobs: int | None = -1,
) -> dict[str, Any]:
    """Nonlinear DCI with per-source random forests (Eastwood & Williams 2018; spec qlae.md §8.6, §12 row 21).

    Latents are standardised, split train/test (``test_size``, ``random_state=seed``), and for each source a
    ``RandomForestClassifier(n_estimators, criterion='entropy', random_state=seed, n_jobs=n_jobs)`` is fit.
    ``max_depth=None`` tunes the depth over ``depth_grid`` per source by held-out accuracy and keeps the best
    forest; an int fixes the depth. No active-latent pruning. The spec gives no tie-break; exact accuracy ties
    (e.g. several depths reach 100 % on a perfectly encoded source) go to the lower held-out log-loss, then to
    the earlier grid entry. Without it, shallow forests that win ties spread importance onto unrelated latents
    (max_features='sqrt' forces splits on them), which understates D and C for perfect representations.

    Single-valued sources are skipped with a warning (zero importance column, excluded from D, C and I).
    See :func:`dci_from_importance` for the degenerate n_sources == 1 / n_latents == 1 conventions (D or C = 1).

    Returns ``{"d", "i", "c"}`` floats, ``"importance"`` (n_latents, n_sources) and ``"max_depth"`` (list with
    the depth used per source; None for a skipped source or an unbounded depth).
    """
    s, z = check_inputs(sources, latents)
    s_codes, s_card = label_encode_columns(s)
    usable = s_card > 1
    for i in np.flatnonzero(~usable):
        warnings.warn(f"source {i} has a single value; it is skipped by DCI", RuntimeWarning, stacklevel=2)

    x_train, x_test, y_train, y_test = train_test_split(
        _standardize(z), s_codes, test_size=test_size, random_state=seed
    )
    depths = [max_depth] if max_depth is not None else list(depth_grid)
    if not depths:
        raise ValueError("depth_grid must not be empty when max_depth is None")

    importance = np.zeros((z.shape[1], s.shape[1]))
    accuracy = np.zeros(s.shape[1])
    chosen: list[int | None] = [None] * s.shape[1]
    for i in np.flatnonzero(usable):
        best: tuple[RandomForestClassifier, float, float] | None = None
        for depth in depths:
            fit = _fit_forest(x_train, y_train[:, i], x_test, y_test[:, i], depth, n_estimators, seed, n_jobs)
            # Highest accuracy wins; exact ties (common when a source is perfectly predictable) go to the lower
            # held-out log-loss, then to the earlier grid entry.
            if best is None or (fit[1], -fit[2]) > (best[1], -best[2]):
                best, chosen[i] = fit, depth
        importance[:, i] = best[0].feature_importances_
        accuracy[i] = best[1]

    if not usable.any():
        return {"d": 0.0, "i": 0.0, "c": 0.0, "importance": importance, "max_depth": chosen}
    d, c = dci_from_importance(importance[:, usable])
    return {
        "d": d,
        "i": float(accuracy[usable].mean()),
        "c": c,
        "importance": importance,
        "max_depth": chosen,
    }
