"""Latent modules: each maps a pre-latent to a LatentOutput (decoder input, codes, its own loss terms, and for
stochastic latents the distribution's parameters)."""
from .base import LatentModule, LatentOutput, LatentSpec, straight_through
from .categorical import CategoricalLatent, factor_bins, gumbel_scale
from .continuous import ContinuousLatent
from .fixed_grid import FixedGridQuantizer
from .gaussian import GaussianLatent, gaussian_kl, gaussian_log_density
from .gumbel import GumbelQuantizer, categorical_kl_uniform, relaxed_one_hot
from .latent_quantizer import LatentQuantizer
from .vector import VectorQuantizer

__all__ = [
    "CategoricalLatent",
    "ContinuousLatent",
    "FixedGridQuantizer",
    "GaussianLatent",
    "GumbelQuantizer",
    "LatentModule",
    "LatentOutput",
    "LatentQuantizer",
    "LatentSpec",
    "VectorQuantizer",
    "categorical_kl_uniform",
    "factor_bins",
    "gaussian_kl",
    "gaussian_log_density",
    "gumbel_scale",
    "relaxed_one_hot",
    "straight_through",
]
