"""A new dataset: procedural bars, rendered on the device from their factors (no download, no file).

A data module subclasses :class:`~disentangle.data.FactorDataModule`, states its factors, image shape and size,
and implements ``gather(indices) -> (images in [0, 1], factor classes)``; the base class supplies the training
stream, the fixed evaluation subset, resuming and data-parallel slicing.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from disentangle.data import FactorDataModule, unravel


class BarsDataModule(FactorDataModule):
    """One horizontal and one vertical bar on a black square, one channel: factors ``row`` and ``column`` (the
    bars' positions, ``positions`` values each) and ``width`` (1 to ``max_width`` pixels of both bars)."""

    name = "bars"

    def __init__(self, name: str = "bars", resolution: int = 32, positions: int = 8, max_width: int = 3,
                 factor_names: Sequence[str] | None = None, factor_sizes: Sequence[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        if name != self.name:  # data.name names the run's directory and keys each model's per-dataset values
            raise ValueError(f"data.name must be {self.name!r} for this data module (got {name!r})")
        if int(positions) < 2 or int(max_width) < 1 or int(resolution) < int(positions) * int(max_width):
            raise ValueError(f"data: need positions >= 2, max_width >= 1 and resolution >= positions x max_width "
                             f"(got {positions}, {max_width}, {resolution})")
        self.factor_names = ("row", "column", "width")
        self.factor_sizes = (int(positions), int(positions), int(max_width))
        self.num_channels, self.resolution = 1, int(resolution)
        self.num_samples = int(torch.tensor(self.factor_sizes).prod())
        self._check_metadata(factor_names, factor_sizes)  # configured names/sizes must match what is rendered

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        factors = unravel(indices, self.factor_sizes)
        pixels = torch.arange(self.resolution, device=indices.device)
        cell = self.resolution // self.factor_sizes[0]
        start = factors[:, :2] * cell  # (B, 2): first pixel row of the horizontal bar, column of the vertical one
        width = factors[:, 2:3] + 1
        on_row = (pixels >= start[:, :1]) & (pixels < start[:, :1] + width)  # (B, R)
        on_col = (pixels >= start[:, 1:]) & (pixels < start[:, 1:] + width)
        images = (on_row[:, :, None] | on_col[:, None, :]).float()[:, None]  # (B, 1, R, R)
        return images, factors
