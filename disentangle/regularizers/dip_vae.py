"""DIP-VAE's covariance penalty (Kumar et al. 2018, "Variational Inference of Disentangled Latent Concepts from
Unlabeled Observations"), as disentanglement_lib implements it for Locatello et al.'s study.

Mixed precision (:mod:`disentangle.foundation.precision`): under autocast the covariance's matrix product, and so
the penalty, run in bf16. It is no fp32 island: one moved the penalty by at most 0.2% (at initialisation; near
C = I not beyond the encoder's own bf16 rounding) and its gradient not measurably (docs/precision.md).
"""
from __future__ import annotations

import torch

from ..checks import check_one_of
from ..quantizers.base import check_weight
from .base import Regularizer, StepContext

VARIANTS = ("i", "ii")


def dip_vae_penalty(mu: torch.Tensor, sigma: torch.Tensor | None, *, variant: str, lambda_od: float,
                    lambda_d: float) -> torch.Tensor:
    """λ_od Σ_{i≠j} C_ij² + λ_d Σ_i (C_ii − 1)² (a scalar) for posterior means ``mu`` and standard deviations
    ``sigma``, both (B, d).

    DIP-VAE-I (Kumar et al. 2018, Eq. 6): C = Cov_p(x)[μ(x)], the population covariance of ``mu`` over the batch.
    DIP-VAE-II (Eq. 7): C = E_p(x)[diag σ²(x)] + Cov_p(x)[μ(x)], the batch mean of diag(``sigma``²) added
    (``sigma`` may be None for variant ``"i"``).
    """
    check_one_of("variant", variant, VARIANTS)
    lambda_od, lambda_d = check_weight("lambda_od", lambda_od), check_weight("lambda_d", lambda_d)
    if mu.dim() != 2:
        raise ValueError(f"mu must have shape (B, d) (got {tuple(mu.shape)})")
    centred = mu - mu.mean(0, keepdim=True)
    cov = centred.T @ centred / mu.shape[0]
    if variant == "ii":
        if sigma is None or sigma.shape != mu.shape:
            raise ValueError(f"variant 'ii' needs sigma of mu's shape {tuple(mu.shape)} "
                             f"(got {None if sigma is None else tuple(sigma.shape)})")
        cov = cov + torch.diag(sigma.pow(2).mean(0))
    diagonal = torch.diagonal(cov)
    off_diagonal = cov - torch.diag(diagonal)
    return lambda_od * off_diagonal.pow(2).sum() + lambda_d * (diagonal - 1).pow(2).sum()


class DIPVAE(Regularizer):
    """DIP-VAE's penalty :func:`dip_vae_penalty` on a Gaussian latent's ``mu`` (and ``sigma``), logged as ``dip``;
    the VAE keeps its own KL beside it (disentanglement_lib: loss = reconstruction + KL + penalty).

    ``lambda_d = lambda_d_factor * lambda_od`` (disentanglement_lib's parametrisation; Locatello et al.: factor 10
    for DIP-VAE-I, 1 for DIP-VAE-II). ``per_image``: the λ's sit beside a per-image likelihood, so the model
    rescales the term like a KL (``model.density_scale``: × 1 beside the summed BCE of the ``*_friede`` models,
    × 1/D_x beside a per-pixel-mean BCE); false applies it as given.
    """

    requires_distribution = "gaussian"

    def __init__(self, weight: float = 1.0, variant: str = "i", lambda_od: float = 10.0,
                 lambda_d_factor: float = 10.0, per_image: bool = True):
        super().__init__(weight)
        self.variant = check_one_of("variant", str(variant), VARIANTS)
        self.lambda_od = check_weight("lambda_od", lambda_od)
        self.lambda_d = self.lambda_od * check_weight("lambda_d_factor", lambda_d_factor)
        self.density_terms = frozenset({"dip"}) if per_image else frozenset()

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        params = ctx.latent.params
        return {"dip": dip_vae_penalty(params["mu"], params["sigma"], variant=self.variant,
                                       lambda_od=self.lambda_od, lambda_d=self.lambda_d)}
