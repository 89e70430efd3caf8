"""What every latent module returns, so the model's training step is written once."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class LatentOutput:
    """Result of a latent module.

    z:             the latent fed to the decoder (quantized value for quantizers, straight-through).
    z_continuous:  the continuous latent before rounding (raw encoder output for QLAE, tanh output for
                   Tripod); regularizers that need a bandwidth take its batch std from here.
    indices:       integer code per latent dimension, or None for continuous latents.
    losses:        unweighted auxiliary loss terms by name; the module's ``weights`` say how they count.
    """

    z: torch.Tensor
    z_continuous: torch.Tensor
    indices: torch.Tensor | None = None
    losses: dict[str, torch.Tensor] = field(default_factory=dict)


class LatentModule(nn.Module):
    """Base class: maps the encoder's pre-latent (B, in_features) to a :class:`LatentOutput`.

    ``discrete`` tells the metrics whether the representation is treated as discrete (plug-in mutual
    information) or continuous (KSG). ``weights`` maps each auxiliary loss name to its weight.
    """

    discrete: bool = False

    def __init__(self, n_latents: int):
        super().__init__()
        if int(n_latents) < 1:
            raise ValueError(f"n_latents must be >= 1 (got {n_latents})")
        self.n_latents = int(n_latents)
        self.weights: dict[str, float] = {}

    @property
    def in_features(self) -> int:
        """How many numbers the encoder must output for this latent module."""
        return self.n_latents

    def representation(self, out: LatentOutput) -> torch.Tensor:
        """The latent used for evaluation (metrics, interventions)."""
        return out.z


def straight_through(continuous: torch.Tensor, quantized: torch.Tensor) -> torch.Tensor:
    """Forward value exactly ``quantized``, gradient copied unchanged to ``continuous`` (Bengio et al. 2013;
    QLAE Alg. 1 line 6). Written as q.detach() + (c - c.detach()) so the value is bit-exact, which
    c + (q - c).detach() is not in floating point; ``quantized`` gets no gradient this way."""
    return quantized.detach() + (continuous - continuous.detach())


def check_weight(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be a non-negative number (got {value})")
    return value
