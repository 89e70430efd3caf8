"""A new regularizer in one file: an L1 (lasso) penalty on the latent, mean |z_j| over the batch and dimensions.

A regularizer sees one training step's :class:`~disentangle.regularizers.StepContext` and returns named,
unweighted loss terms; the model multiplies each by ``weight`` and logs it as ``train/<name>``.
"""
from __future__ import annotations

import torch

from disentangle.regularizers import Regularizer, StepContext


class LatentL1(Regularizer):
    """weight · mean_{i,j} |z_ij| (Tibshirani 1996's penalty on the codes): pushes unused latents to exactly 0.

    ``on="mean"`` penalises a Gaussian latent's posterior mean μ instead of its sample."""

    def __init__(self, weight: float = 0.01, on: str = "z"):
        super().__init__(weight)
        if on not in ("z", "mean"):
            raise ValueError(f"LatentL1.on must be one of ['z', 'mean'] (got {on!r})")
        self.on = on

    def bind(self, model) -> None:
        """Checked once, before training: ``on=mean`` needs a Gaussian latent."""
        super().bind(model)
        if self.on == "mean" and model.latent_spec.distribution != "gaussian":
            raise ValueError(f"LatentL1 on=mean needs a Gaussian latent, not {model.latent_spec.module}")

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        z = ctx.latent.params["mu"] if self.on == "mean" else ctx.latent.z
        return {"latent_l1": z.abs().mean()}
