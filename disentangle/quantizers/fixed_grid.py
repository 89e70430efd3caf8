"""Tripod's finite scalar quantization on a fixed grid (Tripod paper §3.1, Eq. 10).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32
(``LatentModel.run_latent``): grid values rounded to bf16 would no longer be grid values.
"""
from __future__ import annotations

import torch

from .base import LatentModule, LatentOutput, straight_through


class FixedGridQuantizer(LatentModule):
    """tanh to [-1, 1], rescale to [0, n_levels-1], round (straight-through), rescale back.

    The grid {-1, -1 + 2/(n-1), ..., 1} is fixed: no codebook parameters and no quantize/commit losses.
    ``torch.round`` rounds half to even, like the authors' ``jnp.round``. ``z_continuous`` is the tanh
    output, from which KLM/NHP take their bandwidth (the authors' code; Tripod Alg. 1, line 7
    writes the pre-tanh output).
    """

    discrete = True

    def __init__(self, n_latents: int, n_levels: int = 12):
        super().__init__(n_latents)
        if int(n_levels) < 2:
            raise ValueError(f"n_levels must be >= 2 (got {n_levels})")
        self.n_levels = int(n_levels)

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        z_c = torch.tanh(pre)
        u = (z_c + 1) * (0.5 * (self.n_levels - 1))
        rounded = torch.round(u)
        z = straight_through(u, rounded) * (2.0 / (self.n_levels - 1)) - 1
        return LatentOutput(z=z, z_continuous=z_c, indices=rounded.detach().long())
