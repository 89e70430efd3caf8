"""Prepare a real dataset once: find (or download) the official raw files, convert them to the cache."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import DatasetNotFoundError
from .cache import cache_path, is_default_variant, resolve_root


def source_key(name: str, variant: str | None) -> str:
    """Key of the dataset's official file in ``download.SOURCES`` (mpi3d variants have their own files)."""
    if name == "mpi3d" and not is_default_variant(name, variant):
        return f"mpi3d_{variant}"
    return name


def source_keys(name: str, variant: str | None) -> tuple[str, ...]:
    """Keys in ``download.SOURCES`` of every official file the dataset needs (SmallNORB: six)."""
    if name == "smallnorb":
        return tuple(f"smallnorb_{split}_{kind}" for split in ("training", "testing")
                     for kind in ("dat", "cat", "info"))
    return (source_key(name, variant),)


def _have(root: Path, filename: str) -> bool:
    """A downloadable file is there, as downloaded or (``.gz`` files) already decompressed."""
    return (root / filename).is_file() or (filename.endswith(".gz") and (root / filename[:-3]).is_file())


def prepare(name: str, root: str | os.PathLike | None = None, *, variant: str | None = None,
            factor_sizes=None, download: bool = True, progress: bool = True) -> Path:
    """Return the path of the prepared cache of ``name``, making it if needed (idempotent)."""
    from .convert import convert, is_complete
    from .download import SOURCES, fetch
    from .formats import OFFICIAL, find_raw

    root = resolve_root(root)
    target = cache_path(name, root, variant)
    if is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    raw = find_raw(name, root, variant)
    if raw is None:
        remotes = [SOURCES[key] for key in source_keys(name, variant)]
        missing = [r for r in remotes if not _have(root, r.filename)] or remotes
        if not download:
            files = ", ".join(r.filename for r in missing)
            it = "it" if len(missing) == 1 else "them"
            official = OFFICIAL[name]
            if official.archive and [r.filename for r in missing] == [official.archive]:
                files += f" or its extracted {official.file(variant)}/"
            elif official.gzip:
                files += " (or the same without .gz)"
            raise DatasetNotFoundError(
                f"{name}: no official raw file in {root} (expected {files}); "
                f"put {it} there or allow downloading (download=true)"
            )
        fetched = [fetch(remote, root, progress=progress) for remote in missing]
        raw = find_raw(name, root, variant) or fetched[0]
    return convert(name, raw, target, variant=variant, factor_sizes=factor_sizes, progress=progress)
