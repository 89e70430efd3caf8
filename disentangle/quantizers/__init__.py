"""Latent modules: each maps a pre-latent to a LatentOutput (decoder input, codes, its own loss terms, and for
stochastic latents the distribution's parameters)."""
from .base import LatentModule, LatentOutput
from .continuous import ContinuousLatent
from .fixed_grid import FixedGridQuantizer
from .gaussian import GaussianLatent, gaussian_kl, gaussian_log_density
from .latent_quantizer import LatentQuantizer
from .vector import VectorQuantizer

__all__ = [
    "ContinuousLatent",
    "FixedGridQuantizer",
    "GaussianLatent",
    "LatentModule",
    "LatentOutput",
    "LatentQuantizer",
    "VectorQuantizer",
    "gaussian_kl",
    "gaussian_log_density",
]
