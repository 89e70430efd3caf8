"""Downloading raw dataset files: against a bounded loopback HTTP server only (no real dataset hosts)."""

from __future__ import annotations

import hashlib
import io
import random
import threading
import warnings
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from disentangle.data import download as dl
from disentangle.data.download import SOURCES, DownloadError, RemoteFile, fetch

TIMEOUT = 5.0


def _make_zip() -> bytes:
    rng = random.Random(0)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("images.bin", rng.randbytes(300_000))
        zf.writestr("labels.txt", "0 1 2 3\n" * 100)
    return buf.getvalue()


ARCHIVE = _make_zip()
ARCHIVE_SHA = hashlib.sha256(ARCHIVE).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    hits: ClassVar[Counter] = Counter()

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        type(self).hits[self.path] += 1
        if self.path == "/archive.zip":
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(ARCHIVE)))
            self.end_headers()
            self.wfile.write(ARCHIVE)
        elif self.path == "/drop.zip":
            # announce the whole archive, send a tenth of it, then close the connection
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(ARCHIVE)))
            self.end_headers()
            self.wfile.write(ARCHIVE[: len(ARCHIVE) // 10])
            self.wfile.flush()
            self.close_connection = True
        else:
            self.send_error(404, "Not Found")


@pytest.fixture
def server():
    _Handler.hits = Counter()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield base, _Handler.hits
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _get(remote: RemoteFile, root: Path, url: str) -> Path:
    return fetch(remote, root, progress=False, url_override=url, timeout=TIMEOUT)


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_success_then_idempotent(server, tmp_path):
    base, hits = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=ARCHIVE_SHA)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a known checksum must not warn
        path = _get(remote, tmp_path, f"{base}/archive.zip")
    assert path == tmp_path / "fake.zip"
    assert path.read_bytes() == ARCHIVE
    assert zipfile.ZipFile(path).namelist() == ["images.bin", "labels.txt"]
    assert _leftovers(tmp_path) == ["fake.zip"]
    assert hits["/archive.zip"] == 1

    again = _get(remote, tmp_path, f"{base}/archive.zip")
    assert again == path
    assert hits["/archive.zip"] == 1  # served from disk, server not contacted


def test_progress_bar_path_works(server, tmp_path, capsys):
    base, _ = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=ARCHIVE_SHA)
    path = fetch(remote, tmp_path, progress=True, url_override=f"{base}/archive.zip", timeout=TIMEOUT)
    assert path.read_bytes() == ARCHIVE
    assert "100%" in capsys.readouterr().err  # tqdm bar on stderr


def test_checksum_mismatch(server, tmp_path):
    base, _ = server
    wrong = "0" * 64
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=wrong)
    with pytest.raises(DownloadError) as info:
        _get(remote, tmp_path, f"{base}/archive.zip")
    msg = str(info.value)
    assert "\n" not in msg
    assert wrong in msg and ARCHIVE_SHA in msg and "fake.zip" in msg and f"{base}/archive.zip" in msg
    assert _leftovers(tmp_path) == []


def test_existing_file_mismatching_known_checksum(server, tmp_path):
    base, hits = server
    (tmp_path / "fake.zip").write_bytes(b"not the archive")
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=ARCHIVE_SHA)
    with pytest.raises(DownloadError, match="delete it"):
        _get(remote, tmp_path, f"{base}/archive.zip")
    assert sum(hits.values()) == 0


def test_dropped_connection(server, tmp_path):
    base, hits = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=ARCHIVE_SHA)
    with pytest.raises(DownloadError) as info:
        _get(remote, tmp_path, f"{base}/drop.zip")
    msg = str(info.value)
    assert "\n" not in msg and "fake.zip" in msg and f"{base}/drop.zip" in msg
    assert hits["/drop.zip"] == 1
    assert _leftovers(tmp_path) == []


def test_dropped_connection_without_checksum(server, tmp_path):
    """Truncation must be caught by the transport, not only by a known checksum."""
    base, _ = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip")
    with pytest.raises(DownloadError):
        _get(remote, tmp_path, f"{base}/drop.zip")
    assert _leftovers(tmp_path) == []


def test_http_404(server, tmp_path):
    base, _ = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip", sha256=ARCHIVE_SHA)
    with pytest.raises(DownloadError, match="404") as info:
        _get(remote, tmp_path, f"{base}/missing.zip")
    assert "\n" not in str(info.value) and "fake.zip" in str(info.value)
    assert _leftovers(tmp_path) == []


def test_unpublished_checksum_is_recorded_then_enforced(server, tmp_path):
    base, hits = server
    remote = RemoteFile("fake.zip", url="https://example.invalid/fake.zip")
    with pytest.warns(UserWarning, match="could not be verified") as rec:
        path = _get(remote, tmp_path, f"{base}/archive.zip")
    ours = [
        w for w in rec if issubclass(w.category, UserWarning) and "could not be verified" in str(w.message)
    ]
    assert len(ours) == 1 and ARCHIVE_SHA in str(ours[0].message)
    assert path.read_bytes() == ARCHIVE
    side = tmp_path / "fake.zip.sha256"
    assert side.read_text().split()[0] == ARCHIVE_SHA
    assert _leftovers(tmp_path) == ["fake.zip", "fake.zip.sha256"]

    with warnings.catch_warnings():
        # verified against the recorded hash: no warning, no download
        warnings.simplefilter("error", UserWarning)
        assert _get(remote, tmp_path, f"{base}/archive.zip") == path
    assert hits["/archive.zip"] == 1

    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match="recorded") as info:
        _get(remote, tmp_path, f"{base}/archive.zip")
    assert ARCHIVE_SHA in str(info.value)
    assert hits["/archive.zip"] == 1


def test_gdrive_path_uses_gdown_and_wraps_failures(tmp_path, monkeypatch):
    import gdown

    calls = []

    def fake_download(*, id, output, quiet, timeout, **kw):
        calls.append((id, quiet, timeout))
        output.write(ARCHIVE[:100])
        raise gdown.exceptions.FileURLRetrievalError("Failed to retrieve file url:\n\n\tToo many users")

    monkeypatch.setattr(gdown, "download", fake_download)
    remote = RemoteFile("drive.zip", gdrive_id="abc123", size="1 GB")
    with pytest.raises(DownloadError) as info:
        fetch(remote, tmp_path, progress=False, timeout=TIMEOUT)
    msg = str(info.value)
    assert "\n" not in msg and "drive.zip" in msg and "Google Drive id abc123" in msg
    assert calls == [("abc123", True, TIMEOUT)]
    assert _leftovers(tmp_path) == []

    def ok_download(*, id, output, quiet, timeout, **kw):
        output.write(ARCHIVE)
        return output

    monkeypatch.setattr(gdown, "download", ok_download)
    ok = RemoteFile("drive.zip", gdrive_id="abc123", sha256=ARCHIVE_SHA)
    path = fetch(ok, tmp_path, progress=False, timeout=TIMEOUT)
    assert path.read_bytes() == ARCHIVE and _leftovers(tmp_path) == ["drive.zip"]


def test_gdown_signature_matches_our_call():
    import inspect

    import gdown

    params = inspect.signature(gdown.download).parameters
    for name in ("id", "output", "quiet", "timeout"):
        assert name in params


def test_sources_table():
    expected = {
        "shapes3d": "3dshapes.h5",
        "dsprites": "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz",
        "mpi3d": "real3d_complicated_shapes_ordered.npz",
        "mpi3d_toy": "mpi3d_toy.npz",
        "mpi3d_realistic": "mpi3d_realistic.npz",
        "mpi3d_real": "mpi3d_real.npz",
        "falcor3d": "Falcor3D_down128.zip",
        "isaac3d": "Isaac3D_down128.zip",
        "cars3d": "nips2015-analogy-data.tar.gz",
        **{f"smallnorb_{s}_{k}": f"smallnorb-{c}-{s}-{k}.mat.gz"
           for s, c in (("training", "5x46789x9x18x6x2x96x96"), ("testing", "5x01235x9x18x6x2x96x96"))
           for k in ("dat", "cat", "info")},
    }
    assert set(SOURCES) == set(expected)
    for key, remote in SOURCES.items():
        assert remote.filename == expected[key]
        assert (remote.url is None) != (remote.gdrive_id is None)
        assert remote.sha256 is None  # not published in the specs: never invented
        if remote.url is not None:
            # Reed et al.'s Cars3D archive is served over plain http only
            assert remote.url.startswith(("https://", "http://www.scottreed.info/"))
            assert remote.url.endswith("/" + remote.filename)
    assert SOURCES["shapes3d"].url == "https://storage.googleapis.com/3d-shapes/3dshapes.h5"
    assert SOURCES["mpi3d"].gdrive_id == "1Tp8eTdHxgUMtsZv5uAoYAbJR1BOa_OQm"
    assert SOURCES["falcor3d"].gdrive_id == "1XAQfFK1x6cpN1eiovbP0hVfLTm5SsSoJ"
    assert SOURCES["isaac3d"].gdrive_id == "1OmQ1G2wnm6eTsSFGTKFZZAh5D3nQTW1B"
    assert SOURCES["mpi3d_real"].url == (
        "https://storage.googleapis.com/disentanglement_dataset/Final_Dataset/mpi3d_real.npz"
    )


def test_remote_file_validation():
    with pytest.raises(ValueError):
        RemoteFile("x.zip")
    with pytest.raises(ValueError):
        RemoteFile("x.zip", url="https://a/x.zip", gdrive_id="id")
    with pytest.raises(ValueError):
        RemoteFile("../x.zip", url="https://a/x.zip")
    assert dl.DEFAULT_TIMEOUT > 0
