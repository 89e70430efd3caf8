"""Procedural datasets: the full factorial grid, rendered on demand from factor indices on the device."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import FactorDataModule
from .procedural import RENDERERS


def unravel(indices: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Flat indices -> (B, n_factors) factor classes in C order (last factor varies fastest)."""
    out = []
    rest = indices
    for size in reversed(sizes):
        out.append(rest % size)
        rest = torch.div(rest, size, rounding_mode="floor")
    return torch.stack(out[::-1], dim=1)


class ProceduralDataModule(FactorDataModule):
    """``sprites`` or ``shapes2d``: every combination of factor classes is one sample (index order = C order)."""

    def __init__(
        self,
        name: str = "shapes2d",
        resolution: int = 64,
        factor_names: Sequence[str] | None = None,
        factor_sizes: Sequence[int] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if name not in RENDERERS:
            raise ValueError(f"unknown procedural dataset {name!r}; choose from {sorted(RENDERERS)}")
        if int(resolution) < 8:
            raise ValueError(f"data.resolution must be >= 8 (got {resolution})")
        self.name = name
        self.renderer = RENDERERS[name]
        self.factor_names = tuple(self.renderer.FACTOR_NAMES)
        self.factor_sizes = tuple(int(s) for s in self.renderer.FACTOR_SIZES)
        self.num_channels = int(self.renderer.NUM_CHANNELS)
        self.resolution = int(resolution)
        self.num_samples = int(torch.tensor(self.factor_sizes).prod())
        self._check_metadata(factor_names, factor_sizes)

    def factor_table(self) -> torch.Tensor:
        return unravel(torch.arange(self.num_samples), self.factor_sizes)

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        factors = unravel(indices, self.factor_sizes)
        return self.renderer.render(factors, self.resolution), factors
