"""Latent modules: each maps a pre-latent to (quantized value, indices, its own loss terms)."""
from .base import LatentModule, LatentOutput
from .continuous import ContinuousLatent
from .fixed_grid import FixedGridQuantizer
from .latent_quantizer import LatentQuantizer

__all__ = ["ContinuousLatent", "FixedGridQuantizer", "LatentModule", "LatentOutput", "LatentQuantizer"]
