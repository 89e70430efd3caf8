"""Fetch the real datasets' raw files from the sources of ``sources.yaml``, in order, and verify them (issue 43 item 2).

- **Sources in order.** Each :class:`~disentangle.data.sources.DatasetFile` lists its sources, the owners' current
  location first. A source that fails (HTTP error, timeout, wrong bytes) is noted and the next one is tried; when all
  fail, one :class:`DownloadError` line names the file, every source tried with its error, and the manual route.
- **Transports.** Hugging Face Hub files go through ``huggingface_hub`` (its resume; ``HF_ENDPOINT`` is honoured),
  Google Drive through ``gdown``, plain http(s) through a small resumable ``requests`` loop: a transfer that drops
  is resumed with a ``Range`` request (up to :data:`RESUMES` times per source, and across runs: the ``.part`` file is
  kept). A stall longer than ``timeout`` seconds ends that source at once (no retry).
- **Verification.** Size and SHA-256 where published (and dSprites' git blob id, the causal chamber's md5): a mismatch is refused and nothing
  is left at the final path. With no published checksum, the hash is recorded in ``<file>.sha256`` (one line says
  so) and enforced from then on.
- **One download per file.** A lock file ``.locks/<file>.lock`` in the data root: a second job waits, then finds the file there.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from .integrity import digests_of, sha256_of
from .sources import DatasetFile, Source

__all__ = ["DEFAULT_TIMEOUT", "RESUMES", "DownloadError", "check_file", "fetch_file", "file_lock", "lock_path", "manual_route",
           "recorded_sha256", "sha256_of", "take_file", "verify_file"]

#: seconds to wait for a server (to connect, and between bytes of the body)
DEFAULT_TIMEOUT = 60.0
#: times a dropped http transfer is resumed (Range request) before the source counts as failed
RESUMES = 3
_CHUNK = 1 << 16  # small enough that a cut loses little of what arrived

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class DownloadError(RuntimeError):
    """A raw file could not be fetched or verified; the message is one line naming the file and what to do."""


class _Stalled(Exception):
    """The server sent nothing for ``timeout`` seconds."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def recorded_sha256(path) -> str | None:
    """The hash recorded in ``<path>.sha256`` by an earlier download (``sha256sum`` format), or None."""
    side = _sidecar(Path(path))
    if not side.is_file():
        return None
    words = side.read_text().split()
    return words[0].lower() if words else None


def _record(path: Path, digest: str) -> None:
    side = _sidecar(path)
    tmp = side.with_name(side.name + ".part")
    tmp.write_text(f"{digest}  {path.name}\n")
    os.replace(tmp, side)


# -- verification ------------------------------------------------------------------------------------------------------
def check_file(entry: DatasetFile, path) -> tuple[str | None, str]:
    """Check ``path``'s bytes against what is known about ``entry``. Returns ``(problem, sha256)``: problem is None
    when every published fact (size, SHA-256, git blob id, an enforced md5) and the recorded hash hold, else one clause saying which
    differs. The size is checked first, so a wrong-sized file costs no hash."""
    path = Path(path)
    size = path.stat().st_size
    if entry.size is not None and size != entry.size:
        return f"it is {size} bytes, not the published {entry.size}", ""
    digests = digests_of(path, git_blob=entry.git_blob_sha1 is not None, md5=entry.md5_enforced)
    actual = digests["sha256"]
    if entry.md5_enforced and digests["md5"] != entry.md5:
        return f"its md5 is {digests['md5']}, not the owners' {entry.md5}", actual
    if entry.sha256 is not None and actual != entry.sha256:
        return f"its sha256 is {actual}, not the published {entry.sha256}", actual
    if entry.git_blob_sha1 is not None and digests["git_blob_sha1"] != entry.git_blob_sha1:
        return f"its git blob id is {digests['git_blob_sha1']}, not the owners' {entry.git_blob_sha1}", actual
    if entry.sha256 is None:
        recorded = recorded_sha256(path.parent / entry.filename)
        if recorded is not None and actual != recorded:
            return f"its sha256 is {actual}, not the {recorded} recorded at its first download", actual
    return None, actual


def _accept(entry: DatasetFile, candidate: Path, final: Path, origin: str, log: Log) -> Path:
    """Verify ``candidate`` and move it to ``final``; refuse (deleting the candidate) when it differs."""
    problem, actual = check_file(entry, candidate)
    if problem is not None:
        candidate.unlink(missing_ok=True)
        raise _Refused(f"wrong bytes: {problem}")
    os.replace(candidate, final)
    if entry.sha256 is None and recorded_sha256(final) is None:
        _record(final, actual)
        extra = (" (its git blob id matches the owners')" if entry.git_blob_sha1 is not None
                 else " (its md5 matches the owners')" if entry.md5_enforced else "")
        log(f"note: {entry.filename} (from {origin}) has no published sha256{extra}; recorded {actual} in "
            f"{_sidecar(final).name}, which later runs check")
    return final


class _Refused(Exception):
    """The bytes arrived but are not the file."""


def verify_file(entry: DatasetFile, path, log: Log = _stderr) -> str:
    """Verify a file already at its final path; return a phrase saying against what. Raises :class:`DownloadError`
    when it differs (the file is left in place for the user to inspect)."""
    path = Path(path)
    problem, actual = check_file(entry, path)
    if problem is not None:
        raise DownloadError(f"{path} is not {entry.filename} ({problem}); delete it (and {_sidecar(path).name} if "
                            f"present) and prepare again, or see {manual_route(entry, path.parent)}")
    if entry.sha256 is not None:
        return "matches the published sha256"
    if recorded_sha256(path) is not None:
        return "matches the sha256 recorded at its first download"
    _record(path, actual)
    log(f"note: {path.name} has no published sha256; recorded {actual} in {_sidecar(path).name}, which later runs "
        f"check")
    return "recorded its sha256 (none is published)"


# -- transports --------------------------------------------------------------------------------------------------------
def _http(url: str, part: Path, *, progress: bool, timeout: float, label: str, log: Log) -> None:
    """Stream ``url`` into ``part``, resuming what ``part`` already holds with a Range request."""
    import requests  # lazy: `import disentangle.data` stays light
    from tqdm.auto import tqdm

    for attempt in range(RESUMES + 1):
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-", "Accept-Encoding": "identity"} if have else {"Accept-Encoding": "identity"}
        try:
            with requests.get(url, stream=True, timeout=timeout, headers=headers) as response:
                if have and response.status_code == 416:  # nothing left to send: the part is whole
                    return
                response.raise_for_status()
                resumed = have > 0 and response.status_code == 206
                if have and not resumed:
                    have = 0  # the server ignored the Range: start over
                length = response.headers.get("Content-Length")
                total = have + int(length) if length and length.isdigit() else None
                if resumed:
                    log(f"resuming {label} at byte {have} of {total if total is not None else '?'} from {url}")
                with open(part, "ab" if resumed else "wb") as fh, tqdm(
                        total=total, initial=have, unit="B", unit_scale=True, desc=label, disable=not progress,
                        leave=False) as bar:
                    for block in response.iter_content(_CHUNK):
                        fh.write(block)
                        bar.update(len(block))
        except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            if _timed_out(exc):
                raise _Stalled(f"no bytes for {timeout:g} s") from exc
            if attempt == RESUMES or not part.exists():
                raise
            continue
        except requests.exceptions.Timeout as exc:
            raise _Stalled(f"no answer within {timeout:g} s") from exc
        if total is None or part.stat().st_size >= total:
            return
    raise ConnectionError(f"the transfer dropped {RESUMES + 1} times")


def _timed_out(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = type(exc).__name__
        if "Timeout" in name or isinstance(exc, TimeoutError) or "timed out" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__ or (exc.args[0] if exc.args and isinstance(exc.args[0],
                                                                                        BaseException) else None)
    return False


def _gdrive(file_id: str, part: Path, *, progress: bool, timeout: float) -> None:
    import gdown  # lazy

    # An open file object, not a path: with a path gdown writes its own randomly named temporary file and keeps it
    # on failure. Google Drive transfers restart (gdown cannot resume into our part file).
    with open(part, "wb") as fh:
        gdown.download(id=file_id, output=fh, quiet=not progress, timeout=timeout)
    if part.stat().st_size == 0:
        raise ConnectionError("the download was empty")


def _hub(source: Source, root: Path, *, progress: bool, timeout: float) -> Path:
    """Download through huggingface_hub into ``root/.huggingface`` (its resume and metadata live there)."""
    import huggingface_hub
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        return Path(huggingface_hub.hf_hub_download(
            source.repo_id, source.hf_filename, repo_type=source.repo_type, revision=source.revision,
            local_dir=root / ".huggingface", endpoint=os.environ.get("HF_ENDPOINT") or None, etag_timeout=timeout))
    finally:
        if not progress and not was_disabled:
            enable_progress_bars()


def _where(source: Source) -> str:
    if source.kind == "hf":
        endpoint = os.environ.get("HF_ENDPOINT")
        return source.url if not endpoint else f"{source.url} (via HF_ENDPOINT={endpoint})"
    return source.url


# -- the entry points --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def file_lock(path, log: Log = _stderr, what: str = "") -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if absent); say once if another process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process preparing {what or path.stem} (lock {path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_path(target: Path) -> Path:
    """Where the lock of a file in a data root lives: ``<root>/.locks/<file>.lock`` (out of the way of globs)."""
    return target.parent / ".locks" / f"{target.name}.lock"


def _data_args(entry: DatasetFile) -> str:
    return f"data={entry.dataset}" + (f" data.variant={entry.variant}" if entry.variant else "")


def manual_route(entry: DatasetFile, root) -> str:
    """How to fetch the file by hand: where from, what to check, where to put it."""
    size = f"{entry.size} bytes" if entry.size is not None else "size not published"
    digest = (f"sha256 {entry.sha256}" if entry.sha256 is not None else f"md5 {entry.md5}" if entry.md5_enforced
              else "no published checksum")
    return (f"by hand: download {entry.sources[0].url} ({size}, {digest}) and run python -m disentangle.prepare "
            f"{_data_args(entry)} --from-file PATH, or put it at {Path(root) / entry.filename}")


def fetch_file(entry: DatasetFile, root, *, progress: bool = True, timeout: float = DEFAULT_TIMEOUT,
               log: Log = _stderr) -> Path:
    """The verified raw file ``root/entry.filename``, downloaded from the first source that serves the right bytes.

    Raises :class:`DownloadError`: one line naming the file, each source tried with its error, and the manual route.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / entry.filename
    with file_lock(lock_path(final), log, entry.filename):
        if final.exists():  # there already, or fetched by the job that held the lock
            verify_file(entry, final, log)
            return final
        failures = []
        for number, source in enumerate(entry.sources, 1):
            where = _where(source)
            part = final.with_name(f"{final.name}.part")
            try:
                if source.kind == "hf":
                    candidate = _hub(source, root, progress=progress, timeout=timeout)
                elif source.kind == "gdrive":
                    _gdrive(source.gdrive_id, part, progress=progress, timeout=timeout)
                    candidate = part
                else:
                    _http(source.url, part, progress=progress, timeout=timeout, label=entry.filename, log=log)
                    candidate = part
                return _accept(entry, candidate, final, where, log)
            except _Refused as exc:
                failures.append(f"{number}. {where}: {exc}")
            except _Stalled as exc:
                failures.append(f"{number}. {where}: timed out ({exc})")
            except Exception as exc:  # noqa: BLE001 - requests, huggingface_hub and gdown errors: noted, next source
                failures.append(f"{number}. {where}: {_one_line(exc)}")
            if len(entry.sources) > number:
                log(f"{entry.filename}: source {failures[-1]}; trying the next source")
        raise DownloadError(f"could not download {entry.filename} for {_data_args(entry)}: tried "
                            f"{'; '.join(failures)}; {manual_route(entry, root)}")


def take_file(entry: DatasetFile, path, root, *, log: Log = _stderr) -> Path:
    """``prepare --from-file PATH``: verify a file the user fetched by hand and place it at ``root/entry.filename``
    (hard-linked where possible, else copied). A file that differs from the published facts is refused."""
    path, root = Path(path).expanduser(), Path(root)
    if not path.is_file():
        raise DownloadError(f"--from-file {path}: no such file (expected {entry.filename} of {_data_args(entry)})")
    root.mkdir(parents=True, exist_ok=True)
    final = root / entry.filename
    with file_lock(lock_path(final), log, entry.filename):
        if final.exists() and final.samefile(path):
            verify_file(entry, final, log)
            return final
        problem, _ = check_file(entry, path)
        if problem is not None:
            raise DownloadError(f"--from-file {path} is not {entry.filename} of {_data_args(entry)}: {problem}")
        part = final.with_name(f"{final.name}.part")
        part.unlink(missing_ok=True)
        try:
            os.link(path, part)
        except OSError:
            shutil.copyfile(path, part)
        final.unlink(missing_ok=True)
        _sidecar(final).unlink(missing_ok=True)
        return _accept(entry, part, final, str(path), log)
