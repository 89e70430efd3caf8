"""Reconstruction quality: PSNR (spec ``shared/specs/qlae.md`` §8.7) and MSE (``factorqvae.md`` A10)."""

from __future__ import annotations

from typing import Any

import numpy as np

from disentangle.metrics.infomec import as_numpy

__all__ = ["PSNR_CAP_DB", "mse", "mse_per_image", "psnr", "psnr_from_mse", "psnr_per_image"]

# A perfect reconstruction has MSE 0 and infinite PSNR; we cap each image at 100 dB (an MSE of 1e-10, far below
# float32 rounding of [0, 1] images) so that the mean over a batch stays finite and comparable.
PSNR_CAP_DB = 100.0


def psnr_per_image(reconstruction: Any, target: Any) -> np.ndarray:
    """Per-image PSNR = 10·log10(1 / MSE) in dB, MSE over all non-batch axes, in float64, capped at 100 dB.

    Images are in [0, 1] (peak value 1), shape (N, C, H, W) or any (N, ...); numpy arrays or torch tensors.
    """
    return psnr_from_mse(mse_per_image(reconstruction, target))


def psnr_from_mse(mse: Any) -> np.ndarray:
    """PSNR = 10·log10(1 / MSE) in dB of per-image MSEs of [0, 1] images, capped at :data:`PSNR_CAP_DB`."""
    with np.errstate(divide="ignore"):
        values = -10.0 * np.log10(np.asarray(mse, dtype=np.float64))  # +inf where MSE == 0
    return np.minimum(values, PSNR_CAP_DB)


def psnr(reconstruction: Any, target: Any) -> float:
    """Mean over images of the per-image PSNR (spec qlae.md §8.7); see :func:`psnr_per_image`."""
    return float(psnr_per_image(reconstruction, target).mean())


def mse_per_image(reconstruction: Any, target: Any) -> np.ndarray:
    """Per-image MSE over all non-batch axes, in float64 (spec factorqvae.md §8.5; qlae.md §8.7, the MSE inside
    PSNR). Shape (N, ...), numpy arrays or torch tensors."""
    x = as_numpy(reconstruction).astype(np.float64)
    y = as_numpy(target).astype(np.float64)
    if x.shape != y.shape:
        raise ValueError(f"reconstruction and target shapes differ: {x.shape} vs {y.shape}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of images (N, ...), got shape {x.shape}")
    return ((x - y) ** 2).reshape(x.shape[0], -1).mean(axis=1)


def mse(reconstruction: Any, target: Any) -> float:
    """Mean over images of :func:`mse_per_image` (spec factorqvae.md §8.5, reported ×10⁴ there); every image has
    the same size, so this equals the mean over all values."""
    return float(mse_per_image(reconstruction, target).mean())
