"""Hashes of files on disk, and the seal a prepared cache carries so that training notices a swapped or damaged
file without re-hashing gigabytes per run (issue 43 item 2).

A seal ``<cache>.seal`` (JSON) holds the cache's size, its full SHA-256 and a *sampled* SHA-256: the size plus
:data:`SAMPLES` blocks of :data:`BLOCK` bytes at evenly spaced offsets (first and last included). Opening a cache
compares size and sampled hash, a few milliseconds for any size; ``prepare --check`` compares the full hash.
A cache with no seal (prepared before seals existed) is read as before and sealed by the next ``prepare``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import DatasetDamagedError

__all__ = ["BLOCK", "SAMPLES", "SealError", "check_seal", "digests_of", "git_blob_sha1_of", "sampled_sha256",
           "seal_path", "sha256_of", "verify_seal", "write_seal"]

CHUNK = 1 << 20
BLOCK = 1 << 16
SAMPLES = 16


SealError = DatasetDamagedError  # a prepared cache does not match its seal: one line naming the file and the remedy


def digests_of(path, *, git_blob: bool = False, md5: bool = False) -> dict[str, str]:
    """``{"sha256": ...}`` of the whole file in one read, plus ``"git_blob_sha1"`` (the id ``git hash-object``
    gives: SHA-1 over ``blob <size>\\0`` and the bytes) and ``"md5"`` when asked."""
    path = Path(path)
    hashes = {"sha256": hashlib.sha256()}
    if git_blob:
        hashes["git_blob_sha1"] = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    if md5:
        hashes["md5"] = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            for h in hashes.values():
                h.update(block)
    return {k: h.hexdigest() for k, h in hashes.items()}


def sha256_of(path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    return digests_of(path)["sha256"]


def git_blob_sha1_of(path) -> str:
    """The git blob id of a file's content (what ``git hash-object FILE`` prints)."""
    return digests_of(path, git_blob=True)["git_blob_sha1"]


def sampled_sha256(path) -> str:
    """SHA-256 of the size and :data:`SAMPLES` evenly spaced blocks: cheap, and changes with any swap, truncation or
    rewrite that touches a sampled block (the full hash catches the rest)."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    last = max(size - BLOCK, 0)
    offsets = sorted({round(i * last / (SAMPLES - 1)) for i in range(SAMPLES)})
    with open(path, "rb") as fh:
        for offset in offsets:
            fh.seek(offset)
            digest.update(fh.read(BLOCK))
    return digest.hexdigest()


def seal_path(cache) -> Path:
    cache = Path(cache)
    return cache.with_name(cache.name + ".seal")


def write_seal(cache) -> dict:
    """Write ``<cache>.seal`` for a finished cache (atomically) and return what it holds."""
    cache = Path(cache)
    seal = {"file": cache.name, "size": cache.stat().st_size, "sampled_sha256": sampled_sha256(cache),
            "sha256": sha256_of(cache)}
    target = seal_path(cache)
    tmp = target.with_name(target.name + ".part")
    tmp.write_text(json.dumps(seal, indent=1) + "\n")
    os.replace(tmp, target)
    return seal


def _read_seal(cache: Path) -> dict | None:
    target = seal_path(cache)
    if not target.is_file():
        return None
    try:
        seal = json.loads(target.read_text())
        if not isinstance(seal, dict) or not {"size", "sampled_sha256", "sha256"} <= set(seal):
            raise ValueError("fields missing")
    except (OSError, ValueError) as exc:
        raise SealError(f"{target} is unreadable ({exc}); delete it and run prepare again to re-seal {cache.name}")
    return seal


def _changed(cache: Path, what: str, remedy: str) -> SealError:
    return SealError(f"{cache} was changed or damaged since it was prepared ({what}); delete it and its .seal, "
                     f"then {remedy}")


def check_seal(cache, remedy: str = "prepare it again (python -m disentangle.prepare)") -> bool:
    """The cheap check run on every open: size and sampled hash against the seal. False where there is no seal;
    :class:`SealError` where the file differs from it."""
    cache = Path(cache)
    seal = _read_seal(cache)
    if seal is None:
        return False
    size = cache.stat().st_size
    if size != seal["size"]:
        raise _changed(cache, f"{size} bytes, sealed at {seal['size']}", remedy)
    if sampled_sha256(cache) != seal["sampled_sha256"]:
        raise _changed(cache, "its sampled hash differs from the seal's", remedy)
    return True


def verify_seal(cache, remedy: str = "prepare it again (python -m disentangle.prepare)") -> bool:
    """The full check of ``prepare --check``: size and whole-file SHA-256. False where there is no seal."""
    cache = Path(cache)
    seal = _read_seal(cache)
    if seal is None:
        return False
    check_seal(cache, remedy)
    if sha256_of(cache) != seal["sha256"]:
        raise _changed(cache, "its sha256 differs from the seal's", remedy)
    return True
