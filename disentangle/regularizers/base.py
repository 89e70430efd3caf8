"""The regularizer contract: see what you need from a training step, return named loss terms."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..quantizers.base import LatentOutput, check_weight


@dataclass
class StepContext:
    """Everything a regularizer may look at in one training step."""

    x: torch.Tensor                      # images in [0, 1]
    pre: torch.Tensor                    # raw encoder output
    latent: LatentOutput                 # what the latent module returned
    logits: torch.Tensor                 # decoder output at latent.z
    activations: dict[str, torch.Tensor] = field(default_factory=dict)  # decoder activations at latent.z
    decoder: Callable | None = None      # the decoder module (for finite-difference penalties)


class Regularizer(nn.Module):
    """Base class. ``weight`` scales every term it returns; a weight of 0 switches it off entirely."""

    #: decoder activations this regularizer needs from the main forward pass
    needs_activations: tuple[str, ...] = ()

    def __init__(self, weight: float):
        super().__init__()
        self.weight = check_weight(f"{type(self).__name__}.weight", weight)

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:  # pragma: no cover - interface
        raise NotImplementedError


def batch_std(z: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Population std over the batch plus eps, with gradients (Tripod authors' code, spec §3.2)."""
    return z.std(0, unbiased=False) + eps
