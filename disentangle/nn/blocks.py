"""Shared pieces for the encoder/decoder architectures in :mod:`disentangle.nn`.

Contract every encoder/decoder in this package follows (the training code relies on it):

* ``Encoder(in_channels, resolution, out_features, **arch_options)``;
  ``forward(x)`` maps images ``(B, in_channels, R, R)`` in ``[0, 1]`` to ``(B, out_features)``.
* ``Decoder(in_features, out_channels, resolution, **arch_options)``;
  ``forward(z, return_activations=False)`` maps ``(B, in_features)`` to logits ``(B, out_channels, R, R)``
  (image = sigmoid(logits)); with ``return_activations=True`` it returns ``(logits, activations)`` where
  ``activations`` is a dict of named intermediate tensors whose keys are ``decoder.activation_names``.
  ``decoder.hessian_layers`` names the activations a Hessian penalty regularizes by default.
* No layer mixes samples across the batch (no BatchNorm): a Hessian penalty decodes perturbed copies of the
  latents in one batched call, so sample ``i``'s output must not depend on the other batch members (Tripod
  Alg. 1, lines 14–22).

Naming of the activations (the same for every decoder): ``"cond"`` is the output of the decoder's conditioning /
mapping MLP; ``"block0"``, ``"block1"``, ``"block2"`` are the outputs of the first three up-sampling stages, i.e.
the 8×8, 16×16 and 32×32 feature maps at resolution 64 (as in Tripod's code: the logits are not regularized);
``"logits"`` is the output. The stage that produces the full-resolution output is never a ``block*`` entry, so a
decoder with ``n = log2(R / 4)`` up-sampling stages exposes ``min(n - 1, 3)`` blocks (R = 32: block0, block1;
R = 16: block0).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "BaseDecoder",
    "BaseEncoder",
    "check_bool",
    "check_choice",
    "check_nonnegative_float",
    "check_positive_int",
    "decoder_activation_names",
    "num_stages",
]

# Every architecture ends/starts at a 4×4 bottleneck; each stage halves/doubles the spatial size.
BOTTLENECK = 4
# Activations a Hessian penalty regularizes by default (Tripod's code); fewer exist at small resolutions.
MAX_BLOCKS = 3


# ------------------------------------------------------------------------------------------------ validation
def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int, or raise ValueError unless it is a positive integer (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_nonnegative_float(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise ValueError unless it is a finite real number >= 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    return float(value)


def check_bool(name: str, value: object) -> bool:
    """Raise ValueError unless ``value`` is a bool (so that a typo such as ``"false"`` is not silently truthy)."""
    if not isinstance(value, bool):
        # ValueError, not TypeError: the project's contract is one exception type for every bad option.
        raise ValueError(f"{name} must be a bool, got {value!r}")  # noqa: TRY004
    return value


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def num_stages(resolution: object, supported: Sequence[int], arch: str) -> int:
    """Number of 2× down/up-sampling stages between ``resolution`` and the 4×4 bottleneck, log2(R / 4).

    Raises ValueError when ``resolution`` is not in ``supported``.
    """
    if (
        isinstance(resolution, bool)
        or not isinstance(resolution, numbers.Integral)
        or resolution not in supported
    ):
        raise ValueError(
            f"{arch}: unsupported resolution {resolution!r}; supported resolutions are {tuple(supported)}"
        )
    return round(math.log2(int(resolution) // BOTTLENECK))


def decoder_activation_names(stages: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(hessian_layers, activation_names)`` for a decoder with ``stages`` up-sampling stages (see module doc)."""
    blocks = tuple(f"block{i}" for i in range(min(stages - 1, MAX_BLOCKS)))
    hessian_layers = ("cond", *blocks)
    return hessian_layers, (*hessian_layers, "logits")


# ------------------------------------------------------------------------------------------------ base classes
class BaseEncoder(nn.Module):
    """Common input checks for encoders: ``(B, in_channels, R, R)`` images in [0, 1] → ``(B, out_features)``."""

    in_channels: int
    resolution: int
    out_features: int

    def _check_input(self, x: Tensor) -> None:
        expected = (self.in_channels, self.resolution, self.resolution)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{type(self).__name__} expects input of shape (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}"
            )


class BaseDecoder(nn.Module):
    """Implements the decoder contract's ``forward`` on top of ``_decode``.

    Subclasses implement ``_decode(z) -> (logits, activations)`` and set ``hessian_layers`` / ``activation_names``.
    The activations dict only holds references to tensors autograd keeps anyway, so collecting it always is free.
    """

    in_features: int
    out_channels: int
    resolution: int
    hessian_layers: tuple[str, ...]
    activation_names: tuple[str, ...]

    def _decode(self, z: Tensor, until: frozenset[str] = frozenset()) -> tuple[Tensor | None, dict[str, Tensor]]:
        """(logits, activations); with ``until``, stop (logits None) once those activations exist."""
        raise NotImplementedError  # pragma: no cover - abstract

    def forward(self, z: Tensor, return_activations: bool = False, until=None):
        """``until``: names of activations after which decoding may stop (a Hessian penalty's perturbed
        pass needs no logits, and the full-resolution stage is the most expensive); then logits is None."""
        if z.dim() != 2 or z.shape[1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__} expects latents of shape (B, {self.in_features}), got {tuple(z.shape)}"
            )
        wanted = frozenset(until or ()) - {"logits"}
        unknown = wanted - set(self.activation_names)
        if unknown:
            raise ValueError(f"unknown activations {sorted(unknown)}; choose from {list(self.activation_names)}")
        logits, activations = self._decode(z, wanted)
        if logits is None:
            return None, activations
        if not return_activations:
            return logits
        activations["logits"] = logits
        return logits, activations


def output_norm(channels: int, enabled: bool) -> nn.Module:
    """Affine-free instance norm of a block output (naive Tripod's activation normalisation for the vanilla Hessian
    penalty, Tripod §4.1), or the identity."""
    return nn.GroupNorm(channels, channels, eps=1e-5, affine=False) if enabled else nn.Identity()


def uniform_fan_in_(weight: Tensor, fan_in: int, bias: Tensor | None = None) -> None:
    """Initialise ``weight`` (and ``bias``) with U(±1/sqrt(fan_in)), the equinox/PyTorch-Linear default."""
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound)
        if bias is not None:
            bias.uniform_(-bound, bound)
