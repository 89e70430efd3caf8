"""Latent quantization with learnable scalar codebooks (QLAE; Hsu et al. 2023, eqs. 4–5, Alg. 1).

QLAE paper §3 (per-dimension codebooks) and §5, Table 2 ("w/ global codebook": one codebook shared by all
dimensions).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32 (``LatentModel.run_latent``):
nearest-value search, the quantize and commit distances, and codebook values that bf16 would round off their code.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import LatentModule, LatentOutput, check_weight, straight_through


class LatentQuantizer(LatentModule):
    """Nearest-value quantization of each latent dimension to its own scalar codebook.

    * codebook ``values``: (n_latents, n_values), or (1, n_values) with ``shared_codebook=True``
      (the "global codebook" ablation), initialised to linspace(init_low, init_high, n_values), or with
      ``init="normal"`` to N(0, 1) draws (the FactorQVAE paper's QLAE baseline, its authors' code).
    * forward value = nearest codebook value (first index on ties); gradient is straight-through to
      the encoder (``straight_through``), so the codebook gets no gradient through z.
    * ``quantize`` = mean_j (sg(z_c) - z_q)^2 moves only the codebook; ``commit`` = mean_j (z_c - sg(z_q))^2
      moves only the encoder. Means over n_z follow the authors' code (Eq. 5 sums), which is what
      the weights 0.01 / 0.01 (paper Table 8) were tuned with.
    """

    discrete = True
    has_prior = True  # uniform over the n_values^{n_z} grid of codebook values (QLInfoWGAN-GP; QLAE Alg. 3)

    def __init__(
        self,
        n_latents: int,
        n_values: int = 10,
        init_low: float = -0.5,
        init_high: float = 0.5,
        shared_codebook: bool = False,
        quantize_weight: float = 0.01,
        commit_weight: float = 0.01,
        init: str = "linspace",
    ):
        super().__init__(n_latents)
        if int(n_values) < 2:
            raise ValueError(f"n_values must be >= 2 (got {n_values})")
        if not init_low < init_high:
            raise ValueError(f"init_low must be < init_high (got {init_low}, {init_high})")
        self.n_values = int(n_values)
        self.shared_codebook = bool(shared_codebook)
        rows = 1 if self.shared_codebook else self.n_latents
        if init == "linspace":
            values = torch.linspace(float(init_low), float(init_high), self.n_values).repeat(rows, 1)
        elif init == "normal":
            values = torch.randn(rows, self.n_values)
        else:
            raise ValueError(f"init must be one of ['linspace', 'normal'] (got {init!r})")
        self.values = nn.Parameter(values)
        self.weights = {
            "quantize": check_weight("quantize_weight", quantize_weight),
            "commit": check_weight("commit_weight", commit_weight),
        }

    def codebook(self) -> torch.Tensor:
        """(n_latents, n_values) view of the codebook, expanded when it is shared."""
        return self.values.expand(self.n_latents, -1)

    def sample_prior(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Each dimension j independently takes a uniformly chosen value of its codebook V_j (QLAE Alg. 3:
        z_fake ~ Z); a gather, so V receives gradients through the sample (authors' code). Drawn on the
        codebook's device."""
        book = self.codebook()  # (n_z, n_v), differentiable in V
        indices = torch.randint(0, self.n_values, (n, self.n_latents), device=book.device)
        return torch.gather(book.unsqueeze(0).expand(n, -1, -1), 2, indices.unsqueeze(-1)).squeeze(-1)

    def quantize(self, z_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Nearest codebook value per dimension: returns (z_q, indices); z_q is differentiable in the codebook."""
        book = self.codebook()
        indices = (z_c.detach().unsqueeze(-1) - book).abs().argmin(-1)  # (B, n_z)
        z_q = torch.gather(book.unsqueeze(0).expand(z_c.shape[0], -1, -1), 2, indices.unsqueeze(-1)).squeeze(-1)
        return z_q, indices

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        z_c = pre
        z_q, indices = self.quantize(z_c)
        z = straight_through(z_c, z_q)
        losses = {
            "quantize": (z_c.detach() - z_q).pow(2).mean(),
            "commit": (z_c - z_q.detach()).pow(2).mean(),
        }
        return LatentOutput(z=z, z_continuous=z_c, indices=indices, losses=losses)
