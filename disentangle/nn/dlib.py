"""disentanglement_lib's convolutional encoder and deconvolutional decoder, as Friede et al. use them
(Friede et al. App. 5, Table 2; Locatello et al. 2019). 64x64 images only, ReLU everywhere, PyTorch default
init (the model's ``init`` re-initialises: Haiku's for Friede et al.'s code, Glorot's for disentanglement_lib;
nn.init).

Encoder: Conv(32, 4x4, s2, p1) → Conv(32, 4x4, s2, p1) → Conv(64, 2x2, s2) → Conv(64, 2x2, s2) → flatten (1024)
→ FC(256) → FC(out_features): 2·n for a Gaussian (μ, log σ²), n·m logits for the categorical latent.
Decoder: FC(256) → FC(1024) (``"cond"``) → 64x4x4 → DeConv(64, 4x4, s2) (``"block0"``, 8x8) → DeConv(32)
(``"block1"``, 16x16) → DeConv(32) (``"block2"``, 32x32) → DeConv(C) → Bernoulli logits.
"""
from __future__ import annotations

import itertools

from torch import Tensor, nn

from .blocks import (
    BaseDecoder,
    BaseEncoder,
    check_bool,
    check_positive_int,
    decoder_activation_names,
    output_norm,
)

__all__ = ["DlibDecoder", "DlibEncoder"]

RESOLUTION = 64


def _check_resolution(resolution: object, arch: str) -> int:
    if check_positive_int("resolution", resolution) != RESOLUTION:
        raise ValueError(f"{arch} is disentanglement_lib's 64x64 network (got resolution {resolution})")
    return RESOLUTION


class DlibEncoder(BaseEncoder):
    """See the module doc."""

    def __init__(self, in_channels: int, resolution: int, out_features: int):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_features = check_positive_int("out_features", out_features)
        self.resolution = _check_resolution(resolution, "DlibEncoder")
        self.trunk = nn.Sequential(
            nn.Conv2d(self.in_channels, 32, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 32, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 64, 2, 2), nn.ReLU(),
            nn.Conv2d(64, 64, 2, 2), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 4 * 4, 256), nn.ReLU(),
        )
        self.head = nn.Linear(256, self.out_features)

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        return self.head(self.trunk(x))


class DlibDecoder(BaseDecoder):
    """See the module doc. ``normalize_outputs``: affine-free instance norm on the ``block*`` outputs."""

    def __init__(self, in_features: int, out_channels: int, resolution: int, normalize_outputs: bool = False):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        self.resolution = _check_resolution(resolution, "DlibDecoder")
        normalize = check_bool("normalize_outputs", normalize_outputs)
        self.mlp = nn.Sequential(nn.Linear(self.in_features, 256), nn.ReLU(), nn.Linear(256, 64 * 4 * 4), nn.ReLU())
        widths = (64, 64, 32, 32)
        self.ups = nn.ModuleList(
            nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1), nn.ReLU(), output_norm(cout, normalize))
            for cin, cout in itertools.pairwise(widths)
        )
        self.out = nn.ConvTranspose2d(widths[-1], self.out_channels, 4, 2, 1)
        self.hessian_layers, self.activation_names = decoder_activation_names(4)

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        cond = self.mlp(z)
        activations = {"cond": cond}
        x = cond.view(z.shape[0], 64, 4, 4)
        for index, up in enumerate(self.ups):
            if until and until <= activations.keys():
                return None, activations
            x = up(x)
            activations[f"block{index}"] = x
        if until and until <= activations.keys():
            return None, activations
        return self.out(x), activations
