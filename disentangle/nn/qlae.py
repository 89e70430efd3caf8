"""QLAE's conv encoder and StyleGAN-like decoder (QLAE paper App. C.3; Hsu et al. 2023).

Where the paper (App. C.3) and the authors' JAX code (kylehkhsu/latent_quantization) differ, an option
chooses. The defaults are the paper's choice; the alternative option value reproduces the authors' code:

=====================  ==============================  ==========================================
option                 default (paper)                 authors' code
=====================  ==============================  ==========================================
``norm_before_act``    False: conv → LReLU → IN        True: conv → IN → LReLU   (encoder only)
``negative_slope``     0.3                             0.2
``output_kernel``      1 (1×1 conv, no bias)           3 (3×3, padding 1, no bias)
``adain_relu``         False: plain affine A(w)        True: ReLU(A(w)), scale and bias ≥ 0
=====================  ==============================  ==========================================

With the plain affine AdaIN (default) the scale half of A's bias is initialised to 1 so that every style
layer starts close to the identity map (our choice; the paper does not say). ConvTranspose kernels always use
the repo's init U(±1/sqrt(C_in·k²)) (equinox's default), everything else PyTorch's defaults (identical to
equinox's).

Configured like the repo (``output_kernel=3, adain_relu=True``) the parameter counts equal the repo's exactly.

Resolutions 16, 32 and 64 are supported: a resolution R uses log2(R/4) blocks, taking the paper's block
widths from the end nearest the 4×4 bottleneck (R = 32: encoder widths 64, 128, 256; decoder widths 256, 128,
64).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import (
    BaseDecoder,
    BaseEncoder,
    check_bool,
    check_nonnegative_float,
    check_positive_int,
    decoder_activation_names,
    num_stages,
    output_norm,
    uniform_fan_in_,
)

__all__ = ["ConvEncoder", "StyleDecoder"]

SUPPORTED_RESOLUTIONS = (16, 32, 64)
ENCODER_WIDTHS = (32, 64, 128, 256)  # paper App. C.3, input side first; the last is the 4×4 bottleneck width
DECODER_WIDTHS = (256, 128, 64, 32)  # paper App. C.3, bottleneck side first
HIDDEN = 256  # dense/mapping width (paper App. C.3)
IN_EPS = 1e-6  # the authors' code's GroupNorm epsilon


class ConvNormAct(nn.Module):
    """Bias-free conv followed by instance norm (affine) and LeakyReLU, in either order (QLAE paper App. C.3).

    ``norm_before_act=False``: paper order conv → LReLU → IN; ``True``: repo order conv → IN → LReLU.
    """

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, negative_slope: float, norm_before_act: bool
    ):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding=1, bias=False)
        # GroupNorm with one channel per group = per-sample instance norm; never looks across the batch.
        self.norm = nn.GroupNorm(cout, cout, eps=IN_EPS, affine=True)
        self.act = nn.LeakyReLU(negative_slope)
        self.norm_before_act = norm_before_act

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        return self.act(self.norm(x)) if self.norm_before_act else self.norm(self.act(x))


class ConvEncoder(BaseEncoder):
    """QLAE encoder (paper App. C.3): 4 conv blocks (32, 64, 128, 256) → 256×4×4 → MLP 4096→256→256 → head.

    Each block: two 3×3/s1 convs then one 4×4/s2 conv (padding 1, no bias), each followed by instance norm and
    LeakyReLU. The trunk's 256-d output (``forward_features``) is what a GAN critic head would use (authors'
    code).

    Args:
        in_channels: image channels.
        resolution: image side, one of 16, 32, 64 (64 in the paper).
        out_features: head width (n_z for AE/QLAE; 2·n_z for VAEs; 64·n_z for VQ-VAE).
        norm_before_act: False (default, App. C.3): LReLU then IN; True: IN then LReLU (authors' code).
        negative_slope: LeakyReLU slope; 0.3 (default, paper) or 0.2 (authors' code).
    """

    def __init__(
        self,
        in_channels: int,
        resolution: int,
        out_features: int,
        norm_before_act: bool = False,
        negative_slope: float = 0.3,
    ):
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_features = check_positive_int("out_features", out_features)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "ConvEncoder")
        self.resolution = int(resolution)
        norm_before_act = check_bool("norm_before_act", norm_before_act)
        negative_slope = check_nonnegative_float("negative_slope", negative_slope)

        layers: list[nn.Module] = []
        cin = self.in_channels
        for width in ENCODER_WIDTHS[len(ENCODER_WIDTHS) - stages :]:
            for kernel, stride in ((3, 1), (3, 1), (4, 2)):
                layers.append(ConvNormAct(cin, width, kernel, stride, negative_slope, norm_before_act))
                cin = width
        self.convs = nn.Sequential(*layers)
        # Dense layers have bias and no normalisation; ReLU (not LeakyReLU) as in paper App. C.3.
        self.dense = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cin * 4 * 4, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
        )
        self.head = nn.Linear(HIDDEN, self.out_features)

    def forward_features(self, x: Tensor) -> Tensor:
        """The 256-d trunk output (``features`` in the authors' code), before the head."""
        self._check_input(x)
        return self.dense(self.convs(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.forward_features(x))


class StyleLayer(nn.Module):
    """One style-decoding layer (paper App. C.3): ConvT (no bias) → LReLU → IN (no affine) → AdaIN from w.

    AdaIN: ``[scale, bias] = A(w)`` with a per-layer Linear(256, 2·C_out); ``x ← x·scale + bias``.
    ``adain_relu=True`` applies ReLU to A(w) as the authors' code does; otherwise (paper) A is a plain affine map
    whose scale bias starts at 1 (our choice).
    """

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int,
        w_dim: int,
        negative_slope: float,
        adain_relu: bool,
    ):
        super().__init__()
        self.conv = nn.ConvTranspose2d(cin, cout, kernel, stride, padding=1, bias=False)
        # PyTorch derives ConvTranspose fan-in from the weight's dim 1 (C_out); the repo (equinox): C_in·k².
        uniform_fan_in_(self.conv.weight, cin * kernel * kernel)
        self.act = nn.LeakyReLU(negative_slope)
        self.norm = nn.GroupNorm(cout, cout, eps=IN_EPS, affine=False)
        self.style = nn.Linear(w_dim, 2 * cout)
        self.adain_relu = adain_relu
        if not adain_relu:
            with torch.no_grad():
                self.style.bias[:cout].fill_(1.0)

    def forward(self, x: Tensor, w: Tensor) -> Tensor:
        x = self.norm(self.act(self.conv(x)))
        style = self.style(w)
        if self.adain_relu:
            style = torch.relu(style)
        scale, bias = style[:, :, None, None].chunk(2, dim=1)
        return x * scale + bias


class StyleDecoder(BaseDecoder):
    """QLAE's StyleGAN-like decoder (QLAE paper App. C.3).

    z → mapping MLP (n_in→256→256, ReLU) = w (``"cond"``); a learned 256×4×4 constant (init 0.1) passes through
    4 blocks (widths 256, 128, 64, 32) of two 3×3/s1 style layers and one 4×4/s2 up-sampling style layer, each
    modulated by w; then an output conv to ``out_channels`` logits.

    Activations: ``"cond"`` (B, 256); ``"block0"``, ``"block1"``, ``"block2"`` = outputs of the first three
    up-sampling layers (S3: 256×8×8, S6: 128×16×16, S9: 64×32×32 at resolution 64); ``"logits"``.
    ``hessian_layers = ("cond", "block0", "block1", "block2")`` (fewer blocks at resolutions 32 and 16).

    Args:
        in_features: latent size n_in.
        out_channels: image channels.
        resolution: 16, 32 or 64 (64 in the paper).
        negative_slope: LeakyReLU slope; 0.3 (default, paper) or 0.2 (authors' code).
        output_kernel: output conv kernel (odd, no bias, "same" padding); 1 (default, paper) or 3 (authors' code).
        adain_relu: False (default, paper's "affine projection"); True: ReLU after A as in the authors' code.
        normalize_outputs: affine-free instance norm on the ``block*`` outputs (naive Tripod).
    """

    def __init__(
        self,
        in_features: int,
        out_channels: int,
        resolution: int,
        negative_slope: float = 0.3,
        output_kernel: int = 1,
        adain_relu: bool = False,
        normalize_outputs: bool = False,
    ):
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_channels = check_positive_int("out_channels", out_channels)
        stages = num_stages(resolution, SUPPORTED_RESOLUTIONS, "StyleDecoder")
        self.resolution = int(resolution)
        negative_slope = check_nonnegative_float("negative_slope", negative_slope)
        output_kernel = check_positive_int("output_kernel", output_kernel)
        if output_kernel % 2 == 0:
            raise ValueError(
                f"output_kernel must be odd (size-preserving 'same' padding), got {output_kernel}"
            )
        adain_relu = check_bool("adain_relu", adain_relu)

        self.mapping = nn.Sequential(
            nn.Linear(self.in_features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()
        )
        widths = DECODER_WIDTHS[:stages]
        self.const = nn.Parameter(torch.full((widths[0], 4, 4), 0.1))
        layers: list[StyleLayer] = []
        cin = widths[0]
        for width in widths:
            for kernel, stride in ((3, 1), (3, 1), (4, 2)):
                layers.append(StyleLayer(cin, width, kernel, stride, HIDDEN, negative_slope, adain_relu))
                cin = width
        self.layers = nn.ModuleList(layers)
        self.out_conv = nn.Conv2d(
            cin, self.out_channels, output_kernel, padding=output_kernel // 2, bias=False
        )

        self.hessian_layers, self.activation_names = decoder_activation_names(stages)
        # Index of each up-sampling layer whose output is exposed as "block{i}" (layers 2, 5, 8 = S3, S6, S9).
        self._block_at = {3 * i + 2: f"block{i}" for i in range(len(self.hessian_layers) - 1)}
        normalize = check_bool("normalize_outputs", normalize_outputs)
        self.out_norms = nn.ModuleDict(
            {name: output_norm(layers[index].conv.out_channels, normalize) for index, name in self._block_at.items()}
        )

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        w = self.mapping(z)
        activations = {"cond": w}
        x = self.const.expand(z.shape[0], *self.const.shape)
        for index, layer in enumerate(self.layers):
            if until and until <= activations.keys():
                return None, activations
            x = layer(x, w)
            if index in self._block_at:
                name = self._block_at[index]
                x = self.out_norms[name](x)
                activations[name] = x
        if until and until <= activations.keys():
            return None, activations
        return self.out_conv(x), activations
