"""Prepare a real dataset once: find (or download) the official raw files, convert them to the cache."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import DatasetNotFoundError
from .prepared import VARIANT_DEFAULT, cache_path, default_root


def source_key(name: str, variant: str | None) -> str:
    """Key of the dataset's official file in ``download.SOURCES`` (mpi3d variants have their own files)."""
    if name == "mpi3d" and variant and variant != VARIANT_DEFAULT["mpi3d"]:
        return f"mpi3d_{variant}"
    return name


def prepare(name: str, root: str | os.PathLike | None = None, *, variant: str | None = None,
            factor_sizes=None, download: bool = True, progress: bool = True) -> Path:
    """Return the path of the prepared cache of ``name``, making it if needed (idempotent)."""
    from .convert import convert, is_complete
    from .download import SOURCES, fetch
    from .formats import find_raw

    root = Path(root).expanduser() if root else default_root()
    target = cache_path(name, root, variant)
    if is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    raw = find_raw(name, root, variant)
    if raw is None:
        remote = SOURCES[source_key(name, variant)]
        if not download:
            raise DatasetNotFoundError(
                f"{name}: no official raw file in {root} (expected {remote.filename}); "
                "put it there or allow downloading (download=true)"
            )
        raw = fetch(remote, root, progress=progress)
    return convert(name, raw, target, variant=variant, factor_sizes=factor_sizes, progress=progress)
