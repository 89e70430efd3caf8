"""Plain continuous latent (AE, BioAE): z is the encoder output (as in the QLAE authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): runs in float32 like every latent module
(``LatentModel.run_latent``); nothing in it is sensitive.
"""
from __future__ import annotations

import torch

from .base import LatentModule, LatentOutput


class ContinuousLatent(LatentModule):
    """Identity latent module; evaluation treats the latents as continuous. Its prior (InfoWGAN-GP's z_fake) is
    U[0, 1]^{n_z} (the QLAE authors' code)."""

    discrete = False
    has_prior = True

    def sample_prior(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.rand(n, self.n_latents, device=device)

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        return LatentOutput(z=pre, z_continuous=pre)
