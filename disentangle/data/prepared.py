"""Datasets read from a prepared cache: ``<root>/<name>.h5`` with ``images`` (N, C, 64, 64) uint8 and
``factors`` (N, n_factors) int64 (``python -m disentangle.prepare`` writes it from the official files).

Images stay uint8: the contiguous HDF5 dataset is memory-mapped, so nothing is read until a batch asks
for it, and batches are gathered with one fancy-indexing call (no per-sample Python). With
``on_device=True`` the whole uint8 array is moved to the training device once and batches are gathered
there.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from ..errors import DatasetNotFoundError
from .base import FactorDataModule

# the variant whose cache is plain <name>.h5 (other variants get <name>_<variant>.h5)
VARIANT_DEFAULT = {"mpi3d": "complex"}


def default_root() -> Path:
    return Path(os.environ.get("DISENTANGLE_DATA", "~/.cache/disentangle")).expanduser()


def cache_path(name: str, root: str | os.PathLike | None = None, variant: str | None = None) -> Path:
    """``<root>/<name>.h5``, or ``<root>/<name>_<variant>.h5`` for a non-default variant (e.g. mpi3d_toy)."""
    root = Path(root).expanduser() if root else default_root()
    if variant and variant != VARIANT_DEFAULT.get(name):
        return root / f"{name}_{variant}.h5"
    return root / f"{name}.h5"


def _map_images(path: Path) -> np.ndarray:
    """The ``images`` dataset as a read-only memory map when it is stored contiguously, else read it."""
    with h5py.File(path, "r") as f:
        ds = f["images"]
        offset = ds.id.get_offset()
        if ds.chunks is None and ds.compression is None and offset is not None:
            return np.memmap(path, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
        return ds[...]


@dataclass
class PreparedDataset:
    """A prepared dataset: ``images`` (N, C, 64, 64) uint8 (memory-mapped), ``factors`` (N, n_factors) int64."""

    name: str
    path: Path
    images: np.ndarray
    factors: np.ndarray
    factor_names: tuple[str, ...]
    factor_sizes: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.factors)


def open_prepared(name: str, root=None, variant: str | None = None, raw: str = "") -> PreparedDataset:
    """Open ``<root>/<name>.h5``; a missing or incomplete file names itself and the prepare command."""
    path = cache_path(name, root, variant)
    complete = False
    if path.is_file():
        with h5py.File(path, "r") as f:
            complete = bool(f.attrs.get("complete", False)) and "images" in f and "factors" in f
    if not complete:
        hint = f" (made from the official {raw})" if raw else ""
        option = f" data.variant={variant}" if variant and variant != VARIANT_DEFAULT.get(name) else ""
        raise DatasetNotFoundError(
            f"{name} is not prepared: expected {path}{hint}; "
            f"run `python -m disentangle.prepare data={name}{option} data.root={path.parent}`"
        )
    with h5py.File(path, "r") as f:
        factors = np.asarray(f["factors"], dtype=np.int64)
        names = tuple(str(s) for s in f.attrs["factor_names"])
        sizes = tuple(int(s) for s in f.attrs["factor_sizes"])
    return PreparedDataset(name, path, _map_images(path), factors, names, sizes)


class PreparedDataModule(FactorDataModule):
    """Shapes3D, MPI3D, Falcor3D, Isaac3D, dSprites from their prepared cache."""

    def __init__(
        self,
        name: str,
        root: str | os.PathLike | None = None,
        raw: str = "",
        variant: str | None = None,
        factor_names: Sequence[str] | None = None,
        factor_sizes: Sequence[int] | None = None,
        on_device: bool = False,
        variant_sizes: dict | None = None,
        **kwargs,
    ):
        """``variant_sizes`` is the config's per-variant factor-grid table; the chosen row is already in
        ``factor_sizes``."""
        super().__init__(**kwargs)
        self.name = name
        self.variant = variant
        try:
            self.data = open_prepared(name, root, variant, raw)
        except DatasetNotFoundError:
            if not self._convert_raw_if_present(name, root, variant, factor_sizes):
                raise
            self.data = open_prepared(name, root, variant, raw)
        n, c, h, w = self.data.images.shape
        if h != w:
            raise ValueError(f"{self.data.path}: images must be square, got {h}x{w}")
        self.num_samples, self.num_channels, self.resolution = int(n), int(c), int(h)
        self.factor_names, self.factor_sizes = self.data.factor_names, self.data.factor_sizes
        self.on_device = bool(on_device)
        self._device_images: torch.Tensor | None = None
        self._factors = torch.from_numpy(self.data.factors)
        self._check_metadata(factor_names, factor_sizes)

    @staticmethod
    def _convert_raw_if_present(name, root, variant, factor_sizes) -> bool:
        """Official raw files in ``root`` but no cache yet: convert them now (once). Never downloads."""
        from .formats import find_raw
        from .preparation import prepare

        root = Path(root).expanduser() if root else default_root()
        if not root.is_dir() or find_raw(name, root, variant) is None:
            return False
        prepare(name, root, variant=variant, factor_sizes=factor_sizes, download=False)
        return True

    @property
    def path(self) -> Path:
        return self.data.path

    def factor_table(self) -> torch.Tensor:
        return torch.as_tensor(self.data.factors)

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        device = indices.device
        if self.on_device and device.type != "cpu":
            if self._device_images is None or self._device_images.device != device:
                self._device_images = torch.from_numpy(np.ascontiguousarray(self.data.images)).to(device)
            images = self._device_images[indices]
        else:
            cpu = indices.cpu().numpy()
            images = torch.from_numpy(self.data.images[cpu]).to(device, non_blocking=True)
        if self._factors.device != device:  # move the (small) factor table once, not every batch
            self._factors = self._factors.to(device)
        return images.float().div_(255), self._factors[indices]


def load_dataset(name: str, root: str | os.PathLike | None = None, variant: str | None = None,
                 **overrides) -> PreparedDataset:
    """The prepared data of ``name`` (see :class:`PreparedDataset`); ``overrides`` may check
    ``factor_names`` / ``factor_sizes`` against the file."""
    data = open_prepared(name, root, variant)
    for key in ("factor_names", "factor_sizes"):
        expected = overrides.get(key)
        if expected is not None and tuple(expected) != tuple(getattr(data, key)):
            raise ValueError(f"{key}={list(expected)} does not match {data.path}: {list(getattr(data, key))}")
    return data
