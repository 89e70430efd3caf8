"""Datasets read from a prepared cache: ``<root>/<name>.h5`` with ``images`` (N, C, 64, 64) uint8 and
``factors`` (N, n_factors) int64 (``python -m disentangle.prepare`` writes it from the official files).

Images stay uint8: the contiguous HDF5 dataset is memory-mapped, so nothing is read until a batch asks
for it, and batches are gathered with one fancy-indexing call (no per-sample Python). With
``on_device=True`` the whole uint8 array is moved to the training device once and batches are gathered
there; ``on_device="auto"`` (the default) does so on a CUDA device when the array fits
(:func:`resolve_on_device`), so that runs sharing a node do not compete for the host's memory and cores.

Nuisance variables (SmallNORB's object instance; an optional ``nuisance`` array in the cache) are not factors:
several images share a factor vector, and :meth:`PreparedDataModule.indices_for_factors` picks one of them.
``colour="random_multipliers"`` turns a binary grey-scale dataset into disentanglement_lib's colour dSprites
(Friede et al. App. 6; as in their code): each image's mask times a per-image RGB multiplier, every channel
~ U(0.5, 1).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from ..checks import check_one_of
from ..errors import DatasetNotFoundError
from .base import FactorDataModule

# The cache-location helpers live in cache.py (shared with preparation.py); they stay importable from here.
from .cache import VARIANT_DEFAULT, cache_path, default_root, not_prepared, resolve_root
from .integrity import check_seal

__all__ = [
    "COLOURS",
    "ON_DEVICE_FRACTION",
    "VARIANT_DEFAULT",
    "PreparedDataModule",
    "PreparedDataset",
    "cache_path",
    "check_on_device",
    "default_root",
    "load_dataset",
    "open_prepared",
    "resolve_on_device",
]

log = logging.getLogger(__name__)


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
    nuisance: np.ndarray | None = None  # (N, n_nuisance) int64 classes of the nuisance variables, if any
    nuisance_names: tuple[str, ...] = ()
    nuisance_sizes: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.factors)


def _prepare_command(name: str, path: Path, variant: str | None) -> str:
    option = f" data.variant={variant}" if variant else ""
    return f"run python -m disentangle.prepare data={name}{option} data.root={path.parent}"


def open_prepared(name: str, root=None, variant: str | None = None, raw: str = "") -> PreparedDataset:
    """Open ``<root>/<name>.h5``; a missing or incomplete file names itself and the prepare command."""
    path = cache_path(name, root, variant)
    complete = False
    if path.is_file():
        # a swapped or damaged cache is noticed here, cheaply (size and sampled hash against the seal prepare wrote)
        check_seal(path, _prepare_command(name, path, variant))
        with h5py.File(path, "r") as f:
            complete = bool(f.attrs.get("complete", False)) and "images" in f and "factors" in f
    if not complete:
        raise DatasetNotFoundError(not_prepared(name, path, variant, raw))
    with h5py.File(path, "r") as f:
        factors = np.asarray(f["factors"], dtype=np.int64)
        names = tuple(str(s) for s in f.attrs["factor_names"])
        sizes = tuple(int(s) for s in f.attrs["factor_sizes"])
        extra = {}
        if "nuisance" in f:
            extra = {"nuisance": np.asarray(f["nuisance"], dtype=np.int64),
                     "nuisance_names": tuple(str(s) for s in f.attrs["nuisance_names"]),
                     "nuisance_sizes": tuple(int(s) for s in f.attrs["nuisance_sizes"])}
    return PreparedDataset(name, path, _map_images(path), factors, names, sizes, **extra)


COLOURS = ("none", "random_multipliers")
# data.on_device=auto keeps the images on a CUDA device when they take at most this share of its free memory, divided
# among the runs sharing the GPU: the rest is left to the model's weights, activations and the evaluation
ON_DEVICE_FRACTION = 0.5


def check_on_device(value) -> bool | str:
    """``data.on_device`` as True, False or ``"auto"``; any other value fails in one line naming the key."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("auto", "true", "false"):
        return {"auto": "auto", "true": True, "false": False}[text]
    raise ValueError(f"data.on_device must be one of auto, true, false (got {value!r})")


def resolve_on_device(setting, device: torch.device | str, nbytes: int, free: int | None = None,
                      share: int = 1) -> bool:
    """Whether the images (``nbytes``) are kept on ``device``: never on the CPU; ``True`` / ``False`` as given
    elsewhere; ``"auto"`` on a CUDA device when ``nbytes <= ON_DEVICE_FRACTION * free / share``, ``free`` being the
    device's free memory (``torch.cuda.mem_get_info`` when not given) and ``share`` the runs that share the GPU
    (:func:`disentangle.foundation.devices.gpu_share`); on other devices ``auto`` is False."""
    setting = check_on_device(setting)
    device = torch.device(device)
    if device.type == "cpu" or setting is False:
        return False
    if setting is True:
        return True
    if device.type != "cuda":
        return False
    if free is None:
        free = torch.cuda.mem_get_info(device)[0]
    return int(nbytes) <= ON_DEVICE_FRACTION * int(free) / max(1, int(share))


class PreparedDataModule(FactorDataModule):
    """Shapes3D, MPI3D, Falcor3D, Isaac3D, dSprites, Cars3D, SmallNORB (and colour dSprites) from their
    prepared cache."""

    def __init__(
        self,
        name: str,
        root: str | os.PathLike | None = None,
        raw: str = "",
        variant: str | None = None,
        factor_names: Sequence[str] | None = None,
        factor_sizes: Sequence[int] | None = None,
        on_device: bool | str = "auto",
        variant_sizes: dict | None = None,
        cache_name: str | None = None,
        colour: str = "none",
        resolution: int | None = None,
        **kwargs,
    ):
        """``variant_sizes`` is the config's per-variant factor-grid table; the chosen row is already in
        ``factor_sizes``. ``cache_name`` reads the cache prepared for another dataset (colour dSprites reads
        ``dsprites``); ``colour`` (``none`` or ``random_multipliers``) colours binary grey-scale images.
        ``resolution`` (None: the cache's 64 px) below 64 reads ``<cache>_<R>px.h5``, made once from the 64-px cache
        with antialiased bicubic resampling (:func:`~disentangle.data.convert.derive_resolution`). ``on_device``
        (``auto``, ``true``, ``false``): keep the uint8 images on the training device (:func:`resolve_on_device`)."""
        super().__init__(**kwargs)
        check_one_of("data.colour", colour, COLOURS)
        on_device = check_on_device(on_device)
        if resolution is not None and not 8 <= int(resolution) <= 64:
            raise ValueError(f"data.resolution must be between 8 and the caches' 64 px (got {resolution}), or null")
        self.name = name
        self.variant = variant
        self.cache_name = cache_name or name
        try:
            self.data = open_prepared(self.cache_name, root, variant, raw)
        except DatasetNotFoundError:
            if not self._convert_raw_if_present(self.cache_name, root, variant, factor_sizes):
                raise
            self.data = open_prepared(self.cache_name, root, variant, raw)
        if resolution is not None and int(resolution) != self.data.images.shape[-1]:
            self.data = self._at_resolution(self.data, int(resolution))
        n, c, h, w = self.data.images.shape
        if h != w:
            raise ValueError(f"{self.data.path}: images must be square, got {h}x{w}")
        self.colour = colour
        if colour != "none" and c != 1:
            raise ValueError(f"data.colour={colour} needs grey-scale (binary) images, but {self.data.path} has {c} "
                             f"channels")
        self.num_samples, self.num_channels, self.resolution = int(n), 3 if colour != "none" else int(c), int(h)
        self.factor_names, self.factor_sizes = self.data.factor_names, self.data.factor_sizes
        self.nuisance_names, self.nuisance_sizes = self.data.nuisance_names, self.data.nuisance_sizes
        self.on_device = on_device
        self._device_images: torch.Tensor | None = None
        self._keeps_on: tuple[torch.device, bool] | None = None  # the on_device decision, for the device it was made on
        self._factors = torch.from_numpy(self.data.factors)
        self._lookup: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._fixed_colours: torch.Tensor | None = None
        self._colour_generator: torch.Generator | None = None
        self._check_metadata(factor_names, factor_sizes)

    @staticmethod
    def _convert_raw_if_present(name, root, variant, factor_sizes) -> bool:
        """Official raw files in ``root`` but no cache yet: convert them now (once). Never downloads."""
        from .formats import find_raw
        from .preparation import prepare

        root = resolve_root(root)
        if not root.is_dir() or find_raw(name, root, variant) is None:
            return False
        prepare(name, root, variant=variant, factor_sizes=factor_sizes, download=False)
        return True

    @staticmethod
    def _at_resolution(data: PreparedDataset, resolution: int) -> PreparedDataset:
        """The same dataset from its ``resolution``-px cache (derived from the 64-px one the first time)."""
        from .convert import derive_resolution

        path = derive_resolution(data.path, resolution, progress=True)
        return PreparedDataset(data.name, path, _map_images(path), data.factors, data.factor_names, data.factor_sizes,
                               data.nuisance, data.nuisance_names, data.nuisance_sizes)

    @property
    def path(self) -> Path:
        return self.data.path

    def factor_table(self) -> torch.Tensor:
        return torch.as_tensor(self.data.factors)

    def indices_for_factors(self, factors: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Dataset indices of images with the given factor vectors (B, n_factors), on their device. Where several
        images share a factor vector (a nuisance such as SmallNORB's instance), one of them uniformly at random
        by ``generator`` (a CPU generator), or the first of them without one. A missing combination is a
        ValueError."""
        if self._lookup is None:
            sizes = torch.as_tensor([int(s) for s in self.factor_sizes], dtype=torch.long)
            radix = torch.cat([sizes.flip(0).cumprod(0).flip(0)[1:], torch.ones(1, dtype=torch.long)])
            codes, order = torch.sort((self._factors.cpu() * radix).sum(1), stable=True)
            self._lookup = (radix, codes, order)
        radix, codes, order = self._lookup
        flat = factors.long().cpu().reshape(-1, len(self.factor_sizes))
        outside = ((flat < 0) | (flat >= torch.as_tensor(self.factor_sizes))).any(1)
        if outside.any():
            raise ValueError(f"{self.name}: factors {flat[outside][0].tolist()} out of range for the factor sizes "
                             f"{list(self.factor_sizes)}")
        wanted = (flat * radix).sum(-1)
        lo = torch.searchsorted(codes, wanted, right=False)
        hi = torch.searchsorted(codes, wanted, right=True)
        if (hi == lo).any():
            raise ValueError(f"{self.name} has no image with factors {flat[hi == lo][0].tolist()}")
        if generator is not None:
            lo = lo + (torch.rand(len(lo), generator=generator) * (hi - lo)).long()
        return order[lo].reshape(factors.shape[:-1]).to(factors.device)

    def gather(self, indices: torch.Tensor, colours: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, factors) of ``indices``. With ``colour="random_multipliers"`` each image is coloured by
        ``colours`` (B, 3) when given (training draws them afresh), otherwise by a fixed multiplier per image
        index drawn once from ``eval_seed``, so evaluation and metrics always see the same images."""
        device = indices.device
        if self.keeps_images_on(device):
            if self._device_images is None or self._device_images.device != device:
                self._device_images = torch.from_numpy(np.ascontiguousarray(self.data.images)).to(device)
            images = self._device_images[indices]
        else:
            cpu = indices.cpu().numpy()
            images = torch.from_numpy(self.data.images[cpu]).to(device, non_blocking=True)
        if self._factors.device != device:  # move the (small) factor table once, not every batch
            self._factors = self._factors.to(device)
        images = images.float().div_(255)
        if self.colour == "random_multipliers":
            if colours is None:
                colours = self._fixed_colours_on(device)[indices]
            images = images * colours.to(device=device, dtype=images.dtype)[:, :, None, None]
        return images, self._factors[indices]

    def keeps_images_on(self, device: torch.device) -> bool:
        """Whether batches on ``device`` are gathered from a copy of the images kept there (``on_device``, decided
        once per device; ``auto`` is logged)."""
        if device.type == "cpu":
            return False
        if self._keeps_on is None or self._keeps_on[0] != device:
            from ..foundation.devices import gpu_share

            share = gpu_share() if self.on_device == "auto" and device.type == "cuda" else 1
            keep = resolve_on_device(self.on_device, device, self.data.images.nbytes, share=share)
            if self.on_device == "auto":
                log.info("data.on_device=auto: %s's images (%.2f GB) %s %s (runs sharing it: %d)", self.name,
                         self.data.images.nbytes / 1e9, "kept on" if keep else "gathered from the host for", device,
                         share)
            self._keeps_on = (device, keep)
        return self._keeps_on[1]

    def _fixed_colours_on(self, device: torch.device) -> torch.Tensor:
        """(N, 3) per-image multipliers ~ U(0.5, 1), drawn once from ``eval_seed`` (9 MB for dSprites)."""
        if self._fixed_colours is None:
            gen = torch.Generator().manual_seed(self.eval_seed)
            self._fixed_colours = 0.5 + 0.5 * torch.rand(self.num_samples, 3, generator=gen)
        if self._fixed_colours.device != device:
            self._fixed_colours = self._fixed_colours.to(device)
        return self._fixed_colours

    def draw_colours(self, n: int) -> torch.Tensor:
        """(n, 3) fresh multipliers ~ U(0.5, 1) on the CPU from the module's training generator (seeded by
        ``seed`` and the distributed rank)."""
        if self._colour_generator is None:
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            self._colour_generator = torch.Generator().manual_seed(self.seed * 100_003 + rank * 1000 + 999)
        return 0.5 + 0.5 * torch.rand(n, 3, generator=self._colour_generator)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Training index batches -> (images, factors); colour dSprites gets fresh colours for every batch."""
        if (self.colour != "none" and isinstance(batch, torch.Tensor) and batch.dtype == torch.long
                and batch.dim() == 1):
            return self.gather(batch, colours=self.draw_colours(len(batch)))
        return super().on_after_batch_transfer(batch, dataloader_idx)


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
