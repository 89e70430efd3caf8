"""Vector quantization of VQ-VAE as the QLAE paper runs it (van den Oord et al. 2017; QLAE paper §5,
Fig. 2a; details from the authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32
(``LatentModel.run_latent``): code distances (a bf16 tie picks the wrong code) and the codebook/commitment
terms.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import LatentModule, LatentOutput, check_int, check_weight, straight_through


class VectorQuantizer(LatentModule):
    """n_latents code vectors per image, each replaced by its nearest row of one shared codebook.

    * codebook: (codebook_size, code_dim) = 512 × 64, initialised U(±sqrt(3 / code_dim)); learned by gradient
      (no EMA), never weight-decayed (the model exempts the latent module).
    * the encoder outputs n_latents · code_dim numbers; each code_dim-chunk goes to the row at the least
      squared Euclidean distance (first index on ties); the decoder receives the concatenated rows,
      straight-through to the encoder.
    * ``quantize`` = mean over all elements of (sg(z_c) - z_q)^2 (moves only the codebook), weight 1;
      ``commit`` = mean of (z_c - sg(z_q))^2 (moves only the encoder), weight 0.25.
    * representation for the metrics: the n_latents integer code indices, categorical (QLAE paper §5), so
      InfoE's ``auto`` features are one-hot (as in the authors' code); interventions decode the codebook rows
      of the codes in use.
    """

    discrete = True
    categorical = True

    def __init__(
        self,
        n_latents: int,
        codebook_size: int = 512,
        code_dim: int = 64,
        quantize_weight: float = 1.0,
        commit_weight: float = 0.25,
        init_bound: float | None = None,
    ):
        super().__init__(n_latents)
        self.codebook_size = check_int("codebook_size", codebook_size, 2)
        self.code_dim = check_int("code_dim", code_dim, 1)
        bound = math.sqrt(3.0 / self.code_dim) if init_bound is None else float(init_bound)
        if not bound > 0:
            raise ValueError(f"init_bound must be > 0 (got {init_bound})")
        self.codebook = nn.Parameter(torch.empty(self.codebook_size, self.code_dim).uniform_(-bound, bound))
        self.weights = {
            "quantize": check_weight("quantize_weight", quantize_weight),
            "commit": check_weight("commit_weight", commit_weight),
        }

    @property
    def in_features(self) -> int:
        return self.n_latents * self.code_dim

    @property
    def out_features(self) -> int:
        return self.n_latents * self.code_dim

    def nearest(self, vectors: torch.Tensor) -> torch.Tensor:
        """Index of the nearest codebook row for each of (..., code_dim) vectors (squared distance)."""
        flat = vectors.detach().reshape(-1, self.code_dim)
        book = self.codebook.detach()
        # ||v||^2 is the same for every row, so argmin(||e||^2 - 2 v.e) is the nearest row
        scores = book.pow(2).sum(-1) - 2 * flat @ book.t()
        return scores.argmin(-1).reshape(vectors.shape[:-1])

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        z_c = pre.reshape(pre.shape[0], self.n_latents, self.code_dim)
        indices = self.nearest(z_c)
        # F.embedding, not codebook[indices]: its CPU backward is deterministic, the indexing backward is not
        z_q = F.embedding(indices, self.codebook)  # (B, n_latents, code_dim), differentiable in the codebook
        losses = {
            "quantize": (z_c.detach() - z_q).pow(2).mean(),
            "commit": (z_c - z_q.detach()).pow(2).mean(),
        }
        z = straight_through(z_c, z_q).reshape(pre.shape[0], -1)
        return LatentOutput(z=z, z_continuous=pre, indices=indices, losses=losses)

    def representation(self, out: LatentOutput) -> torch.Tensor:
        return out.indices

    def decoder_input(self, representation: torch.Tensor) -> torch.Tensor:
        indices = representation.round().long().clamp(0, self.codebook_size - 1)
        return F.embedding(indices, self.codebook).reshape(representation.shape[0], -1)
