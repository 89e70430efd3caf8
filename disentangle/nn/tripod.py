"""Tripod's residual encoder and conditional residual decoder (the authors' code, kylehkhsu/tripod).

Blocks (all convs/linears with bias, PyTorch default init ≈ equinox's):

* ``ConvINAct``: 3×3 conv → instance norm (GroupNorm, one channel per group, affine, eps 1e-5) → GELU (tanh).
* ``ResConvBlock``: skip(x) + ConvINAct(ConvINAct(x)); skip = identity, or a 1×1 conv when widths differ.
* ``Downsample``: space-to-depth ×2 (``pixel_unshuffle``) → 1×1 conv.
* ``Upsample``: nearest ×2 → 3×3 conv.
* ``LinearLNAct``: Linear → LayerNorm (affine) → GELU (tanh).
* ``ConvAdaINAct``: 3×3 conv → instance norm (no affine) → x·(1 + scale) + shift with (scale, shift) = Linear(c)
  → GELU (tanh).
* ``ResCondConvBlock``: skip(x) + ConvAdaINAct(ConvAdaINAct(x, c), c).

Every normalisation is per sample (instance / layer norm), so no output depends on other batch members.

Resolutions 16, 32 and 64 are supported: R uses log2(R/4) stages, taking the authors' widths from the end
nearest the 4×4 bottleneck (R = 32: encoder stages 64, 128, 256 → 512; decoder stages 512, 256, 128 → logits).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import (
    BaseDecoder,
    BaseEncoder,
    check_bool,
    check_positive_int,
    decoder_activation_names,
    num_stages,
)

__all__ = ["ResidualDecoder", "ResidualEncoder"]

SUPPORTED_RESOLUTIONS = (16, 32, 64)
ENCODER_WIDTHS = (32, 64, 128, 256, 512)  # stage widths, input side first; the last is the pooled width
DECODER_WIDTHS = (512, 256, 128, 64)  # stage widths, bottleneck side first
COND_DIM = 256
NORM_EPS = 1e-5  # equinox's GroupNorm/LayerNorm default


def gelu() -> nn.Module:
    # jax.nn.gelu defaults to the tanh approximation (authors' code).
    return nn.GELU(approximate="tanh")


class ConvINAct(nn.Module):
    """3×3 conv → affine instance norm → GELU (authors' code)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(cout, cout, eps=NORM_EPS, affine=True)
        self.act = gelu()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class ResConvBlock(nn.Module):
    """``skip(x) + ConvINAct(ConvINAct(x))``; skip is a 1×1 conv only when widths change (authors' code)."""

    def __init__(self, cin: int, cout: int | None = None):
        super().__init__()
        cout = cin if cout is None else cout
        self.skip = nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1)
        self.body = nn.Sequential(ConvINAct(cin, cout), ConvINAct(cout, cout))

    def forward(self, x: Tensor) -> Tensor:
        return self.skip(x) + self.body(x)


class Downsample(nn.Module):
    """Space-to-depth ×2 then a 1×1 conv from 4·cin to cout (authors' code)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(4 * cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        # pixel_unshuffle orders channels as (c, f1, f2), the same as the repo's space-to-depth.
        return self.conv(F.pixel_unshuffle(x, 2))


class Upsample(nn.Module):
    """Nearest-neighbour ×2 then a 3×3 conv (authors' code)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class LinearLNAct(nn.Sequential):
    """Linear → LayerNorm (affine) → GELU (authors' code)."""

    def __init__(self, din: int, dout: int):
        super().__init__(nn.Linear(din, dout), nn.LayerNorm(dout, eps=NORM_EPS), gelu())


class ConvAdaINAct(nn.Module):
    """3×3 conv → instance norm (no affine) → ``x·(1 + scale) + shift`` from Linear(c) → GELU
    (authors' code)."""

    def __init__(self, cond_dim: int, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(cout, cout, eps=NORM_EPS, affine=False)
        self.style = nn.Linear(cond_dim, 2 * cout)
        self.act = gelu()

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        scale, shift = self.style(c)[:, :, None, None].chunk(2, dim=1)
        return self.act(self.norm(self.conv(x)) * (1 + scale) + shift)


class ResCondConvBlock(nn.Module):
    """``skip(x) + ConvAdaINAct(ConvAdaINAct(x, c), c)`` (authors' code)."""

    def __init__(self, cond_dim: int, cin: int, cout: int | None = None):
        super().__init__()
        cout = cin if cout is None else cout
        self.skip = nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1)
        self.first = ConvAdaINAct(cond_dim, cin, cout)
        self.second = ConvAdaINAct(cond_dim, cout, cout)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        return self.skip(x) + self.second(self.first(x, c), c)


class ResidualEncoder(BaseEncoder):
    """Tripod encoder (authors' code): residual conv stages 32→64→128→256→512, global mean pool, MLP head.

    Per stage: ResConvBlock(cin→w), ResConvBlock(w), Downsample(w→next). Then mean over H, W →
    LinearLNAct(512, 512) → Linear(512, out_features). About 4.10 M parameters for out_features = 12.

    Inputs are images in [0, 1]; Tripod's networks expect [−1, 1] (the authors' preprocessing), so the first
    op is x → 2x − 1.

    Args:
        in_channels: image channels.
        resolution: 16, 32 or 64 (64 in the paper).
        out_features: n_z (2·n_z for β-TCVAE: mean and pre-softplus std).
    """

    def __init__(self, in_channels: int, resolution: int, out_features: int):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_features = check_positive_int("out_features", out_features)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "ResidualEncoder")
        self.resolution = int(resolution)

        widths = ENCODER_WIDTHS[len(ENCODER_WIDTHS) - 1 - stages :]  # stage widths + the final width
        layers: list[nn.Module] = []
        cin = self.in_channels
        for width, next_width in itertools.pairwise(widths):
            layers += [ResConvBlock(cin, width), ResConvBlock(width), Downsample(width, next_width)]
            cin = next_width
        self.trunk = nn.Sequential(*layers)
        self.mlp = LinearLNAct(cin, cin)
        self.head = nn.Linear(cin, self.out_features)

    def forward_features(self, x: Tensor) -> Tensor:
        """The 512-d pooled and MLP-processed features, before the head."""
        self._check_input(x)
        h = self.trunk(2 * x - 1)  # [0, 1] → [−1, 1] (authors' code)
        return self.mlp(h.mean(dim=(2, 3)))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.forward_features(x))


class ResidualDecoder(BaseDecoder):
    """Tripod decoder (authors' code): learned 512×4×4 constant modulated by a conditioning MLP of z.

    ``cond`` = LinearLNAct(n_z→256) → LinearLNAct(256→256). Per stage (widths 512, 256, 128, 64):
    ResCondConvBlock ×2 → Upsample to the next width (the last stage up-samples straight to ``out_channels``
    logits). Activations: ``"cond"`` (B, 256), ``"block0"`` 256×8×8, ``"block1"`` 128×16×16, ``"block2"``
    64×32×32 (the first three stage outputs at resolution 64), ``"logits"``. About 16.14 M parameters for n_z = 12.

    Args:
        in_features: latent size n_z.
        out_channels: image channels.
        resolution: 16, 32 or 64 (64 in the paper).
        normalize_outputs: if True, an affine-free instance norm follows each block* output (and feeds the next
            stage). Only the naive-Tripod ablation uses it (activation normalisation for the vanilla Hessian
            penalty, Tripod §4.1; authors' ``normalize_outputs``); Tripod itself uses False (default).
    """

    def __init__(self, in_features: int, out_channels: int, resolution: int, normalize_outputs: bool = False):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "ResidualDecoder")
        self.resolution = int(resolution)
        self.normalize_outputs = check_bool("normalize_outputs", normalize_outputs)

        widths = DECODER_WIDTHS[:stages]
        # Ones, as in the repo; broadcast over the batch.
        self.const = nn.Parameter(torch.ones(widths[0], 4, 4))
        self.cond = nn.Sequential(LinearLNAct(self.in_features, COND_DIM), LinearLNAct(COND_DIM, COND_DIM))
        self.hessian_layers, self.activation_names = decoder_activation_names(stages)

        self.blocks = nn.ModuleList()
        self.upsamples = nn.ModuleList()
        self.out_norms = nn.ModuleList()
        for index, width in enumerate(widths):
            last = index == stages - 1
            cout = self.out_channels if last else widths[index + 1]
            self.blocks.append(
                nn.ModuleList([ResCondConvBlock(COND_DIM, width), ResCondConvBlock(COND_DIM, width)])
            )
            self.upsamples.append(Upsample(width, cout))
            normalize = self.normalize_outputs and not last
            self.out_norms.append(
                nn.GroupNorm(cout, cout, eps=NORM_EPS, affine=False) if normalize else nn.Identity()
            )

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        c = self.cond(z)
        activations = {"cond": c}
        x = self.const.expand(z.shape[0], *self.const.shape)
        for index, (blocks, upsample, norm) in enumerate(zip(self.blocks, self.upsamples, self.out_norms)):
            if until and until <= activations.keys():
                return None, activations
            for block in blocks:
                x = block(x, c)
            x = norm(upsample(x))
            name = f"block{index}"
            if name in self.activation_names:
                activations[name] = x
        return x, activations
