"""Plain continuous latent (AE, BioAE): z is the encoder output (spec qlae.md §3.4)."""
from __future__ import annotations

import torch

from .base import LatentModule, LatentOutput


class ContinuousLatent(LatentModule):
    """Identity latent module; evaluation treats the latents as continuous."""

    discrete = False

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        return LatentOutput(z=pre, z_continuous=pre)
