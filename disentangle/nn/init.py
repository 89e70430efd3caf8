"""Weight initialisation schemes of the frameworks the papers' code ran on, so a network built here can start where
the authors' started (``model.init``, ``fidelity=authors_code``; docs/fidelity.md).

* ``pytorch``: PyTorch's layer defaults (Kaiming-uniform weights, uniform biases), left as built.
* ``haiku``: Haiku's defaults (Friede et al.'s JAX code): weights from a normal truncated at two standard deviations,
  standard deviation 1/sqrt(fan_in) with fan_in = the layer's inputs times its kernel area (for a transposed
  convolution, its input channels times the kernel area), zero biases (docs/fidelity.md).
* ``glorot``: TensorFlow 1's ``tf.layers`` defaults (disentanglement_lib, Locatello et al.): Glorot-uniform weights,
  limit sqrt(6 / (fan_in + fan_out)), zero biases.
* ``normal_0.02``: N(0, 0.02) weights and zero biases (the FactorQVAE authors' ``weights_init`` for their
  discriminator).
* ``kaiming_relu``: Roth et al.'s code (facebookresearch/disentangling-correlated-factors@3b0d233,
  ``dent/utils/initialization.py``, which Cliff's Shapes3D protocol reuses): ``torch.nn.init.kaiming_uniform_`` for a
  ReLU (bound sqrt(6 / fan_in), PyTorch's fan-in) on every Linear and convolution weight; biases keep PyTorch's
  default. PyTorch's own default is the same function with a = sqrt(5), bound 1 / sqrt(fan_in): sqrt(6) times
  narrower.

Only Linear and (transposed) convolution layers are set; normalisation layers and codebooks keep theirs.
"""
from __future__ import annotations

import math

import torch
from torch import nn

INITS = ("pytorch", "haiku", "glorot", "normal_0.02", "kaiming_relu")
_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def fan_in(layer: nn.Module) -> int:
    """Inputs feeding one output unit: in_features, or input channels (per group) times the kernel area. PyTorch
    stores a transposed convolution's weight as (in, out / groups, *kernel), so its fan-in is weight.shape[0] times
    the kernel area, as Haiku computes it."""
    w = layer.weight
    area = math.prod(w.shape[2:])
    if isinstance(layer, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return w.shape[0] * area
    return w.shape[1] * area


@torch.no_grad()
def initialize(module: nn.Module, scheme: str) -> nn.Module:
    """Re-initialise every Linear and convolution layer inside ``module`` with ``scheme`` (one of :data:`INITS`);
    returns ``module``."""
    if scheme not in INITS:
        raise ValueError(f"init must be one of {list(INITS)} (got {scheme!r})")
    if scheme == "pytorch":
        return module
    for layer in module.modules():
        if not isinstance(layer, _LAYERS):
            continue
        if scheme == "kaiming_relu":
            nn.init.kaiming_uniform_(layer.weight, a=0.0, mode="fan_in", nonlinearity="relu")
            continue   # Roth et al. leave the biases as PyTorch built them
        if scheme == "haiku":
            std = 1.0 / math.sqrt(fan_in(layer))
            nn.init.trunc_normal_(layer.weight, 0.0, std, -2.0 * std, 2.0 * std)
        elif scheme == "glorot":
            nn.init.xavier_uniform_(layer.weight)
        else:
            nn.init.normal_(layer.weight, 0.0, 0.02)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return module
