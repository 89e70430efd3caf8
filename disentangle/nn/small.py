"""A small conv encoder/decoder for CPU runs and tests (not from any paper; same contract as the paper nets).

Encoder: ``n = log2(R/4)`` stride-2 4×4 convs (each → optional per-sample GroupNorm → activation) down to 4×4,
flatten, Linear → ``hidden`` → activation → Linear → ``out_features``.
Decoder: conditioning MLP ``in_features → hidden → hidden`` (``"cond"``), Linear to ``C×4×4``, then ``n``
stride-2 4×4 transposed convs; the last one produces the logits directly, the others' outputs are ``"block0"``,
``"block1"``, ``"block2"`` (8×8, 16×16, 32×32 at resolution 64; fewer blocks at 32 and 16).

Channel widths double with every down-sampling stage: ``width × (1, 2, 4, 8)`` at resolution 64 (input side
first; default width 8 → 8, 16, 32, 64 channels and a 64×4×4 = 1024-d bottleneck), taken from the end nearest the
4×4 bottleneck for fewer stages (R = 32: ``(2, 4, 8)``, R = 16: ``(4, 8)``) and padded with ``width`` for more.
Why narrow at high resolution: on a CPU the high-resolution layers (the first convs and the last transposed convs)
dominate the cost, while the deep low-resolution layers are cheap. With the defaults, one forward+backward of
encoder+decoder at batch 64 takes ≈ 50 ms at 64×64 and ≈ 22 ms at 32×32 on one CPU thread; on a toy 64×64
task this reached a given reconstruction PSNR sooner in wall-clock time than width 32 (4× the channels).
Stride-2 4×4 (transposed) convs measured faster on CPU than pixel-(un)shuffle or nearest+3×3 alternatives.

The default activation is SiLU rather than ReLU because a Hessian penalty needs non-zero second derivatives:
a ReLU network is piecewise linear in z, so its Hessian vanishes almost everywhere.
"""

from __future__ import annotations

import itertools
import math

from torch import Tensor, nn

from .blocks import (
    BaseDecoder,
    BaseEncoder,
    check_bool,
    check_choice,
    check_positive_int,
    decoder_activation_names,
    num_stages,
    output_norm,
)

__all__ = ["SmallDecoder", "SmallEncoder"]

SUPPORTED_RESOLUTIONS = (16, 32, 64, 128, 256)
ACTIVATIONS = {"silu": nn.SiLU, "relu": nn.ReLU, "gelu": lambda: nn.GELU(approximate="tanh")}
NORMS = ("none", "group")
GROUPS = 8  # GroupNorm groups when norm="group" (fewer if the width is not a multiple); per sample


def stage_widths(stages: int, width: int) -> list[int]:
    """Encoder stage widths, input side first: ``width·(…, 1, 1, 2, 4, 8)`` truncated/padded to ``stages``."""
    multipliers = [1] * max(stages - 4, 0) + [1, 2, 4, 8]
    return [width * m for m in multipliers[len(multipliers) - stages :]]


def make_norm(norm: str, channels: int) -> nn.Module:
    if norm == "none":
        return nn.Identity()
    return nn.GroupNorm(math.gcd(GROUPS, channels), channels)  # gcd: a valid group count for any width


def check_options(width: int, hidden: int, norm: str, activation: str) -> tuple[int, int]:
    width = check_positive_int("width", width)
    hidden = check_positive_int("hidden", hidden)
    check_choice("norm", norm, NORMS)
    check_choice("activation", activation, tuple(ACTIVATIONS))
    return width, hidden


class SmallEncoder(BaseEncoder):
    """Small stride-2 conv encoder (see module doc).

    Args:
        in_channels: image channels.
        resolution: a power of two in 16..256.
        out_features: output width.
        width: channel count of the highest-resolution stage, doubled per stage (default 8 → 8, 16, 32, 64 at
            resolution 64).
        hidden: MLP width (default 256).
        norm: ``"none"`` (default) or ``"group"`` (GroupNorm with gcd(8, C) groups, per sample).
        activation: ``"silu"`` (default), ``"relu"`` or ``"gelu"``.
    """

    def __init__(
        self,
        in_channels: int,
        resolution: int,
        out_features: int,
        width: int = 8,
        hidden: int = 256,
        norm: str = "none",
        activation: str = "silu",
    ):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_features = check_positive_int("out_features", out_features)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "SmallEncoder")
        self.resolution = int(resolution)
        width, hidden = check_options(width, hidden, norm, activation)
        act = ACTIVATIONS[activation]

        layers: list[nn.Module] = []
        cin = self.in_channels
        for cout in stage_widths(stages, width):
            layers += [nn.Conv2d(cin, cout, 4, 2, 1), make_norm(norm, cout), act()]
            cin = cout
        self.convs = nn.Sequential(*layers)
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(cin * 16, hidden), act())
        self.head = nn.Linear(hidden, self.out_features)

    def forward_features(self, x: Tensor) -> Tensor:
        """The ``hidden``-d features before the head."""
        self._check_input(x)
        return self.mlp(self.convs(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.forward_features(x))


class SmallDecoder(BaseDecoder):
    """Small transposed-conv decoder (see module doc), mirror of :class:`SmallEncoder`.

    Activations: ``"cond"`` (B, hidden); ``"block0"`` (4·width)×8×8, ``"block1"`` (2·width)×16×16, ``"block2"``
    width×32×32 at resolution 64 (default width 8: 32×8×8, 16×16×16, 8×32×32); ``"logits"``.

    Args:
        in_features: latent size.
        out_channels: image channels.
        resolution: a power of two in 16..256.
        width: channel count of the highest-resolution stage (default 8; see :class:`SmallEncoder`).
        hidden: conditioning MLP width (default 256).
        norm: ``"none"`` (default) or ``"group"`` (GroupNorm with gcd(8, C) groups, per sample).
        activation: ``"silu"`` (default), ``"relu"`` or ``"gelu"``.
        normalize_outputs: affine-free instance norm on every ``block*`` output (naive Tripod).
    """

    def __init__(
        self,
        in_features: int,
        out_channels: int,
        resolution: int,
        width: int = 8,
        hidden: int = 256,
        norm: str = "none",
        activation: str = "silu",
        normalize_outputs: bool = False,
    ):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "SmallDecoder")
        self.resolution = int(resolution)
        width, hidden = check_options(width, hidden, norm, activation)
        act = ACTIVATIONS[activation]

        widths = stage_widths(stages, width)[::-1]  # bottleneck side first
        self.cond = nn.Sequential(
            nn.Linear(self.in_features, hidden), act(), nn.Linear(hidden, hidden), act()
        )
        self.stem = nn.Sequential(
            nn.Linear(hidden, widths[0] * 16), act(), nn.Unflatten(1, (widths[0], 4, 4))
        )
        normalize = check_bool("normalize_outputs", normalize_outputs)
        self.ups = nn.ModuleList(
            nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1), make_norm(norm, cout), act(),
                          output_norm(cout, normalize))
            for cin, cout in itertools.pairwise(widths)
        )
        self.out_conv = nn.ConvTranspose2d(widths[-1], self.out_channels, 4, 2, 1)
        self.hessian_layers, self.activation_names = decoder_activation_names(stages)

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        c = self.cond(z)
        activations = {"cond": c}
        x = self.stem(c)
        for index, up in enumerate(self.ups):
            if until and until <= activations.keys():
                return None, activations
            x = up(x)
            name = f"block{index}"
            if name in self.activation_names:
                activations[name] = x
        if until and until <= activations.keys():
            return None, activations
        return self.out_conv(x), activations
