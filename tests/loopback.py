"""A real HTTP server on 127.0.0.1 for download tests: serves byte strings by path, with per-path misbehaviour, and
logs every request (method, path, Range header). It also answers as a Hugging Face Hub endpoint does for
``/datasets/<repo>/resolve/<revision>/<file>`` (``X-Repo-Commit``, ``ETag``), so ``HF_ENDPOINT`` can point at it."""
from __future__ import annotations

import hashlib
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from disentangle.data.sources import parse_sources

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CITE = ["tests/loopback@0000000:tests/loopback.py"]


class Loopback:
    """``files[path] = bytes``; ``mode[path]`` one of ``None``, ``"404"``, ``"drop_once"`` (the first GET sends half
    and closes; later GETs honour Range), ``"stall"`` (headers, then silence), ``"ignore_range"``."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.mode: dict[str, str] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.stall_seconds = 30.0
        self._dropped: set[str] = set()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                owner._answer(self, head=True)

            def do_GET(self):
                owner._answer(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of ``path``, in order (None: a plain GET)."""
        with self._lock:
            return [r for m, p, r in self.log if m == "GET" and p == path]

    def _answer(self, handler, *, head: bool):
        path = handler.path.split("?", 1)[0]
        rng = handler.headers.get("Range")
        with self._lock:
            self.log.append(("HEAD" if head else "GET", path, rng))
        mode = self.mode.get(path)
        if path not in self.files or mode == "404":
            body = b"not found"
            handler.send_response(404)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            if not head:
                handler.wfile.write(body)
            return
        data = self.files[path]
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and mode != "ignore_range" and not head:
            start = int(m.group(1))
        if start > len(data):
            handler.send_response(416)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(206 if start else 200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.send_header("Accept-Ranges", "bytes")
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        if path.startswith("/datasets/"):  # as the Hub answers for a file of a dataset repository
            handler.send_header("X-Repo-Commit", COMMIT)
            handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.end_headers()
        if head:
            return
        if mode == "stall":
            handler.wfile.write(data[: len(data) // 4])
            handler.wfile.flush()
            time.sleep(self.stall_seconds)
            return
        if mode == "drop_once" and path not in self._dropped:
            self._dropped.add(path)
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return
        handler.wfile.write(data[start:])


def entry(filename: str, sources: list[dict], *, data: bytes | None = None, publish: bool = True,
          dataset: str = "shapes3d", variant: str | None = None) -> dict:
    """A registry entry (the dict form of sources.yaml) for ``filename``, with the size and sha256 of ``data`` as
    published facts (``publish=False``: none published)."""
    raw = {"dataset": dataset, "variant": variant, "filename": filename, "sources": sources,
           "checked": __import__("datetime").date(2026, 11, 27)}
    if publish and data is not None:
        raw.update(size=len(data), size_cited_by=CITE[0], sha256=hashlib.sha256(data).hexdigest(),
                   sha256_cited_by=CITE[0])
    return raw


def http(url: str) -> dict:
    return {"kind": "http", "url": url, "cited_by": CITE}


def hub(repo_id: str, filename: str) -> dict:
    return {"kind": "hf", "repo_id": repo_id, "repo_type": "dataset", "filename": filename, "revision": None,
            "url": f"https://huggingface.co/datasets/{repo_id}/resolve/main/{filename}", "cited_by": CITE}


def registry(**entries: dict):
    """Parse entries (key=entry dict) with the package's own validator."""
    return parse_sources({"schema_version": 1, "files": entries})
