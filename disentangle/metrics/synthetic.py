"""Synthetic (factors, latents) pairs that look like a trained encoder's output, for benchmarks and tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ISAAC3D_SIZES", "synthetic_representation"]

# Isaac3D's factor sizes (9 factors): the benchmark's 10,000 × 9 sources × 18 latents is that dataset with the
# papers' n_latents = 2 × n_factors.
ISAAC3D_SIZES = (3, 8, 5, 4, 4, 4, 6, 4, 4)


def synthetic_representation(
    n: int = 10_000,
    factor_sizes: Sequence[int] = ISAAC3D_SIZES,
    n_latents: int = 18,
    *,
    discrete: bool = True,
    n_inactive: int = 2,
    leak: float = 0.35,
    noise: float = 0.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(sources (n, n_factors) int, latents (n, n_latents) float) with known structure.

    Factors are drawn uniformly from their grids. Active latent j mostly encodes factor j mod n_factors, and about a
    quarter of the (factor, latent) weights leak up to ``leak`` of another factor into it; a squashing nonlinearity
    follows. Like a trained encoder's output, the latents are deterministic functions of the factors. ``discrete``
    rounds them to about 11 levels (a quantised latent space); the last ``n_inactive`` latents are constant 0.
    ``noise`` adds Gaussian noise of that scale before the nonlinearity (nuisance variation; it also breaks the exact
    ties that small factor grids produce, which k-NN estimators handle poorly).
    """
    rng = np.random.default_rng(seed)
    sizes = np.asarray(factor_sizes)
    sources = np.stack([rng.integers(0, k, n) for k in sizes], axis=1)
    unit = sources / np.maximum(sizes - 1, 1)
    structure = np.random.default_rng(1234)  # the mixing is part of the "encoder", the same for every seed
    n_s, n_active = len(sizes), n_latents - n_inactive
    mix = structure.uniform(0, leak, (n_s, n_latents)) * (structure.uniform(size=(n_s, n_latents)) < 0.25)
    mix[np.arange(n_active) % n_s, np.arange(n_active)] = 1.0
    mix[:, n_active:] = 0.0
    pre = unit @ mix + noise * rng.standard_normal((n, n_latents))
    latents = np.tanh(1.5 * (pre - pre.mean(axis=0)))
    if discrete:
        latents = np.round(latents * 5)
    latents[:, n_active:] = 0.0
    return sources, latents
