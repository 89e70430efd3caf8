"""Download the official raw files of the real datasets, with a progress bar and checksum verification.

http(s) URLs are fetched with pooch's HTTP downloader (tqdm progress bar); Google-Drive-hosted files with
gdown (its own progress bar). Every download goes to ``<filename>.part`` inside ``root``, is verified, and
only then moved to its final name with :func:`os.replace`, so a failed or corrupt download never leaves
anything at the final path (nor a partial file behind).

Checksums: where a SHA-256 is published it is passed as ``RemoteFile.sha256`` and a mismatch is an error.
Where none is published (``sha256=None``), the first download records the hash it computed in
``<filename>.sha256`` (``sha256sum`` format) and warns that the file could not be verified; later fetches
verify the existing file against that recorded hash.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SOURCES", "DownloadError", "RemoteFile", "fetch", "recorded_sha256", "sha256_of"]

#: seconds to wait for the server (connect, and between bytes of the body)
DEFAULT_TIMEOUT = 60.0
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A dataset file could not be downloaded or verified; the message is one line naming file and source."""


@dataclass(frozen=True)
class RemoteFile:
    """One official raw file of a dataset and where to get it."""

    filename: str  # the official file name saved in data.root
    url: str | None = None  # http(s) URL, or
    gdrive_id: str | None = None  # a Google Drive file id
    sha256: str | None = None  # known checksum; None = not published (recorded on first download)
    size: str = ""  # human size for messages, e.g. "13 GB"

    def __post_init__(self) -> None:
        if not self.filename or os.path.basename(self.filename) != self.filename:
            raise ValueError(f"RemoteFile.filename must be a bare file name, got {self.filename!r}")
        if (self.url is None) == (self.gdrive_id is None):
            raise ValueError(f"RemoteFile {self.filename!r} needs exactly one of url or gdrive_id")

    @property
    def source(self) -> str:
        """Human description of where the file comes from."""
        return self.url if self.url is not None else f"Google Drive id {self.gdrive_id}"


_MPI3D_BASE = "https://storage.googleapis.com/disentanglement_dataset/Final_Dataset"
_SMALLNORB_BASE = "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small"


def _smallnorb(chunk: str, kind: str) -> RemoteFile:
    filename = f"smallnorb-{chunk}-{kind}.mat.gz"
    return RemoteFile(filename, url=f"{_SMALLNORB_BASE}/{filename}")


# Checksums are not published in the dataset specs: they stay None and are recorded on first download.
SOURCES: dict[str, RemoteFile] = {
    "shapes3d": RemoteFile(
        "3dshapes.h5", url="https://storage.googleapis.com/3d-shapes/3dshapes.h5", size="255 MB"
    ),
    "dsprites": RemoteFile(
        "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz",
        url="https://github.com/deepmind/dsprites-dataset/raw/master/"
        "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz",
        size="26 MB",
    ),
    "mpi3d": RemoteFile(
        "real3d_complicated_shapes_ordered.npz", gdrive_id="1Tp8eTdHxgUMtsZv5uAoYAbJR1BOa_OQm"
    ),
    "mpi3d_toy": RemoteFile("mpi3d_toy.npz", url=f"{_MPI3D_BASE}/mpi3d_toy.npz"),
    "mpi3d_realistic": RemoteFile("mpi3d_realistic.npz", url=f"{_MPI3D_BASE}/mpi3d_realistic.npz"),
    "mpi3d_real": RemoteFile("mpi3d_real.npz", url=f"{_MPI3D_BASE}/mpi3d_real.npz"),
    "falcor3d": RemoteFile(
        "Falcor3D_down128.zip", gdrive_id="1XAQfFK1x6cpN1eiovbP0hVfLTm5SsSoJ", size="3.7 GB"
    ),
    "isaac3d": RemoteFile("Isaac3D_down128.zip", gdrive_id="1OmQ1G2wnm6eTsSFGTKFZZAh5D3nQTW1B", size="13 GB"),
    # Reed et al. 2015's analogy data (its cars/ folder is Cars3D); the host serves it over plain http
    "cars3d": RemoteFile(
        "nips2015-analogy-data.tar.gz", url="http://www.scottreed.info/files/nips2015-analogy-data.tar.gz"
    ),
    # small NORB: six gzipped files (training and testing: dat, cat, info), all needed
    **{f"smallnorb_{split}_{kind}": _smallnorb(chunk, f"{split}-{kind}")
       for split, chunk in (("training", "5x46789x9x18x6x2x96x96"), ("testing", "5x01235x9x18x6x2x96x96"))
       for kind in ("dat", "cat", "info")},
}


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def recorded_sha256(path: Path) -> str | None:
    """The hash recorded in ``<path>.sha256`` by an earlier download, or None."""
    side = _sidecar(path)
    if not side.is_file():
        return None
    words = side.read_text().split()
    return words[0].lower() if words else None


def _record(path: Path, digest: str) -> None:
    side = _sidecar(path)
    tmp = side.with_name(side.name + ".part")
    tmp.write_text(f"{digest}  {path.name}\n")
    os.replace(tmp, side)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _download_http(url: str, part: Path, *, progress: bool, timeout: float) -> None:
    import pooch  # lazy: keeps `import disentangle.data` light

    # pooch streams with requests.get() but never closes the response (on success or on an HTTP error),
    # which leaks the socket until GC (ResourceWarning); a response hook lets us close it ourselves.
    responses = []
    downloader = pooch.HTTPDownloader(
        progressbar=progress, timeout=timeout, hooks={"response": [lambda r, *a, **k: responses.append(r)]}
    )
    try:
        downloader(url, str(part), None)
    finally:
        for response in responses:
            response.close()


def _download_gdrive(file_id: str, part: Path, *, progress: bool, timeout: float) -> None:
    import gdown  # lazy

    # Hand gdown an open file object rather than a path: with a path, gdown writes to its own randomly named
    # temporary file and keeps it on failure (for resuming), which would leave a partial file behind.
    with open(part, "wb") as fh:
        gdown.download(id=file_id, output=fh, quiet=not progress, timeout=timeout)
    if part.stat().st_size == 0:
        raise DownloadError("the download was empty")


def fetch(
    remote: RemoteFile,
    root: Path,
    *,
    progress: bool = True,
    url_override: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Path:
    """Download ``remote`` into ``root`` (if not there yet), verify it, and return its final path.

    ``url_override`` fetches from another http(s) URL instead (a mirror, or a local test server); it takes
    precedence over both ``url`` and ``gdrive_id``. ``progress=False`` silences the progress bar.

    Raises :class:`DownloadError` (one line naming the file and the source) on HTTP errors, dropped
    connections, timeouts, and checksum mismatches; nothing is then left at the final path or as ``.part``.
    """
    root = Path(root)
    final = root / remote.filename
    source = url_override if url_override is not None else remote.source
    expected = remote.sha256.lower() if remote.sha256 else None

    if final.exists():
        return _verify_existing(remote, final, expected)

    root.mkdir(parents=True, exist_ok=True)
    part = final.with_name(final.name + ".part")
    size = f" ({remote.size})" if remote.size else ""
    try:
        try:
            if url_override is not None or remote.url is not None:
                _download_http(source, part, progress=progress, timeout=timeout)
            else:
                assert remote.gdrive_id is not None
                _download_gdrive(remote.gdrive_id, part, progress=progress, timeout=timeout)
        except Exception as exc:  # requests/urllib3/gdown errors all become one DownloadError line
            raise DownloadError(
                f"downloading {remote.filename}{size} from {source} failed: {_one_line(exc)}"
            ) from exc
        actual = sha256_of(part)
        if expected is not None and actual != expected:
            raise DownloadError(
                f"checksum mismatch for {remote.filename} downloaded from {source}: "
                f"expected sha256 {expected}, got {actual}"
            )
        os.replace(part, final)
    except BaseException:
        part.unlink(missing_ok=True)
        raise

    if expected is None:
        _record(final, actual)
        warnings.warn(
            f"{remote.filename} (from {source}) could not be verified against a published checksum; "
            f"recorded sha256 {actual} in {_sidecar(final).name} for later verification",
            stacklevel=2,
        )
    return final


def _verify_existing(remote: RemoteFile, final: Path, expected: str | None) -> Path:
    recorded = recorded_sha256(final)
    reference, origin = (expected, "published") if expected is not None else (recorded, "recorded")
    actual = sha256_of(final)
    if reference is None:
        # A file put there by hand before any download: record what we have, but say it is unverified.
        _record(final, actual)
        warnings.warn(
            f"{remote.filename} already exists in {final.parent} and could not be verified against a "
            f"published checksum; recorded sha256 {actual} in {_sidecar(final).name}",
            stacklevel=3,
        )
        return final
    if actual != reference:
        raise DownloadError(
            f"existing {final} does not match the {origin} checksum for {remote.filename} "
            f"(source {remote.source}): expected sha256 {reference}, got {actual}; "
            f"delete it (and {_sidecar(final).name} if present) and fetch again"
        )
    return final
