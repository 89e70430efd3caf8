"""ResNet-18 trunk and Lachapelle et al.'s (2023) image encoder, the encoder of Cliff's balls experiment
(Cliff paper App. G.2 / F.3).

:class:`ResNet18Trunk` is the standard ResNet-18 (He et al. 2016) up to and including the global average pooling,
i.e. torchvision's ``resnet18()`` without its final ``fc`` (11,176,512 parameters for RGB input): a 7x7/2 conv
(64, no bias) + BatchNorm + ReLU, a 3x3/2 max-pool, four stages of two basic blocks (64, 128, 256, 512 channels;
stride 1, 2, 2, 2; a 1x1 conv + BatchNorm shortcut where the shape changes), then the 512-dimensional average.
Written here (torchvision is not a dependency); initialised like torchvision (Kaiming-normal fan-out convs,
BatchNorm scale 1 / shift 0), from scratch (Lachapelle et al.: ``pretrained=False``).

:class:`LachapelleEncoder` (Cliff App. G.2): the trunk's 512 features, then ``n_blocks`` = 5 fully connected
blocks Linear(512, 512) + BatchNorm1d + LeakyReLU(0.01), then Linear(512, d) + BatchNorm1d(d) as the latent
output.

Note on the encoder contract of :mod:`disentangle.nn.blocks`: these networks use BatchNorm, as the authors' do, so
in training mode a sample's output depends on its batch (evaluation uses the running statistics).
"""
from __future__ import annotations

import itertools
import numbers

import torch
from torch import Tensor, nn

from .blocks import BaseEncoder, check_bool, check_nonnegative_float, check_positive_int

__all__ = ["BasicBlock", "LachapelleEncoder", "ResNet18Trunk"]

RESNET18_WIDTHS = (64, 128, 256, 512)
RESNET18_DEPTHS = (2, 2, 2, 2)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with BatchNorm, ReLU after the first and after the residual sum."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out_channels))

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18Trunk(nn.Module):
    """ResNet-18 without its classifier: (B, in_channels, H, W) -> (B, 512) pooled features (module doc)."""

    out_features = RESNET18_WIDTHS[-1]

    def __init__(self, in_channels: int = 3):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.stem = nn.Sequential(
            nn.Conv2d(self.in_channels, RESNET18_WIDTHS[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(RESNET18_WIDTHS[0]), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages, width = [], RESNET18_WIDTHS[0]
        for index, (out, depth) in enumerate(zip(RESNET18_WIDTHS, RESNET18_DEPTHS)):
            blocks = [BasicBlock(width, out, stride=1 if index == 0 else 2)]
            blocks += [BasicBlock(out, out) for _ in range(depth - 1)]
            stages.append(nn.Sequential(*blocks))
            width = out
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: Tensor) -> Tensor:
        return torch.flatten(self.pool(self.stages(self.stem(x))), 1)


def fc_block(in_features: int, out_features: int, negative_slope: float, batch_norm: bool = True) -> nn.Sequential:
    """Linear + BatchNorm1d + LeakyReLU, Lachapelle et al.'s fully connected block (Cliff App. G.2)."""
    return nn.Sequential(nn.Linear(in_features, out_features),
                         nn.BatchNorm1d(out_features) if batch_norm else nn.Identity(),
                         nn.LeakyReLU(negative_slope))


class LachapelleEncoder(BaseEncoder):
    """Lachapelle et al.'s balls encoder (Cliff App. G.2): ResNet-18 trunk -> ``n_blocks`` x [Linear(hidden,
    hidden) + BatchNorm1d + LeakyReLU] -> Linear(hidden, out_features) + BatchNorm1d(out_features).

    Args:
        in_channels, resolution, out_features: the encoder contract (images (B, C, R, R) -> (B, out_features));
            any resolution >= 8.
        hidden: width of the fully connected blocks (512, the trunk's feature width; other values add a projection
            in the first block).
        n_blocks: number of fully connected blocks (5).
        negative_slope: LeakyReLU slope (0.01).
        batch_norm: BatchNorm1d in the fully connected blocks and on the output (the authors'); false drops them.
    """

    def __init__(self, in_channels: int, resolution: int, out_features: int, hidden: int = 512, n_blocks: int = 5,
                 negative_slope: float = 0.01, batch_norm: bool = True):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral) or resolution < 8:
            raise ValueError(f"LachapelleEncoder: resolution must be an integer >= 8, got {resolution!r}")
        self.resolution = int(resolution)
        self.out_features = check_positive_int("out_features", out_features)
        hidden = check_positive_int("hidden", hidden)
        n_blocks = check_positive_int("n_blocks", n_blocks)
        slope = check_nonnegative_float("negative_slope", negative_slope)
        batch_norm = check_bool("batch_norm", batch_norm)
        self.trunk = ResNet18Trunk(self.in_channels)
        widths = [ResNet18Trunk.out_features] + [hidden] * n_blocks
        self.blocks = nn.Sequential(*(fc_block(a, b, slope, batch_norm) for a, b in itertools.pairwise(widths)))
        self.head = nn.Sequential(nn.Linear(hidden, self.out_features),
                                  nn.BatchNorm1d(self.out_features) if batch_norm else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        return self.head(self.blocks(self.trunk(x)))
