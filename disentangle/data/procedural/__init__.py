"""Procedural ground-truth-factor datasets: images rendered on the fly from integer factor indices.

Each module (``sprites``, ``shapes2d``, ``circles``) exposes ``FACTOR_NAMES``, ``FACTOR_SIZES``, ``NUM_CHANNELS`` and
``render(factors, resolution=64)``, which maps an int64 (B, n_factors) tensor of class indices to a float32
(B, NUM_CHANNELS, resolution, resolution) image batch in [0, 1] on the same device, deterministically.
"""
from . import circles, shapes2d, sprites

RENDERERS = {"sprites": sprites, "shapes2d": shapes2d, "circles": circles}

__all__ = ["RENDERERS", "circles", "shapes2d", "sprites"]
