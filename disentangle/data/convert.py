"""Conversion of an official raw dataset into the cache read by ``prepared.py``.

The cache ``<root>/<name>.h5`` holds ``images`` uint8 (N, C, 64, 64) stored contiguously (not chunked or
compressed, so it can be memory-mapped) and ``factors`` int64 (N, n_factors), with attributes
``factor_names``, ``factor_sizes``, ``source`` and, written last, ``complete=True``. Datasets with nuisance
variables (SmallNORB's instance) add ``nuisance`` int64 (N, n_nuisance) with attributes ``nuisance_names`` and
``nuisance_sizes``. The file is written to ``<cache>.partial`` and renamed onto the final name only once
complete; a failure removes the partial file.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from .formats import RESOLUTION, FormatError, read_raw


def partial_path(cache_path: Path) -> Path:
    cache_path = Path(cache_path)
    return cache_path.with_name(cache_path.name + ".partial")


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
    partial = partial_path(cache_path)
    n, c = raw.n, raw.num_channels
    try:
        with h5py.File(partial, "w") as f:
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
        os.replace(partial, cache_path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return cache_path


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not enabled, dynamic_ncols=True)
