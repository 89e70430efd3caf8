"""BioAE's biological constraints on the latent (Whittington et al. 2023; as in the QLAE authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): the constraints run in float32 (elementwise reductions
of the latent island's float32 z; no island of their own).
"""
from __future__ import annotations

import torch

from ..quantizers.base import check_weight
from .base import Regularizer, StepContext


def biological_constraints(z: torch.Tensor) -> dict[str, torch.Tensor]:
    """``nonneg`` = mean over batch and latents of max(-z, 0); ``activity`` = mean of z^2 (authors' code)."""
    return {"nonneg": torch.relu(-z).mean(), "activity": z.pow(2).mean()}


class BiologicalConstraints(Regularizer):
    """Non-negativity (weight ``nonneg_weight``, 1 in the paper) and activity energy (``activity_weight``,
    tuned over 0.01..100) on the latent fed to the decoder. Not divided by D_x: their scale is relative to
    the per-pixel BCE. BioAE's third constraint, weight energy, is the optimizer's weight decay (1e-4 in
    ``model=bioae``), not a term here.
    """

    def __init__(self, weight: float = 1.0, nonneg_weight: float = 1.0, activity_weight: float = 0.1):
        super().__init__(weight)
        self.term_weights = {
            "nonneg": check_weight("nonneg_weight", nonneg_weight),
            "activity": check_weight("activity_weight", activity_weight),
        }

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        return biological_constraints(ctx.latent.z)
