"""A new metric: the total correlation of a Gaussian fitted to the representation.

A metric is a function of the evaluation set (``factors`` (n, n_s), ``latents`` (n, n_z)) and keyword options,
returning a dict; one registry entry says which of its outputs go into ``metrics.json`` and which are scalars
with a column label. Its options come from ``callbacks.evaluation.<name>`` in the config.
"""
from __future__ import annotations

import numpy as np

from disentangle.metrics import as_numpy
from disentangle.metrics.suite import register_metric


def gaussian_tc(factors, latents, *, eps: float = 1e-6) -> dict:
    """TC of N(mean, Σ) fitted to the latents: ½ (Σ_j log Σ_jj − log det Σ), in nats; 0 exactly when Σ is
    diagonal (no linear dependence between latents). ``eps`` is added to Σ's diagonal (constant latents)."""
    z = as_numpy(latents).astype(np.float64)
    cov = np.atleast_2d(np.cov(z, rowvar=False)) + eps * np.eye(z.shape[1])
    _, logdet = np.linalg.slogdet(cov)
    return {"tc": 0.5 * (np.log(np.diag(cov)).sum() - logdet), "covariance": cov}


register_metric("gaussian_tc", gaussian_tc, outputs={"tc": "gaussian_tc", "covariance": "gaussian_tc_covariance"},
                labels={"gaussian_tc": "GTC"}, replace=True)
