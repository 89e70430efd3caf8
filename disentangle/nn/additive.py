"""Lachapelle et al.'s (2023) image decoders, non-additive and additive: the decoders of Cliff's balls experiment and
of its Additive Decoder baseline (Cliff paper App. G.2, F.3).

:class:`LachapelleDecoder`: z -> Linear(d, 512) + BatchNorm1d + LeakyReLU(0.01) -> ``n_hidden_blocks`` x
[Linear(512, 512) + BatchNorm1d + LeakyReLU] -> Linear(512, 1024) + BatchNorm1d + LeakyReLU, reshaped to
(64, 4, 4) -> transposed convs (kernel 4, stride 2, padding 1) 64 -> 64 -> 32 -> 32 -> C, LeakyReLU(0.01)
after each but the last. The paper lists 5 blocks 512 x 512 and a LeakyReLU after every deconvolution; the
authors' code (divyat09/additive_decoder_extrapolation), which this follows by default, has 4 such blocks then
the 512 -> 1024 projection the deconvolutions need, and no activation on the output
(``output_activation=True`` adds the paper's). The output is the image itself (centred to [-0.5, 0.5] under
``model.reconstruction=mse``), not logits.

:class:`AdditiveDecoder` (Cliff App. F.3): f(z) = sum over latent blocks B of f^(B)(z_B), each f^(B) a
:class:`LachapelleDecoder` of the block's width; the latent is cut into ``n_blocks`` equal contiguous blocks (the
authors: ``torch.split(z, d / n_blocks)``; balls: (z1, z2) and (z3, z4)).

Decoder contract (:mod:`disentangle.nn.blocks`): ``"cond"`` is the (64, 4, 4) map after the fully connected layers,
``"block0"``.. the first up-sampling stages' outputs, ``"logits"`` the output; the additive decoder's activations are
its block decoders' concatenated along the channel axis. These decoders use BatchNorm, as the authors' do, so in
training mode a sample's output depends on its batch: a Hessian penalty's batched perturbations would see that
(``batch_norm=False`` removes it).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .blocks import (
    BOTTLENECK,
    BaseDecoder,
    check_bool,
    check_nonnegative_float,
    check_positive_int,
    decoder_activation_names,
    num_stages,
)
from .resnet import fc_block

__all__ = ["AdditiveDecoder", "LachapelleDecoder"]

SUPPORTED_RESOLUTIONS = (8, 16, 32, 64)
MAP_CHANNELS = 64                      # channels of the 4x4 map the fully connected part produces (1024 = 64 * 4 * 4)


class LachapelleDecoder(BaseDecoder):
    """Lachapelle et al.'s non-additive decoder (module doc; Cliff App. G.2).

    Args:
        in_features: latent width d. out_channels: image channels C. resolution: 8, 16, 32 or 64 (log2(R / 4)
            transposed convs; the authors' network is R = 64).
        hidden: width of the fully connected blocks (512). n_hidden_blocks: blocks hidden -> hidden (code: 4).
        deconv_channels: outputs of the transposed convs before the last (64, 32, 32 at R = 64; the first
            log2(R / 4) - 1 are used).
        negative_slope: LeakyReLU slope (0.01). output_activation: LeakyReLU on the output too (paper; code: none).
        batch_norm: BatchNorm1d in the fully connected blocks (authors).
    """

    def __init__(self, in_features: int, out_channels: int, resolution: int, hidden: int = 512,
                 n_hidden_blocks: int = 4, deconv_channels: Sequence[int] = (64, 32, 32), negative_slope: float = 0.01,
                 output_activation: bool = False, batch_norm: bool = True):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "LachapelleDecoder")
        self.resolution = int(resolution)
        hidden = check_positive_int("hidden", hidden)
        n_hidden = check_positive_int("n_hidden_blocks", n_hidden_blocks)
        if isinstance(deconv_channels, (str, bytes)) or not isinstance(deconv_channels, Sequence):
            raise ValueError(f"deconv_channels must be a list of positive integers, got {deconv_channels!r}")  # noqa: TRY004
        channels = [check_positive_int(f"deconv_channels[{i}]", c) for i, c in enumerate(deconv_channels)]
        if len(channels) < stages - 1:
            raise ValueError(f"deconv_channels needs {stages - 1} entries at resolution {resolution}, got {channels}")
        slope = check_nonnegative_float("negative_slope", negative_slope)
        self.output_activation = check_bool("output_activation", output_activation)
        batch_norm = check_bool("batch_norm", batch_norm)
        widths = [self.in_features] + [hidden] * (n_hidden + 1) + [MAP_CHANNELS * BOTTLENECK**2]
        self.fc = nn.Sequential(*(fc_block(a, b, slope, batch_norm) for a, b in itertools.pairwise(widths)))
        outs = [*channels[: stages - 1], self.out_channels]
        ins = [MAP_CHANNELS, *outs[:-1]]
        self.deconvs = nn.ModuleList(nn.ConvTranspose2d(a, b, 4, stride=2, padding=1) for a, b in zip(ins, outs))
        self.act = nn.LeakyReLU(slope)
        self.hessian_layers, self.activation_names = decoder_activation_names(stages)

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        x = self.fc(z).view(-1, MAP_CHANNELS, BOTTLENECK, BOTTLENECK)
        activations = {"cond": x}
        last = len(self.deconvs) - 1
        for index, deconv in enumerate(self.deconvs):
            if until and until <= activations.keys():
                return None, activations
            x = deconv(x)
            if index < last or self.output_activation:
                x = self.act(x)
            if index < last and f"block{index}" in self.activation_names:
                activations[f"block{index}"] = x
        return x, activations


class AdditiveDecoder(BaseDecoder):
    """f(z) = Σ_B f^(B)(z_B) over ``n_blocks`` equal contiguous latent blocks (Cliff App. F.3); every f^(B) is
    a :class:`LachapelleDecoder` with ``in_features / n_blocks`` inputs and the other options given here."""

    def __init__(self, in_features: int, out_channels: int, resolution: int, n_blocks: int = 2, **decoder_options):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.n_blocks = check_positive_int("n_blocks", n_blocks)
        if self.in_features % self.n_blocks:
            raise ValueError(f"AdditiveDecoder: in_features={in_features} must be a multiple of n_blocks={n_blocks}")
        self.block_size = self.in_features // self.n_blocks
        self.blocks = nn.ModuleList(
            LachapelleDecoder(self.block_size, out_channels, resolution, **decoder_options) for _ in range(self.n_blocks)
        )
        first = self.blocks[0]
        self.out_channels, self.resolution = first.out_channels, first.resolution
        self.hessian_layers, self.activation_names = first.hessian_layers, first.activation_names

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        outputs, per_block = [], []
        for decoder, part in zip(self.blocks, z.split(self.block_size, dim=1)):
            out, acts = decoder._decode(part, until)
            outputs.append(out)
            per_block.append(acts)
        activations = {name: torch.cat([acts[name] for acts in per_block], dim=1) for name in per_block[0]}
        if outputs[0] is None:
            return None, activations
        return torch.stack(outputs).sum(0), activations
