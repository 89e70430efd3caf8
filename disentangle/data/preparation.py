"""Prepare a real dataset once: find (or fetch, from the registry's sources) the raw files, verify them, convert them
to the cache and seal it; re-verify everything on disk (``check``); take files fetched by hand (``take``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import DatasetNotFoundError
from .cache import cache_path, is_default_variant, resolve_root

__all__ = ["check", "dataset_files", "prepare", "source_key", "source_keys", "take"]


def source_key(name: str, variant: str | None) -> str:
    """Key in ``sources.yaml`` of the dataset's raw file (mpi3d variants have their own files)."""
    if name == "mpi3d" and not is_default_variant(name, variant):
        return f"mpi3d_{variant}"
    return name


def source_keys(name: str, variant: str | None) -> tuple[str, ...]:
    """Keys in ``sources.yaml`` of every raw file the dataset needs (SmallNORB: six)."""
    if name == "smallnorb":
        return tuple(f"smallnorb_{split}_{kind}" for split in ("training", "testing")
                     for kind in ("dat", "cat", "info"))
    return (source_key(name, variant),)


def dataset_files(name: str, variant: str | None, registry=None) -> list:
    """The registry entries (:class:`~disentangle.data.sources.DatasetFile`) of every raw file of ``name``."""
    from .sources import load_sources

    registry = load_sources() if registry is None else registry
    missing = [k for k in source_keys(name, variant) if k not in registry]
    if missing:
        raise DatasetNotFoundError(f"{name}: sources.yaml has no entry {missing[0]!r}")
    return [registry[k] for k in source_keys(name, variant)]


def _have(root: Path, filename: str) -> bool:
    """A raw file is there, as downloaded or (``.gz`` files) already decompressed."""
    return (root / filename).is_file() or (filename.endswith(".gz") and (root / filename[:-3]).is_file())


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


#: set to 1 to convert raw files found in data.root without checking them against the registry: for files that are
#: not the published ones on purpose (the test suite's reduced-grid fixtures in the official formats)
UNVERIFIED_RAW = "DISENTANGLE_UNVERIFIED_RAW"


def _verify_present(name: str, variant: str | None, root: Path, registry, log) -> None:
    """Raw files put in ``data.root`` by hand are verified like downloads (published size and hash, else the recorded
    one, else recorded now). An extracted folder or a decompressed copy has no published hash and is taken as is."""
    from .download import verify_file

    if os.environ.get(UNVERIFIED_RAW) == "1":
        return
    for entry in dataset_files(name, variant, registry):
        path = root / entry.filename
        if path.is_file():
            verify_file(entry, path, log)


def prepare(name: str, root: str | os.PathLike | None = None, *, variant: str | None = None,
            factor_sizes=None, download: bool = True, progress: bool = True, timeout: float | None = None,
            registry=None, log=_stderr) -> Path:
    """Return the path of the prepared (sealed) cache of ``name``, making it if needed (idempotent).

    Two processes preparing the same cache at once: the second waits on ``.locks/<cache>.lock`` and finds it made.
    ``registry`` replaces the package's ``sources.yaml`` (a dict from :func:`~disentangle.data.sources.load_sources`
    or :func:`~disentangle.data.sources.load_sources_file`)."""
    from .convert import convert, is_complete
    from .download import DEFAULT_TIMEOUT, fetch_file, file_lock, lock_path
    from .formats import OFFICIAL, find_raw
    from .integrity import seal_path, write_seal

    root = resolve_root(root)
    target = cache_path(name, root, variant)
    if is_complete(target) and seal_path(target).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(target), log, target.name):
        if is_complete(target):
            if not seal_path(target).is_file():
                write_seal(target)  # a cache prepared before seals existed
            return target
        raw = find_raw(name, root, variant)
        if raw is None:
            entries = dataset_files(name, variant, registry)
            missing = [e for e in entries if not _have(root, e.filename)] or entries
            if not download:
                files = ", ".join(e.filename for e in missing)
                it = "it" if len(missing) == 1 else "them"
                official = OFFICIAL[name]
                if official.archive and [e.filename for e in missing] == [official.archive]:
                    files += f" or its extracted {official.file(variant)}/"
                elif official.gzip:
                    files += " (or the same without .gz)"
                raise DatasetNotFoundError(
                    f"{name}: no official raw file in {root} (expected {files}); "
                    f"put {it} there or allow downloading (download=true)")
            fetched = [fetch_file(e, root, progress=progress, timeout=timeout or DEFAULT_TIMEOUT, log=log)
                       for e in missing]
            raw = find_raw(name, root, variant) or fetched[0]
        else:
            _verify_present(name, variant, root, registry, log)
        path = convert(name, raw, target, variant=variant, factor_sizes=factor_sizes, progress=progress)
        write_seal(path)
        return path


def take(name: str, paths, root=None, *, variant: str | None = None, registry=None, log=_stderr) -> list[Path]:
    """``prepare --from-file``: verify files fetched by hand and place them in ``root``. A dataset of one file takes
    any name; a dataset of several (SmallNORB) matches each path to its entry by file name (``.gz`` or not)."""
    from .download import DownloadError, take_file

    root = resolve_root(root)
    entries = dataset_files(name, variant, registry)
    placed = []
    for path in [Path(p) for p in paths]:
        if len(entries) == 1:
            entry = entries[0]
        else:
            matches = [e for e in entries if path.name == e.filename]
            if not matches:
                names = ", ".join(e.filename for e in entries)
                raise DownloadError(f"--from-file {path}: {name} has several files; name it as one of {names}")
            entry = matches[0]
        placed.append(take_file(entry, path, root, log=log))
    return placed


def check(name: str, root=None, *, variant: str | None = None, registry=None) -> tuple[list[str], list[str]]:
    """``prepare --check``: re-verify what is on disk (every raw file in full against its published or recorded hash,
    the cache against its seal). Returns ``(lines, problems)``: one line per file, and the lines that failed."""
    from .download import check_file, recorded_sha256
    from .integrity import SealError, verify_seal

    root = resolve_root(root)
    lines, problems = [], []
    for entry in dataset_files(name, variant, registry):
        path = root / entry.filename
        if not path.is_file():
            plain = entry.filename.endswith(".gz") and (root / entry.filename[:-3]).is_file()
            lines.append(f"{entry.filename}: not on disk ({'decompressed copy present; ' if plain else ''}"
                         f"needed only to prepare again)")
            continue
        problem, _ = check_file(entry, path)
        if problem is not None:
            line = f"{path}: DIFFERS: {problem}"
            problems.append(line)
        elif entry.sha256 is not None:
            line = f"{path}: ok ({path.stat().st_size} bytes, the published sha256)"
        elif recorded_sha256(path) is not None:
            line = f"{path}: ok (the sha256 recorded at its first download; none is published)"
        else:
            line = f"{path}: unverified (no published sha256 and none recorded; prepare records it)"
        lines.append(line)
    target = cache_path(name, root, variant)
    if not target.is_file():
        lines.append(f"{target}: not prepared")
    else:
        try:
            sealed = verify_seal(target)
            lines.append(f"{target}: ok (matches its seal)" if sealed
                         else f"{target}: no seal (prepared before seals existed; prepare adds one)")
        except SealError as exc:
            problems.append(str(exc))
            lines.append(str(exc))
    return lines, problems
