"""Conversion of an official raw dataset into the cache read by ``prepared.py``.

The cache ``<root>/<name>.h5`` holds ``images`` uint8 (N, C, 64, 64) stored contiguously (not chunked or
compressed, so it can be memory-mapped) and ``factors`` int64 (N, n_factors), with attributes
``factor_names``, ``factor_sizes``, ``source`` and, written last, ``complete=True``. Datasets with nuisance
variables (SmallNORB's instance) add ``nuisance`` int64 (N, n_nuisance) with attributes ``nuisance_names`` and
``nuisance_sizes``. The file is written to ``<cache>.partial`` and renamed onto the final name only once
complete; a failure removes the partial file.

:func:`derive_resolution` makes another resolution's cache ``<cache stem>_<R>px.h5`` from a complete 64-px cache in
the same way (once, atomically), resampling with antialiased bicubic interpolation, as the first conversion does
for Falcor3D and Isaac3D (as the QLAE authors' code does).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from .formats import RESOLUTION, FormatError, downsample, read_raw


def partial_path(cache_path: Path) -> Path:
    cache_path = Path(cache_path)
    return cache_path.with_name(cache_path.name + ".partial")


@contextmanager
def written_atomically(target: Path) -> Iterator[Path]:
    """The path to write ``target``'s content to (``<target>.partial``): renamed onto ``target`` when the block ends
    normally, removed when it raises (or is interrupted)."""
    partial = partial_path(target)
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def is_complete(cache_path) -> bool:
    """True when ``cache_path`` is a readable cache whose conversion finished."""
    cache_path = Path(cache_path)
    if not cache_path.is_file():
        return False
    try:
        with h5py.File(cache_path, "r") as f:
            if not bool(f.attrs.get("complete", False)):
                return False
            if "images" not in f or "factors" not in f:
                return False
            return f["images"].shape[0] == f["factors"].shape[0]
    except (OSError, ValueError, KeyError):
        return False


def convert(name: str, raw_path, cache_path, *, variant: str | None = None,
            factor_sizes: Sequence[int] | None = None, chunk: int = 2048, progress: bool = True) -> Path:
    """Write the cache of ``name`` from its raw file/folder ``raw_path``; a no-op when already complete."""
    cache_path = Path(cache_path).expanduser()
    if is_complete(cache_path):
        return cache_path
    raw = read_raw(name, Path(raw_path), variant=variant, factor_sizes=factor_sizes, progress=progress)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    n, c = raw.n, raw.num_channels
    with written_atomically(cache_path) as partial, h5py.File(partial, "w") as f:
        images = f.create_dataset("images", shape=(n, c, RESOLUTION, RESOLUTION), dtype=np.uint8)
        f.create_dataset("factors", data=np.ascontiguousarray(raw.factors, dtype=np.int64))
        f.attrs["factor_names"] = list(raw.factor_names)
        f.attrs["factor_sizes"] = np.asarray(raw.factor_sizes, dtype=np.int64)
        if raw.nuisance is not None:
            f.create_dataset("nuisance", data=np.ascontiguousarray(raw.nuisance, dtype=np.int64))
            f.attrs["nuisance_names"] = list(raw.nuisance_names)
            f.attrs["nuisance_sizes"] = np.asarray(raw.nuisance_sizes, dtype=np.int64)
        f.attrs["source"] = raw.source.name
        f.attrs["dataset"] = name
        if variant is not None:
            f.attrs["variant"] = variant
        done = 0
        bar = _progress(n, f"{name} -> {cache_path.name}", progress)
        try:
            for start, block in raw.iter_images(chunk):
                if start != done or block.shape[1:] != (c, RESOLUTION, RESOLUTION):
                    raise FormatError(f"{raw.source}: image stream out of order or of wrong shape "
                                      f"at index {start} ({tuple(block.shape)})")
                images[start:start + len(block)] = block
                done += len(block)
                bar.update(len(block))
        finally:
            bar.close()
        if done != n:
            raise FormatError(f"{raw.source}: read {done} images, expected {n}")
        f.attrs["complete"] = True
    return cache_path


def resolution_path(cache_path, resolution: int) -> Path:
    """The cache of another resolution beside ``cache_path``: ``shapes3d.h5`` -> ``shapes3d_32px.h5``."""
    cache_path = Path(cache_path)
    return cache_path.with_name(f"{cache_path.stem}_{int(resolution)}px{cache_path.suffix}")


def derive_resolution(cache_path, resolution: int, *, chunk: int = 2048, progress: bool = True) -> Path:
    """Write the ``resolution``-px cache of the complete cache ``cache_path`` (:func:`resolution_path`): the same
    factors, nuisance variables and attributes, images downsampled with antialiased bicubic interpolation
    (:func:`~disentangle.data.formats.downsample`), rounded to uint8. Written to ``<target>.partial`` and renamed
    when complete, like :func:`convert`; a no-op when the target is already complete."""
    from .integrity import check_seal, write_seal

    source, target = Path(cache_path), resolution_path(cache_path, resolution)
    if is_complete(target):
        check_seal(target, f"run again (it is derived anew from {source.name})")
        return target
    if not is_complete(source):
        raise FormatError(f"{source}: not a complete cache to derive {resolution} px images from")
    with written_atomically(target) as partial, h5py.File(source, "r") as src, h5py.File(partial, "w") as dst:
        images = src["images"]
        n, c = images.shape[:2]
        out = dst.create_dataset("images", shape=(n, c, int(resolution), int(resolution)), dtype=np.uint8)
        for key in ("factors", "nuisance"):
            if key in src:
                dst.create_dataset(key, data=src[key][...])
        for key, value in src.attrs.items():
            if key != "complete":
                dst.attrs[key] = value
        dst.attrs["derived_from"] = source.name
        dst.attrs["resampling"] = "bicubic, antialiased"
        bar = _progress(n, f"{source.name} -> {target.name}", progress)
        try:
            for start in range(0, n, chunk):
                block = images[start:start + chunk]
                out[start:start + len(block)] = downsample(block, int(resolution), mode="bicubic")
                bar.update(len(block))
        finally:
            bar.close()
        dst.attrs["complete"] = True
    write_seal(target)
    return target


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not enabled, dynamic_ncols=True)
