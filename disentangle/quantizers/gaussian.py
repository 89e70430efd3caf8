"""Diagonal-Gaussian latent of the VAE baselines (β-VAE, β-TCVAE; as in the QLAE authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32 (the model calls every latent
module as an fp32 island, ``LatentModel.run_latent``): sampling, log-density and a KL between nearly equal
Gaussians. :func:`gaussian_kl` is elementwise, so it stays in float32 on float32 inputs without an island of its own.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import LatentModule, LatentOutput, check_weight

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_log_density(x: torch.Tensor, mu: torch.Tensor | float, sigma: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mu, sigma^2) (broadcasting)."""
    return -0.5 * ((x - mu) / sigma).pow(2) - torch.log(sigma) - _HALF_LOG_2PI


def gaussian_kl(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag sigma^2) || N(0, I)) per sample, summed over dimensions: (B,).
    As the QLAE authors' code computes it: sum_j [-log sigma_j + (mu_j^2 + sigma_j^2 - 1) / 2]."""
    return (-torch.log(sigma) + 0.5 * (mu.pow(2) + sigma.pow(2) - 1)).sum(-1)


class GaussianLatent(LatentModule):
    """q(z|x) = N(mu, diag sigma^2): the encoder's 2·n_z outputs are mu (first n_z) and a, sigma = softplus(a)
    (QLAE/Tripod authors' code) or, with ``scale="logvar"``, a = log sigma^2 (FactorQVAE's and Friede et al.'s code).

    Training: one reparameterised sample z = mu + sigma·eps goes to the decoder. Evaluation: z = mu, and mu
    is the representation the metrics see, treated as continuous (QLAE/Tripod authors' code);
    ``representation="sample"`` gives them a fresh sample instead (the FactorQVAE authors' evaluation code).
    Loss ``kl`` = batch mean of :func:`gaussian_kl` in nats per image, weight ``beta`` (β-VAE's β; 0 when a
    regularizer such as β-TCVAE's decomposition replaces the KL). With a per-pixel-mean reconstruction the
    model divides it by D_x (``density_terms``), which gives the β-VAE loss BCE + β·KL/D_x of the QLAE
    authors' code.
    """

    discrete = False
    distribution = "gaussian"
    density_terms = frozenset({"kl"})

    def __init__(self, n_latents: int, beta: float = 1.0, representation: str = "mean", scale: str = "softplus"):
        super().__init__(n_latents)
        self.weights = {"kl": check_weight("beta", beta)}
        if scale not in ("softplus", "logvar"):
            raise ValueError(f"scale must be one of ['softplus', 'logvar'] (got {scale!r})")
        self.scale = scale
        if representation not in ("mean", "sample"):
            raise ValueError(f"representation must be one of ['mean', 'sample'] (got {representation!r})")
        self.sampled_representation = representation == "sample"

    @property
    def in_features(self) -> int:
        return 2 * self.n_latents

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        mu, a = pre.split(self.n_latents, dim=-1)
        sigma = F.softplus(a) if self.scale == "softplus" else torch.exp(0.5 * a)
        z = mu + sigma * torch.randn_like(mu) if self.training else mu
        return LatentOutput(
            z=z, z_continuous=z, losses={"kl": gaussian_kl(mu, sigma).mean()},
            params={"mu": mu, "sigma": sigma}, sample=z if self.training else None,
        )

    def representation(self, out: LatentOutput) -> torch.Tensor:
        mu = out.params["mu"]
        if self.sampled_representation:
            return mu + out.params["sigma"] * torch.randn_like(mu)
        return mu
