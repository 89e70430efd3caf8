"""FactorQVAE's DALL-E-style residual encoder and decoder (Baykal et al. App. A.3; the authors' code,
which fills in what the paper's Table 4 leaves out: the n/4 bottleneck, the 1x1 shortcut and the 1/36 gain).

Encoder: Conv3x3(C→128) → 2 EncoderBlocks(128) → MaxPool → 2 EncoderBlocks(→256) → MaxPool → 2 EncoderBlocks(→512)
→ flatten (512·(R/4)²) → ReLU → Linear(128) → ReLU → Linear(128) → ReLU → Linear(out_features). Images enter
centred to [-0.5, 0.5].
Decoder: Linear(in_features → 64·(R/4)²) (``"cond"``) → 2 DecoderBlocks(→512) → Upsample ×2 (``"block0"``) →
2 DecoderBlocks(→256) → Upsample ×2 → 2 DecoderBlocks(→128) → ReLU → Conv1x1(→C). No normalisation layers.
Every conv/linear weight N(0, 0.02), biases 0 (authors' code). With ``reconstruction: mse`` the output is the
centred image (the authors' setting); with BCE it is read as logits.
"""
from __future__ import annotations

from torch import Tensor, nn

from .blocks import BaseDecoder, BaseEncoder, check_bool, check_positive_int, output_norm
from .init import initialize

__all__ = ["DalleDecoder", "DalleEncoder"]

GROUP_WIDTHS = (1, 2, 4)  # x channels, per group


class ResBlock(nn.Module):
    """id(x) + gain · res(x); id = identity or a 1x1 conv when the width changes; res = four ReLU → conv layers with
    an n_out/4 bottleneck: kernels (3, 3, 3, 1) in the encoder, (1, 3, 3, 3) in the decoder."""

    def __init__(self, n_in: int, n_out: int, kernels: tuple[int, ...], gain: float):
        super().__init__()
        hidden = max(n_out // 4, 1)
        widths = [n_in, hidden, hidden, hidden, n_out]
        layers: list[nn.Module] = []
        for k, cin, cout in zip(kernels, widths[:-1], widths[1:]):
            layers += [nn.ReLU(), nn.Conv2d(cin, cout, k, padding=k // 2)]
        self.res = nn.Sequential(*layers)
        self.shortcut = nn.Identity() if n_in == n_out else nn.Conv2d(n_in, n_out, 1)
        self.gain = gain

    def forward(self, x: Tensor) -> Tensor:
        return self.shortcut(x) + self.gain * self.res(x)


def _check_resolution(resolution: object, arch: str) -> int:
    resolution = check_positive_int("resolution", resolution)
    if resolution % 4 or resolution < 8:
        raise ValueError(f"{arch} needs a resolution divisible by 4 and >= 8 (got {resolution})")
    return resolution


class DalleEncoder(BaseEncoder):
    """See the module doc. ``channels`` (n = 128), ``hidden`` (m = 128), ``blocks_per_group`` (2)."""

    def __init__(self, in_channels: int, resolution: int, out_features: int, channels: int = 128, hidden: int = 128,
                 blocks_per_group: int = 2):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_features = check_positive_int("out_features", out_features)
        self.resolution = _check_resolution(resolution, "DalleEncoder")
        channels = check_positive_int("channels", channels)
        hidden = check_positive_int("hidden", hidden)
        blocks = check_positive_int("blocks_per_group", blocks_per_group)
        gain = 1.0 / (len(GROUP_WIDTHS) * blocks) ** 2
        layers: list[nn.Module] = [nn.Conv2d(self.in_channels, channels, 3, padding=1)]
        cin = channels
        for index, mult in enumerate(GROUP_WIDTHS):
            for _ in range(blocks):
                layers.append(ResBlock(cin, channels * mult, (3, 3, 3, 1), gain))
                cin = channels * mult
            if index < len(GROUP_WIDTHS) - 1:
                layers.append(nn.MaxPool2d(2))
        self.trunk = nn.Sequential(*layers)
        flat = cin * (self.resolution // 4) ** 2
        self.dense = nn.Sequential(nn.ReLU(), nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, self.out_features)
        initialize(self, "normal_0.02")  # the authors' weights_init

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        return self.head(self.dense(self.trunk(x - 0.5).flatten(1)))


class DalleDecoder(BaseDecoder):
    """See the module doc. ``seed_channels``: channels of the (R/4)² seed tensor (64, authors' code; the paper's
    App. A.3 writes 16). Activations: ``"cond"`` (the seed, flattened), ``"block0"`` (512 x R/2 x R/2),
    ``"logits"``; ``hessian_layers = ("cond", "block0")`` (the full-resolution stages are not regularized)."""

    def __init__(self, in_features: int, out_channels: int, resolution: int, channels: int = 128,
                 seed_channels: int = 64, blocks_per_group: int = 2, normalize_outputs: bool = False):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        self.resolution = _check_resolution(resolution, "DalleDecoder")
        channels = check_positive_int("channels", channels)
        self.seed_channels = check_positive_int("seed_channels", seed_channels)
        blocks = check_positive_int("blocks_per_group", blocks_per_group)
        gain = 1.0 / (len(GROUP_WIDTHS) * blocks) ** 2
        self.seed_size = self.resolution // 4
        self.dense = nn.Linear(self.in_features, self.seed_channels * self.seed_size**2)
        self.groups = nn.ModuleList()
        cin = self.seed_channels
        for index, mult in enumerate(reversed(GROUP_WIDTHS)):
            group: list[nn.Module] = []
            for _ in range(blocks):
                group.append(ResBlock(cin, channels * mult, (1, 3, 3, 3), gain))
                cin = channels * mult
            if index < len(GROUP_WIDTHS) - 1:
                group.append(nn.Upsample(scale_factor=2, mode="nearest"))
            self.groups.append(nn.Sequential(*group))
        self.block0_norm = output_norm(channels * GROUP_WIDTHS[-1], check_bool("normalize_outputs", normalize_outputs))
        self.out = nn.Sequential(nn.ReLU(), nn.Conv2d(cin, self.out_channels, 1))
        self.hessian_layers = ("cond", "block0")
        self.activation_names = ("cond", "block0", "logits")
        initialize(self, "normal_0.02")  # the authors' weights_init

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        seed = self.dense(z)
        activations = {"cond": seed}
        x = seed.view(z.shape[0], self.seed_channels, self.seed_size, self.seed_size)
        for index, group in enumerate(self.groups):
            if until and until <= activations.keys():
                return None, activations
            x = group(x)
            if index == 0:
                x = self.block0_norm(x)
                activations["block0"] = x
        if until and until <= activations.keys():
            return None, activations
        return self.out(x), activations
