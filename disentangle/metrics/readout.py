"""A readout's R² out of distribution (Schott et al., ICLR 2022, §3-4; their benchmark's ``evaluate_model.py``).

A regressor is fitted from latents to the factors on one set (in distribution) and scored on another (the held-out
combinations of a ``data.split``). As in their evaluation:

* targets are the factors' class indices scaled to [0, 1], ``y_i = k_i / (n_i - 1)``;
* per factor, ``R²_i = 1 - mean_test((ŷ_i - y_i)²) / Var_i`` with ``Var_i`` the variance of ``y_i`` over the *whole
  grid* (``(n_i + 1) / (12 (n_i - 1))`` for a uniform grid), not over the test set: a held-out set that covers a
  narrow range is not rewarded for its small variance;
* the score is the mean over every factor, categorical ones included.

Readouts: ``linear`` is least squares with an intercept (``sklearn.linear_model.LinearRegression``); ``mlp`` is a
small ReLU network trained with Adam on the squared error (``sklearn.neural_network.MLPRegressor``, hidden widths
``hidden``, early stopping on 10% of the fitting set). Schott et al.'s readout for unsupervised representations is
wider (five hidden layers of 256); the default here, two of 128, is our choice for a laptop's evaluation time.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from disentangle.checks import check_choice

__all__ = ["READOUTS", "grid_variance", "readout_r2"]

READOUTS = ("linear", "mlp")


def grid_variance(factor_sizes: Sequence[int]) -> np.ndarray:
    """Variance of ``k / (n - 1)`` over ``k = 0..n-1`` for each factor: ``(n + 1) / (12 (n - 1))``."""
    n = np.asarray([int(s) for s in factor_sizes], dtype=np.float64)
    if (n < 2).any():
        raise ValueError(f"every factor needs at least 2 classes for a readout's R² (got {list(factor_sizes)})")
    return (n + 1) / (12 * (n - 1))


def _targets(factors: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    return np.asarray(factors, dtype=np.float64) / (sizes - 1)


def readout_r2(train_latents, train_factors, test_latents, test_factors, factor_sizes: Sequence[int], *,
               kind: str = "linear", hidden: Sequence[int] = (128, 128), seed: int = 0, max_iter: int = 300
               ) -> dict:
    """Fit a ``kind`` readout on (train latents -> scaled factors) and score it on the test set (module doc).

    Returns ``{"per_factor": [R²_i, ...], "mean": mean R², "mse": [mean squared error_i, ...]}``; R² can be negative
    (worse than predicting the grid's mean)."""
    check_choice("kind", kind, READOUTS)
    sizes = np.asarray([int(s) for s in factor_sizes], dtype=np.float64)
    variance = grid_variance(factor_sizes)
    x_fit, x_test = (np.asarray(a, dtype=np.float64) for a in (train_latents, test_latents))
    y_fit, y_test = _targets(train_factors, sizes), _targets(test_factors, sizes)
    for name, x, y in (("fitting", x_fit, y_fit), ("test", x_test, y_test)):
        if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or y.shape[1] != len(sizes) or len(x) < 2:
            raise ValueError(f"readout: the {name} set needs (N, d) latents and (N, {len(sizes)}) factors with "
                             f"N >= 2 (got {x.shape} and {y.shape})")
    if kind == "linear":
        from sklearn.linear_model import LinearRegression

        model = LinearRegression().fit(x_fit, y_fit)
    else:
        from sklearn.neural_network import MLPRegressor

        model = MLPRegressor(hidden_layer_sizes=tuple(int(h) for h in hidden), max_iter=int(max_iter),
                             early_stopping=len(x_fit) >= 20, random_state=int(seed)).fit(x_fit, y_fit)
    predicted = np.asarray(model.predict(x_test), dtype=np.float64).reshape(y_test.shape)
    mse = ((predicted - y_test) ** 2).mean(axis=0)
    r2 = 1.0 - mse / variance
    return {"per_factor": r2.tolist(), "mean": float(r2.mean()), "mse": mse.tolist()}
