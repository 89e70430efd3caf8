"""Reconstruction quality: PSNR (QLAE paper App. E) and MSE (FactorQVAE paper Table 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from disentangle.metrics.common import as_numpy

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
    """Mean over images of the per-image PSNR (QLAE paper App. E; per image as in the authors' code).

    See :func:`psnr_per_image`."""
    return float(psnr_per_image(reconstruction, target).mean())


def mse_per_image(reconstruction: Any, target: Any) -> np.ndarray:
    """Per-image MSE over all non-batch axes, in float64 (FactorQVAE paper Table 1; also the MSE inside PSNR).
    Shape (N, ...), numpy arrays or torch tensors; two tensors on one device are reduced there, so only the N
    values leave a GPU (duck-typed, the metrics package does not import torch)."""
    x, y = reconstruction, target
    on_device = hasattr(x, "detach") and hasattr(y, "detach") and x.device == y.device
    if not on_device:
        x, y = as_numpy(x), as_numpy(y)
    shape = tuple(x.shape)
    if shape != tuple(y.shape):
        raise ValueError(f"reconstruction and target shapes differ: {shape} vs {tuple(y.shape)}")
    if len(shape) < 2 or shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of images (N, ...), got shape {shape}")
    if on_device:
        return as_numpy((x.detach().double() - y.detach().double()).square().reshape(shape[0], -1).mean(1))
    x, y = x.astype(np.float64), y.astype(np.float64)
    return ((x - y) ** 2).reshape(shape[0], -1).mean(axis=1)


def mse(reconstruction: Any, target: Any) -> float:
    """Mean over images of :func:`mse_per_image` (FactorQVAE paper Table 1 reports it ×10⁴); every image has
    the same size, so this equals the mean over all values."""
    return float(mse_per_image(reconstruction, target).mean())
