"""Gumbel-softmax quantization over one global codebook: QVAE/FactorQVAE and dVAE/FactordVAE (Baykal et al.
§4, Eqs. 3–4, and App. A).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32
(``LatentModel.run_latent``): the Gumbel-softmax, its log-probabilities and the KL to the uniform prior.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import LatentModule, LatentOutput, check_int, check_weight

LOGIT_SOURCES = ("distance", "encoder")
DISTANCES = ("squared", "absolute")


def relaxed_one_hot(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None,
                    noise_scale: float = 1.0) -> torch.Tensor:
    """A Gumbel-softmax (relaxed one-hot categorical) sample: softmax((logits + noise_scale · g) / temperature) with
    g ~ Gumbel(0, 1) i.i.d. over the last axis (Jang et al. 2017; FactorQVAE §4; soft, no straight-through, as
    in the authors' code). ``noise_scale`` is Friede et al.'s annealed Gumbel scale (App. 5); 0 gives
    softmax(logits / t)."""
    if noise_scale == 0:
        return torch.softmax(logits / temperature, dim=-1)
    u = torch.rand(logits.shape, device=logits.device, dtype=logits.dtype, generator=generator)
    gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)))
    return torch.softmax((logits + noise_scale * gumbel) / temperature, dim=-1)


def categorical_kl_uniform(logits: torch.Tensor) -> torch.Tensor:
    """KL(softmax(logits) || Uniform(K)) over the last axis, in nats: sum_k q_k (log q_k + log K) (FactorQVAE
    authors' code, at temperature 1); 0 for uniform logits, log K for a one-hot distribution."""
    log_q = torch.log_softmax(logits, dim=-1)
    return (log_q.exp() * (log_q + math.log(logits.shape[-1]))).sum(-1)


class GumbelQuantizer(LatentModule):
    """Each of n_latents latents is a categorical over the K rows of one global codebook M (K x code_dim).

    * ``logits="distance"`` (QVAE, FactorQVAE): the encoder outputs n_latents·code_dim numbers z_e and
      logits = -distance(z_e, M_k); ``distance="squared"`` (authors' code, default) or ``"absolute"``
      (the paper's eq. 3: |z_e - M_k|, the Euclidean norm for code_dim > 1). ``logits="encoder"`` (dVAE,
      FactordVAE): the encoder outputs the n_latents·K logits directly.
    * training: a soft Gumbel-softmax sample y (B, n_latents, K) at the temperature of the current step, and the
      decoder receives y M (a convex combination of codebook rows); evaluation: the argmax code's row.
    * temperature = initial_temperature · exp(-temperature_decay · step), set by :meth:`schedule` from the
      global step (FactorQVAE App. A: exp(-1e-5 t)).
    * loss ``kl`` = mean over batch and latents of KL(softmax(logits) || U(K)) at temperature 1, weight ``beta``
      (authors' code; a mean over latents, not a density in nats per image).
    * the codebook is learned through the decoder path (no codebook/commit loss), initialised N(0, 1) (the
      authors' ``nn.Embedding`` default).
    * ``sample`` (for a TC discriminator): the relaxed one-hot codes, flattened to n_latents·K
      (authors' code).
    * representation for the metrics: the integer code per latent, categorical (InfoE one-hot features).
    ``code_dim > 1`` is the VQ ablation of the paper's Table 2 (FactorVQVAE).
    """

    discrete = True
    categorical = True
    distribution = "categorical"

    def __init__(
        self,
        n_latents: int,
        codebook_size: int = 64,
        code_dim: int = 1,
        logits: str = "distance",
        distance: str = "squared",
        beta: float = 1.0,
        initial_temperature: float = 1.0,
        temperature_decay: float = 1e-5,
    ):
        super().__init__(n_latents)
        self.codebook_size = check_int("codebook_size", codebook_size, 2)
        self.code_dim = check_int("code_dim", code_dim, 1)
        if logits not in LOGIT_SOURCES:
            raise ValueError(f"logits must be one of {list(LOGIT_SOURCES)} (got {logits!r})")
        if distance not in DISTANCES:
            raise ValueError(f"distance must be one of {list(DISTANCES)} (got {distance!r})")
        if not float(initial_temperature) > 0:
            raise ValueError(f"initial_temperature must be > 0 (got {initial_temperature})")
        self.logits_from, self.distance = logits, distance
        self.initial_temperature = float(initial_temperature)
        self.temperature_decay = check_weight("temperature_decay", temperature_decay)
        self.temperature = self.initial_temperature
        self.codebook = nn.Parameter(torch.randn(self.codebook_size, self.code_dim))
        self.weights = {"kl": check_weight("beta", beta)}

    @property
    def in_features(self) -> int:
        per_latent = self.codebook_size if self.logits_from == "encoder" else self.code_dim
        return self.n_latents * per_latent

    @property
    def out_features(self) -> int:
        return self.n_latents * self.code_dim

    @property
    def sample_features(self) -> int:
        return self.n_latents * self.codebook_size

    def schedule(self, step: int) -> None:
        self.temperature = self.initial_temperature * math.exp(-self.temperature_decay * step)

    def logits(self, pre: torch.Tensor) -> torch.Tensor:
        """(B, n_latents, K) logits of q(z|x)."""
        if self.logits_from == "encoder":
            return pre.reshape(pre.shape[0], self.n_latents, self.codebook_size)
        z_e = pre.reshape(pre.shape[0], self.n_latents, self.code_dim)
        squared = (z_e.unsqueeze(2) - self.codebook).pow(2).sum(-1)  # (B, n_latents, K)
        return -(squared if self.distance == "squared" else squared.clamp_min(1e-12).sqrt())

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        logits = self.logits(pre)
        indices = logits.detach().argmax(-1)
        kl = categorical_kl_uniform(logits).mean()
        if self.training:
            codes = relaxed_one_hot(logits, self.temperature)
            z = (codes @ self.codebook).reshape(pre.shape[0], -1)
            sample = codes.reshape(pre.shape[0], -1)
        else:
            z, sample = F.embedding(indices, self.codebook).reshape(pre.shape[0], -1), None
        return LatentOutput(z=z, z_continuous=z, indices=indices, losses={"kl": kl},
                            params={"logits": logits}, sample=sample)

    def representation(self, out: LatentOutput) -> torch.Tensor:
        return out.indices

    def order_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Scalar codebooks (code_dim 1) are ordered by value, so an intervention sweeps from min to max like the
        paper's traversals (FactorQVAE Figs. 2–4); vector codebooks have no order."""
        if self.code_dim != 1:
            return codes
        values = self.codebook.detach()[codes.long().clamp(0, self.codebook_size - 1), 0]
        return codes[values.argsort()]

    def decoder_input(self, representation: torch.Tensor) -> torch.Tensor:
        indices = representation.round().long().clamp(0, self.codebook_size - 1)
        return F.embedding(indices, self.codebook).reshape(representation.shape[0], -1)
