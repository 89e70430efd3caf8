"""What a W&B run has on disk: the history rows of its local transaction log (``run-<id>.wandb``).

wandb documents no reader for this file, and it is the only record of what a run's wandb service persisted before
a kill (the service buffers records in memory: a SIGKILL loses what was not yet written, measured here with wandb
0.31 as everything a short run logged). A resumed run reads it to log each point exactly once
(:meth:`disentangle.runtime.loggers.SummaryWandbLogger`), and the tests read it to check that. This is the project's one
reader of wandb's private format, kept here: a log it does not understand stops with a line naming the wandb version.

The format (wandb 0.2x-0.31): a 7-byte header (``:W&B``, 0xBEE1, version 0), then 32 KiB blocks of chunks in
LevelDB's log layout (4-byte checksum, 2-byte length, 1-byte type: full, first, middle, last), each record a
serialized ``wandb.proto.wandb_internal_pb2.Record``. A truncated tail (a kill mid-write) ends the read quietly.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

_MAGIC = b":W&B"
_HEADER = 7
_BLOCK = 32 * 1024
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


class WandbLogFormatError(RuntimeError):
    """The transaction log is not in the layout this reader knows (a wandb release that changed it)."""


def _version() -> str:
    try:
        import wandb

        return wandb.__version__
    except Exception:  # noqa: BLE001
        return "unknown"


def _fail(path: Path, reason: str) -> WandbLogFormatError:
    return WandbLogFormatError(f"cannot read W&B's transaction log {path} (wandb {_version()}): {reason}; "
                               f"disentangle.runtime.wandb_log knows the layout of wandb 0.2x-0.31")


def records(path: str | Path) -> Iterator[bytes]:
    """The serialized records of one transaction log, in order; stops at a truncated or damaged tail."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < _HEADER:
        return
    if data[:4] != _MAGIC or data[4:6] != b"\xe1\xbe":
        raise _fail(path, f"unexpected header {data[:_HEADER]!r}")
    pos, parts = _HEADER, []
    while pos + _CHUNK_HEADER <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER:  # block trailer: zero padding
            pos += left_in_block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        start, end = pos + _CHUNK_HEADER, pos + _CHUNK_HEADER + length
        if kind == 0 and length == 0:  # zero fill after the last record of a preallocated block
            pos += left_in_block
            continue
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST) or end > len(data) or length > left_in_block - 7:
            return  # a damaged or cut tail: everything before it stands
        chunk = data[start:end]
        pos = end
        if kind == _FULL:
            parts = []
            yield chunk
        elif kind == _FIRST:
            parts = [chunk]
        elif kind == _MIDDLE:
            parts.append(chunk)
        else:
            yield b"".join([*parts, chunk])
            parts = []


def history_rows(path: str | Path) -> list[dict]:
    """Each history row of one transaction log as ``{key: value}``; a media value (an image: wandb stores it as
    nested keys ``[key, "_type"]``, ...) is one dict under its key."""
    try:
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError as exc:
        raise _fail(Path(path), f"no wandb.proto.wandb_internal_pb2 ({exc})") from None
    rows = []
    for raw in records(path):
        record = pb.Record()
        try:
            record.ParseFromString(raw)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
            raise _fail(Path(path), f"a record does not parse ({exc})") from None
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            try:
                value = json.loads(item.value_json)
            except ValueError:
                value = item.value_json
            if item.key or not item.nested_key:
                row[item.key] = value
                continue
            node = row
            for part in item.nested_key[:-1]:
                node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
            node[item.nested_key[-1]] = value
        rows.append(row)
    return rows


def run_logs(wandb_dir: str | Path, run_id: str) -> list[Path]:
    """The transaction logs of run ``run_id`` under a ``wandb`` directory, oldest first (a resumed run writes one
    per process: ``offline-run-<time>-<id>`` or ``run-<time>-<id>``)."""
    return sorted(Path(wandb_dir).glob(f"*run-*-{run_id}/run-{run_id}.wandb"), key=lambda p: p.parent.name
                  .split("run-", 1)[-1])


def logged_points(wandb_dir: str | Path, run_id: str, step_key: str = "trainer/global_step") -> set[tuple[int, str]]:
    """Every ``(step, key)`` the run's transaction logs hold (``step`` from ``step_key``; wandb's own ``_``-keys and
    the step key itself left out): what a resumed run must not log again."""
    points = set()
    for path in run_logs(wandb_dir, run_id):
        for row in history_rows(path):
            step = row.get(step_key)
            if isinstance(step, (int, float)):
                points.update((int(step), key) for key in row if not key.startswith("_") and key != step_key)
    return points
