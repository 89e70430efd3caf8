"""A fully connected encoder for vector observations: Cliff's synthetic-data encoder (Cliff paper App. G.1).

G.1: Linear(2, 50) + tanh, Linear(50, 100) + tanh, Linear(100, 50) + tanh, Linear(50, 2); the defaults
(``hidden=(50, 100, 50)``, ``activation="tanh"``) give exactly this for 2-D data and 2 latents (10,402 parameters).

Follows the encoder contract of :mod:`disentangle.nn.blocks` with vectors for images: the input has
``in_channels * resolution**2`` numbers per sample, given either flat ``(B, D)`` (what
:class:`~disentangle.data.synthetic.Cliff2dDataModule` yields, ``resolution = 1``) or as ``(B, C, R, R)`` (flattened).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from torch import Tensor, nn

from .blocks import check_choice, check_positive_int

__all__ = ["ACTIVATIONS", "MLPEncoder"]

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "silu": nn.SiLU}


class MLPEncoder(nn.Module):
    """Linear layers of widths ``hidden`` with ``activation`` after each, then a linear head (paper G.1).

    Args:
        in_channels, resolution: the observation has ``in_channels * resolution**2`` numbers (vectors: D and 1).
        out_features: output width (what the latent module takes).
        hidden: hidden widths (default the paper's 50, 100, 50; empty = one linear map).
        activation: ``tanh`` (paper), ``relu``, ``leaky_relu`` or ``silu``.
    """

    def __init__(self, in_channels: int, resolution: int, out_features: int,
                 hidden: Sequence[int] = (50, 100, 50), activation: str = "tanh"):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.resolution = check_positive_int("resolution", resolution)
        self.out_features = check_positive_int("out_features", out_features)
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
            raise ValueError(f"hidden must be a list of positive integers, got {hidden!r}")  # noqa: TRY004
        self.hidden = tuple(check_positive_int(f"hidden[{i}]", h) for i, h in enumerate(hidden))
        check_choice("activation", activation, tuple(ACTIVATIONS))
        self.in_features = self.in_channels * self.resolution**2
        widths = (self.in_features, *self.hidden)
        layers: list[nn.Module] = []
        for cin, cout in itertools.pairwise(widths):
            layers += [nn.Linear(cin, cout), ACTIVATIONS[activation]()]
        layers.append(nn.Linear(widths[-1], self.out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 4 and tuple(x.shape[1:]) == (self.in_channels, self.resolution, self.resolution):
            x = x.flatten(1)
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"MLPEncoder expects input of shape (B, {self.in_features}) or "
                             f"(B, {self.in_channels}, {self.resolution}, {self.resolution}), got {tuple(x.shape)}")
        return self.net(x)
