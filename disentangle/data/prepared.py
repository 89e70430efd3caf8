"""Datasets read from a prepared cache file: ``<root>/<name>.h5`` with ``images`` (N, C, 64, 64) uint8
and ``factors`` (N, n_factors) int64. ``python -m disentangle.prepare`` writes that cache from the
official raw files (datasets issue); here we only read it and fail clearly when it is absent."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

from ..errors import DatasetNotFoundError
from .base import FactorDataModule


def default_root() -> Path:
    return Path(os.environ.get("DISENTANGLE_DATA", "~/.cache/disentangle")).expanduser()


class PreparedDataModule(FactorDataModule):
    """Shapes3D, MPI3D, Falcor3D, Isaac3D, dSprites from their prepared cache."""

    def __init__(
        self,
        name: str,
        root: str | os.PathLike | None = None,
        raw: str = "",
        factor_names: Sequence[str] | None = None,
        factor_sizes: Sequence[int] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.name = name
        self.root = Path(root).expanduser() if root else default_root()
        self.path = self.root / f"{name}.h5"
        if not self.path.is_file():
            hint = f" (from the official {raw} in {self.root})" if raw else ""
            raise DatasetNotFoundError(
                f"{name} is not prepared: expected {self.path}{hint}; "
                f"run `python -m disentangle.prepare data={name} data.root={self.root}`"
            )
        with h5py.File(self.path, "r") as f:
            if "images" not in f or "factors" not in f:
                raise ValueError(f"{self.path}: expected datasets 'images' and 'factors'")
            n, c, h, _ = f["images"].shape
            self.num_samples, self.num_channels, self.resolution = int(n), int(c), int(h)
            self.factor_sizes = tuple(int(s) for s in f.attrs.get("factor_sizes", factor_sizes or ()))
            names = f.attrs.get("factor_names", factor_names or ())
            self.factor_names = tuple(str(s) for s in names)
        self._images: torch.Tensor | None = None
        self._factors: torch.Tensor | None = None
        self._check_metadata(factor_names, factor_sizes)

    def _load(self) -> None:
        if self._images is None:
            with h5py.File(self.path, "r") as f:
                self._images = torch.from_numpy(np.asarray(f["images"]))
                self._factors = torch.from_numpy(np.asarray(f["factors"], dtype=np.int64))

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._load()
        cpu = indices.cpu()
        images = self._images[cpu].to(indices.device, non_blocking=True).float().div_(255)
        return images, self._factors[cpu].to(indices.device)
