"""A new latent module: binary codes, z_j = sign(tanh(pre_j)) ∈ {-1, +1} with a straight-through gradient.

A latent module maps the encoder's output to a :class:`~disentangle.quantizers.LatentOutput` (the decoder's input,
its continuous value, code indices, its own loss terms) and says through class attributes what the evaluation
should treat it as (``discrete``: plug-in mutual information instead of KSG).
"""
from __future__ import annotations

import torch

from disentangle.quantizers import LatentModule, LatentOutput, straight_through


class BinaryLatent(LatentModule):
    """One bit per latent: forward value sign(tanh(x)) (0 maps to +1), gradient straight through tanh(x);
    ``saturation`` = mean (1 − tanh(x)²), weight ``saturation_weight``, pulls codes away from the boundary."""

    discrete = True  # the metrics see two values per latent

    def __init__(self, n_latents: int, saturation_weight: float = 0.0):
        super().__init__(n_latents)
        self.weights = {"saturation": float(saturation_weight)}

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        soft = torch.tanh(pre)
        hard = torch.where(soft >= 0, torch.ones_like(soft), -torch.ones_like(soft))
        z = straight_through(soft, hard)
        return LatentOutput(z=z, z_continuous=soft, indices=(hard > 0).long(),
                            losses={"saturation": (1 - soft.pow(2)).mean()})
