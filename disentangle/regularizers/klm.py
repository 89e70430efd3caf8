"""Kernel-based latent multi-information (Tripod §3.2, eqs. 11–14 and Alg. 1 line 13).

Mixed precision (:mod:`disentangle.foundation.precision`): the KDE runs in float32 (its log-sum-exps compare
kernels of nearly equal latents) without an island: it is elementwise on the latent island's float32 z, and so
is its bandwidth (``batch_std``; from ``pre``, the encoder's bf16 output, the bandwidth is bf16-rounded, which
moved KLM no more than the encoder's own rounding does).
"""
from __future__ import annotations

import math

import torch

from ..quantizers.gaussian import gaussian_log_density
from .base import Regularizer, StepContext, batch_std

BANDWIDTH_SOURCES = ("continuous", "pre")


def kernel_multi_information(z: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Per-sample KDE estimate of log q(z) - sum_j log q(z_j) on a minibatch; returns shape (B,).

    Joint: Gaussian kernel with diagonal Silverman bandwidth sigma * (4 / ((n_z + 2) B))^(1/(n_z+4)) (eq. 12).
    Marginals: bandwidth sigma_j itself, no Silverman factor (eq. 13; the asymmetry is the paper's).
    Kernel centres are the batch itself, self-term included; no dataset-size term (eq. 14).
    """
    b, n_z = z.shape
    silverman = (4.0 / ((n_z + 2) * b)) ** (1.0 / (n_z + 4))
    diff = z.unsqueeze(1) - z.unsqueeze(0)  # (B_eval, B_centre, n_z)
    log_b = math.log(b)
    log_joint = torch.logsumexp(gaussian_log_density(diff, 0.0, sigma * silverman).sum(-1), dim=1) - log_b
    log_marginals = torch.logsumexp(gaussian_log_density(diff, 0.0, sigma), dim=1) - log_b  # (B, n_z)
    return log_joint - log_marginals.sum(-1)


class KernelMultiInformation(Regularizer):
    """Tripod's KLM regularizer on the latent fed to the decoder.

    bandwidth_from: "continuous" (default) takes sigma from the continuous latents (tanh output for
    Tripod) as the authors' code does; "pre" takes it from the raw encoder output, as Algorithm 1 is
    written (Tripod Alg. 1, line 7). Either way sigma is a population std + 1e-6 with gradients.
    bandwidth: a fixed sigma for every dimension instead (naive Tripod's "fixed smoothing parameters",
    Tripod §4.1; the paper does not give the value); None = the batch std above.
    """

    def __init__(self, weight: float = 1e-4, bandwidth_from: str = "continuous", bandwidth: float | None = None):
        super().__init__(weight)
        if bandwidth_from not in BANDWIDTH_SOURCES:
            raise ValueError(f"bandwidth_from must be one of {list(BANDWIDTH_SOURCES)} (got {bandwidth_from!r})")
        if bandwidth is not None and not float(bandwidth) > 0:
            raise ValueError(f"bandwidth must be > 0 or null (got {bandwidth})")
        self.bandwidth_from = bandwidth_from
        self.bandwidth = None if bandwidth is None else float(bandwidth)

    def bind(self, model) -> None:
        super().bind(model)
        spec = model.latent_spec
        if self.bandwidth_from == "pre" and spec.in_features != spec.out_features:
            raise ValueError(
                f"KLM bandwidth_from='pre' needs the encoder output to have the latent's width; "
                f"{spec.module} maps {spec.in_features} outputs to "
                f"{spec.out_features} latents: use bandwidth_from=continuous"
            )

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        z = ctx.latent.z
        if self.bandwidth is not None:
            sigma = z.new_full((z.shape[1],), self.bandwidth)
        else:
            sigma = batch_std(ctx.latent.z_continuous if self.bandwidth_from == "continuous" else ctx.pre)
        return {"klm": kernel_multi_information(z, sigma).mean()}
