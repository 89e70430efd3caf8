"""Helpers shared by the metric modules: input conversion and validation, label encoding and binning, plug-in
entropy and mutual information, and the train/test split and unpenalised-logistic settings of the supervised
metrics. They live here, under public names, so that every metric module imports them from one place instead of
from another metric (the old homes, ``infomec``, ``mig`` and ``modularity``, re-export them).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from disentangle.checks import check_choice, check_counts

__all__ = [
    "DISCRETIZATIONS",
    "as_2d",
    "as_numpy",
    "bin_columns",
    "check_inputs",
    "checked_inputs",
    "entropy_discrete",
    "equal_width_bins",
    "label_encode",
    "label_encode_columns",
    "mi_matrix",
    "mutual_info_discrete",
    "split_train_test",
    "standardize",
    "unpenalised_logistic_kwargs",
    "warn_skipped",
]

DISCRETIZATIONS = ("histogram", "minmax")


# ----------------------------------------------------------------------------------------------------------------
# Input conversion and validation
# ----------------------------------------------------------------------------------------------------------------
def as_numpy(x: Any) -> np.ndarray:
    """Convert a numpy array, torch tensor (any device, with or without grad) or array-like to numpy.

    Duck-typed on ``.detach()`` so that the metrics package never has to import torch.
    """
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def as_2d(x: Any, name: str) -> np.ndarray:
    """numpy array of shape (n_samples, n_columns); a 1-D input is one column."""
    arr = as_numpy(x)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n_samples, n_{name}), got {arr.shape}")
    return arr


def check_inputs(sources: Any, latents: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert (sources, latents) to 2-D numpy arrays with matching numbers of rows."""
    s = as_2d(sources, "sources")
    z = as_2d(latents, "latents").astype(np.float64)
    if s.shape[0] != z.shape[0]:
        raise ValueError(
            f"sources and latents need the same number of samples, got {s.shape[0]} and {z.shape[0]}"
        )
    if s.shape[0] < 2:
        raise ValueError("need at least 2 samples")
    if s.shape[1] == 0 or z.shape[1] == 0:
        raise ValueError("need at least one source and one latent column")
    return s, z


def checked_inputs(sources: Any, latents: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_inputs` plus a clear error for NaN/inf latents (binning and fits would fail obscurely)."""
    s, z = check_inputs(sources, latents)
    if not np.isfinite(z).all():
        raise ValueError("latents contain NaN or infinite values")
    return s, z


def warn_skipped(cardinalities: np.ndarray, metric: str = "InfoMEC") -> np.ndarray:
    """Boolean mask of usable sources; warns once per source that has a single value (zero entropy), which
    ``metric`` skips (shared by the metrics that normalise by, or need, a source's entropy)."""
    usable = np.asarray(cardinalities) > 1
    for i in np.flatnonzero(~usable):
        warnings.warn(
            f"source {i} has a single value (zero entropy); it is skipped by {metric}",
            RuntimeWarning,
            stacklevel=3,
        )
    return usable


def standardize(z: np.ndarray) -> np.ndarray:
    """Per-column zero mean / unit variance; constant columns become zeros instead of NaN."""
    centred = z - z.mean(axis=0)
    std = z.std(axis=0)
    return np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)


# ----------------------------------------------------------------------------------------------------------------
# Label encoding and binning
# ----------------------------------------------------------------------------------------------------------------
def label_encode(column: np.ndarray) -> tuple[np.ndarray, int]:
    """Map a 1-D array to integer codes 0..K-1 by its sorted unique values; returns (codes, K)."""
    uniques, codes = np.unique(column, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), len(uniques)


def label_encode_columns(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label-encode every column of a 2-D array (as the QLAE authors' code does).

    Returns (codes (n, d), cardinalities (d,))."""
    encoded = [label_encode(x[:, j]) for j in range(x.shape[1])]
    codes = np.stack([c for c, _ in encoded], axis=1) if encoded else np.zeros((x.shape[0], 0), np.int64)
    return codes, np.array([k for _, k in encoded], dtype=np.int64)


def bin_columns(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Each column cut into ``n_bins`` equal-width bins over its range (codes 0..n_bins-1; constant → 0)."""
    x = np.asarray(x, dtype=np.float64)
    lo, hi = x.min(axis=0), x.max(axis=0)
    width = np.where(hi > lo, (hi - lo) / n_bins, 1.0)
    return np.minimum(((x - lo) / width).astype(np.int64), n_bins - 1)


def equal_width_bins(x: Any, *, n_bins: int = 20, method: str = "histogram") -> np.ndarray:
    """Bin every column of ``x`` (n, d) into ``n_bins`` equal-width bins; returns int codes (n, d).

    ``"histogram"``: disentanglement_lib's ``np.digitize(x, np.histogram(x, n_bins)[1][:-1])`` per column
    (bins span [min, max]; a constant column lands in one bin). ``"minmax"``: the Cliff/dent variant, scale each
    column to [0, 1] by min-max (a constant column becomes 0) and digitize with ``linspace(0, 1, n_bins+1)[:-1]``.
    Both are the same partition in exact arithmetic; they can differ only by rounding at bin edges.
    """
    check_choice("discretize", method, DISCRETIZATIONS)
    check_counts(n_bins=(n_bins, 2))
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    codes = np.empty(arr.shape, dtype=np.int64)
    for j in range(arr.shape[1]):
        col = arr[:, j]
        if method == "histogram":
            edges = np.histogram(col, bins=int(n_bins))[1][:-1]
            codes[:, j] = np.digitize(col, edges)
        else:
            lo, span = col.min(), col.max() - col.min()
            scaled = (col - lo) / span if span > 0 else np.zeros_like(col)
            codes[:, j] = np.digitize(scaled, np.linspace(0.0, 1.0, int(n_bins) + 1)[:-1])
    return codes


# ----------------------------------------------------------------------------------------------------------------
# Plug-in entropy and mutual information (nats)
# ----------------------------------------------------------------------------------------------------------------
def entropy_discrete(codes: np.ndarray) -> float:
    """Plug-in entropy (nats) of integer codes 0..K-1."""
    p = np.bincount(codes) / codes.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def mutual_info_discrete(x: np.ndarray, kx: int, y: np.ndarray, ky: int) -> float:
    """Plug-in MI (nats) of two label-encoded columns via the empirical contingency table.

    The joint code x*ky + y indexes the flattened table, so one bincount builds it without a per-sample loop.
    """
    joint = np.bincount(x * ky + y, minlength=kx * ky).reshape(kx, ky) / x.size
    px = joint.sum(axis=1, keepdims=True)
    py = joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    mi = (joint[nz] * (np.log(joint[nz]) - np.log((px @ py)[nz]))).sum()
    return max(float(mi), 0.0)  # rounding can give -1e-17 for independent columns


def mi_matrix(s_codes: np.ndarray, s_card: np.ndarray, z_binned: np.ndarray) -> np.ndarray:
    """Plug-in MI (nats) between every binned latent and every label-encoded source, shape (n_latents, n_sources).

    Same quantity as ``sklearn.metrics.mutual_info_score(source, latent_bins)``.
    """
    z_codes, z_card = label_encode_columns(z_binned)
    mi = np.zeros((z_codes.shape[1], s_codes.shape[1]))
    for j in range(z_codes.shape[1]):
        for k in range(s_codes.shape[1]):
            mi[j, k] = mutual_info_discrete(z_codes[:, j], z_card[j], s_codes[:, k], s_card[k])
    return mi


# ----------------------------------------------------------------------------------------------------------------
# Supervised metrics: unpenalised logistic regression, train/test split
# ----------------------------------------------------------------------------------------------------------------
def unpenalised_logistic_kwargs() -> dict[str, Any]:
    """No regularisation, spelled the way the installed sklearn accepts without a deprecation warning.

    sklearn ≥ 1.8 deprecates ``penalty`` (default 'deprecated') in favour of C=np.inf; older versions want
    ``penalty=None``.
    """
    default = inspect.signature(LogisticRegression).parameters["penalty"].default
    return {"C": np.inf} if default == "deprecated" else {"penalty": None}


def split_train_test(
    sources: Any,
    latents: Any,
    sources_test: Any | None,
    latents_test: Any | None,
    test_size: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train codes, test codes, train latents, test latents, cardinalities) for the supervised metrics.

    With explicit test arrays they are used as given; otherwise (sources, latents) are split by
    ``train_test_split(test_size, random_state=seed)``. Sources are label-encoded over train ∪ test so the codes
    agree between the splits.
    """
    if (sources_test is None) != (latents_test is None):
        raise ValueError("give both sources_test and latents_test, or neither")
    s, z = checked_inputs(sources, latents)
    if sources_test is None:
        if s.shape[0] < 4:
            raise ValueError(f"need at least 4 samples to split into train and test, got {s.shape[0]}")
        s_tr, s_te, z_tr, z_te = train_test_split(s, z, test_size=test_size, random_state=seed)
    else:
        s_te, z_te = checked_inputs(sources_test, latents_test)
        if s_te.shape[1] != s.shape[1] or z_te.shape[1] != z.shape[1]:
            raise ValueError(
                f"train and test column counts differ: sources {s.shape[1]} vs {s_te.shape[1]}, "
                f"latents {z.shape[1]} vs {z_te.shape[1]}"
            )
        s_tr, z_tr = s, z
    codes, card = label_encode_columns(np.concatenate([s_tr, s_te]))
    return codes[: len(s_tr)], codes[len(s_tr) :], z_tr, z_te, card
