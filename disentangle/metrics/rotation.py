"""Latent rotation angle of a 2-factor representation: how far the latent space is turned away from the axes.

Friede et al.'s Circles experiment (§3.3, Prop. 2, Fig. 3; App. 7.0.2): a Gaussian VAE's latent space is
rotation-equivariant in equal-variance dimensions, so its X/Y latents come out rotated by an arbitrary angle,
while the D-VAE's grid favours axis-aligned latents. The paper shows the rotation in figures only (Figs. 3,
10, 11); this module measures it by regressing the factors on the latents (our choice; the paper gives no
formula).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from disentangle.metrics.common import checked_inputs

__all__ = ["check_rotation_inputs", "rotation"]


def check_rotation_inputs(n_sources: int, n_latents: int) -> None:
    """Raise one ValueError unless the rotation angle is defined: exactly 2 factors and at least 2 latents."""
    if n_sources != 2 or n_latents < 2:
        raise ValueError(
            f"rotation needs exactly 2 factors and at least 2 latent dimensions (got {n_sources} factors, "
            f"{n_latents} latents)"
        )


def rotation(sources: Any, latents: Any) -> dict[str, Any]:
    """Rotation angle (degrees, in [0°, 45°] for 2 latents; 0 = axis aligned) of the latent space relative to the
    two factors (Friede et al. §3.3, Fig. 3).

    Definition. Fit the affine least-squares regression of the factors on the latents, ``s ≈ W^T z + b``
    (``W``: n_latents × 2, both sides centred, ``numpy.linalg.lstsq``). Column ``w_k`` is factor k's regression
    direction: the direction in latent space along which the linear prediction of factor k grows. Its angle to the
    nearest coordinate axis (either sign) is ``α_k = arctan(sqrt(|w_k|² − max_j w_kj²) / max_j |w_kj|)`` (i.e.
    ``arccos(max_j |w_kj| / |w_k|)``), in [0°, 45°] for 2 latents (up to arccos(1/√n) for n). The rotation angle is
    the mean of α_0 and α_1. For latents that are the factors rotated by θ ∈ [0°, 45°] (after any per-factor
    scaling), both w_k are the rotated axes, so the result is θ; θ and 90° − θ are the same axis alignment and both
    give min(θ, 90° − θ).

    Invariances: affine maps of each factor (index vs value, scale, sign) and swapping the factors; permutations
    and sign flips of the latent axes; a common latent scale and latent translations. The raw latents are used,
    not standardised ones: the priors (N(0, I), the D-VAE's grid on [−1, 1]) give the axes a common scale, and a
    non-uniform per-latent scaling genuinely changes the angles in the latent plane (except at 0°, which it keeps).
    The regression is linear, so for a curved latent map the angle is that of its best linear approximation
    (``r2`` says how good that is). It measures orientation only: two factors on the same axis give 0° too
    (MIG tells that apart).

    Args:
        sources: (n, 2) factor values or class indices.
        latents: (n, n_latents) representation, n_latents >= 2.

    Returns:
        ``{"rotation": float degrees, "per_factor": (2,) α_k in degrees, "directions": (n_latents, 2) unit
            regression directions w_k / |w_k|, "r2": (2,) coefficient of determination of each factor's
            regression}``. A factor whose direction is zero (all latents constant) gets α_k = NaN.
    """
    s, z = checked_inputs(sources, latents)
    check_rotation_inputs(s.shape[1], z.shape[1])
    s = s.astype(np.float64)
    if not np.isfinite(s).all():
        raise ValueError("sources contain NaN or infinite values")
    constant = np.ptp(s, axis=0) == 0
    if constant.any():
        raise ValueError(f"rotation: factor column(s) {np.flatnonzero(constant).tolist()} take a single value")
    sc = s - s.mean(axis=0)
    zc = z - z.mean(axis=0)
    weights, *_ = np.linalg.lstsq(zc, sc, rcond=None)          # (n_latents, 2)
    residual = sc - zc @ weights
    r2 = 1.0 - (residual**2).sum(axis=0) / (sc**2).sum(axis=0)
    norms = np.linalg.norm(weights, axis=0)
    magnitude = np.abs(weights)
    nearest = magnitude.argmax(axis=0)                       # each factor's nearest latent axis
    largest = magnitude[nearest, np.arange(2)]
    off_axis = magnitude.copy()
    off_axis[nearest, np.arange(2)] = 0.0
    rest = np.linalg.norm(off_axis, axis=0)                  # no cancellation for small angles
    with np.errstate(invalid="ignore", divide="ignore"):
        per_factor = np.where(norms > 0, np.degrees(np.arctan2(rest, largest)), np.nan)
        directions = np.where(norms > 0, weights / np.where(norms > 0, norms, 1.0), 0.0)
    return {"rotation": float(per_factor.mean()), "per_factor": per_factor, "directions": directions, "r2": r2}
