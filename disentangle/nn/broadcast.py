"""Spatial-broadcast decoder (Watters et al. 2019), the decoder of Friede et al.'s Circles experiment
(Friede et al. App. 5, Table 3; §3.3 and App. 7.0.2).

Table 3: input z ∈ R^n → tile to 64×64×n → concatenate 2 coordinate channels (64×64×(n+2)) → Conv → Conv → Conv,
the last one giving the image's logits. The paper's channel counts and kernel sizes are stripped; the
defaults are our choice, after Watters et al.: ``hidden`` = 64 channels, 3×3 kernels, stride 1,
ReLU between layers, coordinates ``linspace(-1, 1)`` along x (columns) and y (rows).

``padding="same"`` (default, Table 3): the grid is R×R and every conv pads by ``kernel_size // 2``.
``padding="valid"`` (Watters et al.'s variant): the grid is enlarged by ``n_layers·(kernel_size − 1)`` pixels
(+6 for 3 layers of 3×3; Watters et al. use 4 layers and +8) and the convs do not pad, so the output is R×R
without any zero padding at the border; the coordinates then span the enlarged grid.

Activations (decoder contract of :mod:`disentangle.nn.blocks`): ``"cond"`` is the broadcast input grid
(tiled z and coordinates), ``"block0"``, ``"block1"``, … the hidden conv outputs (all at full resolution here,
unlike the up-sampling decoders), ``"logits"`` the output.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import (
    BaseDecoder,
    check_bool,
    check_choice,
    check_positive_int,
    decoder_activation_names,
    output_norm,
)

__all__ = ["BroadcastDecoder"]

PADDINGS = ("same", "valid")


class BroadcastDecoder(BaseDecoder):
    """Spatial-broadcast decoder, see the module doc (Friede et al. App. 5, Table 3).

    Args:
        in_features: latent width n.
        out_channels: image channels C (the last conv's output: Bernoulli logits).
        resolution: output height and width R (any R >= 1; nothing is up-sampled).
        hidden: channels of every hidden conv (default 64; Table 3's value is stripped).
        n_layers: number of convs including the output conv (default 3, as in Table 3).
        kernel_size: odd kernel size of every conv (default 3).
        padding: ``"same"`` (R×R grid, padded convs) or ``"valid"`` (enlarged grid, unpadded convs).
        normalize_outputs: affine-free instance norm on the hidden conv outputs (the ``block*`` activations).
    """

    def __init__(self, in_features: int, out_channels: int, resolution: int, hidden: int = 64, n_layers: int = 3,
                 kernel_size: int = 3, padding: str = "same", normalize_outputs: bool = False):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        self.resolution = check_positive_int("resolution", resolution)
        self.hidden = check_positive_int("hidden", hidden)
        self.n_layers = check_positive_int("n_layers", n_layers)
        self.kernel_size = check_positive_int("kernel_size", kernel_size)
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, got {kernel_size}")
        self.padding = check_choice("padding", padding, PADDINGS)
        normalize = check_bool("normalize_outputs", normalize_outputs)
        pad = self.kernel_size // 2 if self.padding == "same" else 0
        self.grid_size = self.resolution + (0 if self.padding == "same" else self.n_layers * (self.kernel_size - 1))
        coords = torch.linspace(-1.0, 1.0, self.grid_size)
        grid = torch.stack([coords.view(1, -1).expand(self.grid_size, -1),     # x: varies along columns
                            coords.view(-1, 1).expand(-1, self.grid_size)])    # y: varies along rows
        self.register_buffer("coords", grid.unsqueeze(0), persistent=False)   # (1, 2, S, S)
        widths = [self.in_features + 2] + [self.hidden] * (self.n_layers - 1)
        self.convs = nn.ModuleList(
            nn.Sequential(nn.Conv2d(cin, self.hidden, self.kernel_size, padding=pad), nn.ReLU(),
                          output_norm(self.hidden, normalize))
            for cin in widths[:-1]
        )
        self.out = nn.Conv2d(widths[-1], self.out_channels, self.kernel_size, padding=pad)
        # blocks beyond the contract's three are named too (so the activations' keys are activation_names), but a
        # Hessian penalty regularizes the first three by default, like every decoder
        blocks = tuple(f"block{i}" for i in range(self.n_layers - 1))
        self.hessian_layers = decoder_activation_names(self.n_layers)[0]
        self.activation_names = ("cond", *blocks, "logits")
        # Channels-last conv weights: PyTorch then runs the full-resolution convs in NHWC, about 2x faster on a CPU
        # (measured: forward+backward at batch 64, 64x64, hidden 64: 0.66 s NCHW -> 0.38 s). The parameters keep
        # this layout through .to(device), optimizer steps and load_state_dict; the output is made contiguous.
        self.to(memory_format=torch.channels_last)

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        b, s = z.shape[0], self.grid_size
        tiled = z.view(b, self.in_features, 1, 1).expand(b, self.in_features, s, s)
        x = torch.cat([tiled, self.coords.to(z.dtype).expand(b, -1, -1, -1)], dim=1)
        activations = {"cond": x}
        for index, conv in enumerate(self.convs):
            if until and until <= activations.keys():
                return None, activations
            x = conv(x)
            activations[f"block{index}"] = x
        if until and until <= activations.keys():
            return None, activations
        return self.out(x).contiguous(), activations
