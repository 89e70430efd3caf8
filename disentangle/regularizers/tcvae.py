"""β-TCVAE's decomposition of the KL into index-code MI, total correlation and dimension-wise KL, with the
minibatch-weighted-sampling estimator (Chen et al. 2018; Tripod Eq. 6; the QLAE authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): the B x B x n_z log-density table and its log-sum-exps run in
float32 (MI, TC and DWKL are differences of nearly equal log-densities) without an island: they are elementwise
on the latent island's float32 z, mu and sigma.
"""
from __future__ import annotations

import math

import torch

from ..quantizers.base import check_weight
from ..quantizers.gaussian import gaussian_log_density
from .base import Regularizer, StepContext


def tcvae_decomposition(
    z: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, dataset_size: int
) -> dict[str, torch.Tensor]:
    """Per-sample ``mi``, ``tc``, ``dwkl`` (each (B,), nats, unweighted) of samples z_i ~ q(z|x_i) = N(mu_i, sigma_i).

    With M = batch size and N = ``dataset_size`` (QLAE authors' code; the j = i term included):
      log q(z_i|x_i)      = sum_k log N(z_ik; mu_ik, sigma_ik)
      log q(z_i)          = logsumexp_j sum_k log N(z_ik; mu_jk, sigma_jk) - log(M N)
      log prod_k q(z_ik)  = sum_k [logsumexp_j log N(z_ik; mu_jk, sigma_jk) - log(M N)]
      log p(z_i)          = sum_k log N(z_ik; 0, 1)
    mi = log q(z|x) - log q(z); tc = log q(z) - log prod_k q(z_k); dwkl = log prod_k q(z_k) - log p(z), so the
    three add up to log q(z|x) - log p(z), a one-sample estimate of KL(q(z|x) || p(z)).
    """
    n = int(dataset_size)
    if n < 1:
        raise ValueError(f"dataset_size must be >= 1 (got {dataset_size})")
    m = z.shape[0]
    # [i, j, k] = log N(z_ik; mu_jk, sigma_jk): every sample under every batch member's posterior
    pairwise = gaussian_log_density(z.unsqueeze(1), mu.unsqueeze(0), sigma.unsqueeze(0))
    log_norm = math.log(m * n)
    log_qz_x = gaussian_log_density(z, mu, sigma).sum(-1)
    log_qz = torch.logsumexp(pairwise.sum(-1), dim=1) - log_norm
    log_prod_qzk = (torch.logsumexp(pairwise, dim=1) - log_norm).sum(-1)
    log_pz = gaussian_log_density(z, 0.0, torch.ones_like(z)).sum(-1)
    return {"mi": log_qz_x - log_qz, "tc": log_qz - log_prod_qzk, "dwkl": log_prod_qzk - log_pz}


def dlib_total_correlation(z: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """disentanglement_lib's total-correlation estimate (``methods/unsupervised/vae.py: total_correlation``), the
    batch mean of log q(z_i) - sum_k log q(z_ik) with both densities estimated by a log-sum-exp over the batch and,
    as there, without the normalising constants: it is :func:`tcvae_decomposition`'s ``tc`` minus
    (n_z - 1) log(M N), the same gradient. Locatello et al.'s β-TCVAE penalty is (β - 1) times it."""
    pairwise = gaussian_log_density(z.unsqueeze(1), mu.unsqueeze(0), sigma.unsqueeze(0))  # [i, j, k]
    log_qz_product = torch.logsumexp(pairwise, dim=1).sum(-1)
    log_qz = torch.logsumexp(pairwise.sum(-1), dim=1)
    return (log_qz - log_qz_product).mean()


class LocatelloTotalCorrelation(Regularizer):
    """(β - 1)·TC on top of the Gaussian latent's own analytic KL: disentanglement_lib's ``BetaTCVAE`` objective
    (``regularizer = kl_loss + (beta - 1) * total_correlation``), which produced Locatello et al.'s β-TCVAE numbers
    that Friede et al. quote (their starred rows). Its TC is :func:`dlib_total_correlation`. With the latent's
    KL weight at 1 it has the expectation and the TC gradient of Chen et al.'s decomposition
    (:class:`DecomposedKL`, ``model=betatcvae_friede_chen``), with another variance."""

    requires_distribution = "gaussian"
    density_terms = frozenset({"tc"})

    def __init__(self, weight: float = 1.0, beta: float = 1.0):
        super().__init__(weight)
        self.beta = float(beta)
        if not self.beta >= 1.0:
            raise ValueError(f"beta must be >= 1: the penalty is (beta - 1) * TC (got {beta})")
        self.term_weights = {"tc": self.beta - 1.0}

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        latent = ctx.latent
        return {"tc": dlib_total_correlation(latent.z, latent.params["mu"], latent.params["sigma"])}


class DecomposedKL(Regularizer):
    """β-TCVAE's penalty alpha·MI + beta·TC + gamma·DWKL (batch means of :func:`tcvae_decomposition`).

    Needs a Gaussian latent (its sample, mu and sigma); N is the training set's size, which the model takes
    from the data module unless ``dataset_size`` is given. The terms are nats per image, so with the QLAE
    paper's per-pixel-mean BCE the model divides them by D_x (QLAE authors' code: L = BCE + (alpha MI +
    beta TC + gamma DWKL) / D_x). The β-TCVAE model pairs it with a Gaussian latent whose own KL weight is 0.
    """

    requires_distribution = "gaussian"
    needs_dataset_size = True
    density_terms = frozenset({"mi", "tc", "dwkl"})

    def __init__(self, weight: float = 1.0, alpha: float = 1.0, beta: float = 1.0, gamma: float = 1.0,
                 dataset_size: int | None = None):
        super().__init__(weight)
        self.term_weights = {
            "mi": check_weight("alpha", alpha),
            "tc": check_weight("beta", beta),
            "dwkl": check_weight("gamma", gamma),
        }
        if dataset_size is not None and int(dataset_size) < 1:
            raise ValueError(f"dataset_size must be >= 1 or null (got {dataset_size})")
        self.dataset_size = None if dataset_size is None else int(dataset_size)

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        latent = ctx.latent  # a Gaussian latent's z is its sample in training (mu in evaluation)
        terms = tcvae_decomposition(latent.z, latent.params["mu"], latent.params["sigma"],
                                    self.dataset_size or ctx.dataset_size)
        return {name: value.mean() for name, value in terms.items()}
