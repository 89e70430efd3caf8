"""Runs that survive a kill: atomic checkpoint writes, the RNG states in every checkpoint, and what resuming needs
before the trainer starts (find and check the checkpoint, cut the logs back to it); and :func:`load_checkpoint`,
which rebuilds a trained model with its data from a checkpoint (``evaluate``, ``select``).

Lightning restores the model, every optimizer and lr scheduler, the global step and its loop counters from a
checkpoint (``Trainer.fit(ckpt_path=...)``); the data streams skip the batches already drawn
(:meth:`disentangle.data.FactorDataModule.batches_done`); :class:`RngState` adds the global random generators
(Gumbel and Gaussian noise, the TC discriminator's permutations). With ``trainer.deterministic=true`` a run killed
and resumed ends where an uninterrupted one does.
"""
from __future__ import annotations

import csv
import io
import json
import os
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from ..errors import ConfigError, DatasetNotFoundError, UnsafeCheckpointError  # noqa: F401 - its old address

LAST = "last.ckpt"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint to ``<path>.part`` in the same directory, flushes it to disk, then renames it over
    ``path``: a kill during a save leaves the previous file whole (a rename within a directory is atomic)."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)


def read_checkpoint(path: Path | str, what: str) -> dict:
    """``path`` loaded on the CPU as data only (``torch.load(weights_only=True)``: tensors, numbers, strings and
    containers of them, which is all a checkpoint of this project, or of Lightning, holds), so reading a checkpoint
    someone shares runs none of its code (its stored config is checked before anything is built from it:
    :mod:`~disentangle.runtime.stored_config`). A file that needs any other type is refused in one
    :class:`UnsafeCheckpointError` line naming the type, before any of it runs. A file that is no torch checkpoint
    is one :class:`ConfigError` line saying what it is (:func:`describe_non_checkpoint`: empty, text, truncated or
    damaged, another library's format). ``what`` starts the message (``ckpt=...``, ``resume: checkpoint ...``)."""
    path = Path(path)
    problem = describe_non_checkpoint(path)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}; nothing was changed")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        needed = re.search(r"GLOBAL\s+([\w.]+)", str(exc))  # torch names the refused global this way
        if needed is not None or re.search(r"Weights only load failed[\s\S]*Unsupported", str(exc)):
            name = needed.group(1) if needed else "a type that is not data"
            raise UnsafeCheckpointError(
                f"{what}: refused: the file needs {name}, which no checkpoint of this project holds; "
                f"opening it could run code (checkpoints are loaded as data only), so nothing of it was run") from exc
        raise ConfigError(f"{what}: truncated or damaged: its pickled part does not read ({_first_line(exc)}); "
                          f"nothing was changed") from exc
    except Exception as exc:
        raise ConfigError(f"{what}: truncated or damaged: it does not read as a torch checkpoint "
                          f"({type(exc).__name__}: {_first_line(exc)}); nothing was changed") from exc


# the first bytes of other formats a shared "checkpoint" turns out to be
_OTHER_FORMATS = ((b"\x89HDF\r\n\x1a\n", "an HDF5 file (Keras, h5py or another library)"),
                  (b"\x93NUMPY", "a NumPy .npy array"), (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"),
                  (b"\x1f\x8b", "a gzip archive"), (b"\x08\x01\x12", "a protobuf (TensorFlow or ONNX) file"))


def describe_non_checkpoint(path: Path) -> str | None:
    """What ``path`` is when it cannot be a torch checkpoint, from its size and first bytes (read, never run); None
    when it may be one (a whole zip archive holding a pickle, or a legacy torch pickle), which torch then reads."""
    size = path.stat().st_size
    if size == 0:
        return "an empty file (0 bytes), not a checkpoint"
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"PK\x03\x04"):  # torch's format is a zip archive with <name>/data.pkl in it
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return (f"truncated or damaged: a zip archive of {size} bytes without its directory (a copy or a "
                    f"download that stopped early?), not a whole checkpoint")
        if not any(n.endswith("data.pkl") for n in names):
            return f"a zip archive written by something else (it holds {', '.join(names[:3]) or 'nothing'}...), " \
                   f"not a torch checkpoint"
        return None
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return None  # a pickle (torch's legacy format): torch reads it as data, or names what it would run
    for magic, name in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"{name}, written by something else, not a torch checkpoint"
    if len(head) >= 9 and int.from_bytes(head[:8], "little") < size and head[8:9] == b"{":
        return "a safetensors file (weights written by another library), not a torch checkpoint"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\n\r\t" for c in text):
        return f"a text file (it begins {text.splitlines()[0][:40]!r}), not a checkpoint"
    return f"not a checkpoint: its {size} bytes are in no format torch writes (it begins {head[:8].hex()})"


def _keys_of(obj) -> str:
    """A few of a loaded file's top-level keys (or its type), to say what was opened."""
    if isinstance(obj, dict):
        keys = [str(k) for k in list(obj)[:4]]
        return "keys " + ", ".join(keys) + (", ..." if len(obj) > 4 else "") if keys else "an empty dict"
    return f"a {type(obj).__name__}"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else "partial or corrupt file"


def rng_states() -> dict:
    """This process's global random generators: torch (CPU and every CUDA device), numpy and Python."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    # plain tensors and numbers only: Lightning loads checkpoints with torch.load(weights_only=True)
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_states(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RngState(pl.Callback):
    """Saves every rank's global RNG states in each checkpoint and puts them back when training resumes (at
    ``on_train_start``, after the loaders are built, so nothing in between draws from them). Also flushes the
    loggers with each checkpoint, so a kill loses no logged row the checkpoint covers."""

    def __init__(self):
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        states = rng_states()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, states)  # every rank saves; rank 0 writes the file
            return {"ranks": gathered}
        return {"ranks": [states]}

    def load_state_dict(self, state_dict: dict) -> None:
        ranks = state_dict.get("ranks") or []
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self._restored = ranks[rank] if rank < len(ranks) else None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:  # buffered CSV rows up to the checkpoint reach the disk with it
            logger.save()

    def on_train_start(self, trainer, pl_module) -> None:
        if self._restored is not None:
            set_rng_states(self._restored)
            self._restored = None


# -- loading a trained model -------------------------------------------------------------------------------------
def load_checkpoint(path: Path | str, data_cfg=None, data_overrides: dict | None = None):
    """(model with the checkpoint's weights, the run's composed config, its data module, the raw checkpoint) from a
    checkpoint written by ``disentangle.train``; ``data_cfg`` replaces the run's data config, ``data_overrides``
    sets keys of it (e.g. ``{"batch_size": 64}``). Every problem is one :class:`ConfigError` line."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from .config import one_line
    from .stored_config import check_stored_config

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"ckpt={path}: no such checkpoint file")
    ckpt = read_checkpoint(path, f"ckpt={path}")
    if not isinstance(ckpt, dict) or "disentangle_config" not in ckpt:
        raise ConfigError(f"ckpt={path}: a torch file written by something else (it holds no run config of "
                          f"disentangle.train: {_keys_of(ckpt)}); nothing was changed")
    # the stored config is data: nothing outside the project's own targets is built from it (stored_config)
    check_stored_config(ckpt["disentangle_config"], f"ckpt={path}")
    run = OmegaConf.create(ckpt["disentangle_config"])
    data = OmegaConf.create(OmegaConf.to_container(data_cfg if data_cfg is not None else run.data, resolve=True))
    for key, value in (data_overrides or {}).items():
        data[key] = value
    try:
        datamodule = instantiate(data)
        # older checkpoints did not store the image shape: assume the data's
        shape = ckpt.get("disentangle_shape") or {
            "in_channels": datamodule.num_channels, "resolution": datamodule.resolution}
        model = instantiate(run.model, **shape)
    except DatasetNotFoundError:
        raise
    except Exception as exc:
        raise ConfigError(one_line(exc)) from exc
    if (datamodule.num_channels, datamodule.resolution) != (model.in_channels, model.resolution):
        raise ConfigError(
            f"data {datamodule.name} has {datamodule.num_channels}x{datamodule.resolution}px images; the model "
            f"was trained on {model.in_channels}x{model.resolution}px"
        )
    model.load_state_dict(ckpt["state_dict"])
    return model, run, datamodule, ckpt


# -- before a resumed run starts ---------------------------------------------------------------------------------
def find_checkpoint(resume, output_dir, auto_resume: bool = False) -> Path | None:
    """The checkpoint to resume from: ``resume`` (a run directory, whose ``checkpoints/last.ckpt`` is taken, or a
    ``.ckpt`` file); with ``auto_resume`` and no ``resume``, the output directory's ``last.ckpt`` when it exists;
    else None (a fresh run). Raises one ConfigError line for a missing file."""
    if resume in (None, ""):
        if auto_resume:
            last = Path(output_dir) / "checkpoints" / LAST
            return last if last.is_file() else None
        return None
    path = Path(str(resume)).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / LAST
    if not path.is_file():
        raise ConfigError(f"resume={resume}: no checkpoint at {path} (the run saved none yet: it restarts with "
                          f"resume=null, or point resume= at a .ckpt file)")
    return path


def check_checkpoint(path: Path) -> dict:
    """Load ``path`` on the CPU and check it is a whole training checkpoint; returns it. A partial or corrupt file
    (a kill during a write that was not atomic, a truncated copy) raises one ConfigError line."""
    ckpt = read_checkpoint(path, f"resume: checkpoint {path}")
    needed = ("state_dict", "optimizer_states", "loops", "global_step")
    missing = [k for k in needed if k not in ckpt] if isinstance(ckpt, dict) else list(needed)
    if missing:
        raise ConfigError(f"resume: {path} is not a training checkpoint (missing {', '.join(missing)}); "
                          f"nothing was changed")
    return ckpt


def trim_logs(output_dir, step: int, history_file: str = "metrics_history.jsonl") -> None:
    """Cut the run's logs back to the checkpoint at ``step`` so the resumed run neither repeats nor skips a step:
    the evaluation history keeps its non-final entries up to ``step`` (the final one of a finished run is redone
    at the new end); the CSV log keeps the training rows of the ``step`` batches before the checkpoint and the
    evaluation rows whose entry the history kept. Files are rewritten atomically; ``metrics.json`` of a finished run
    is left alone (the resumed run rewrites it)."""
    output_dir = Path(output_dir)
    history = output_dir / history_file
    evaluated: set[int] | None = None
    if history.is_file():
        kept = []
        for line in history.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut by the kill
                continue
            if entry.get("step", 0) <= step and not entry.get("final"):
                kept.append(line)
        evaluated = {json.loads(line)["step"] for line in kept}
        _write_atomic(history, "".join(f"{line}\n" for line in kept))
    for path in output_dir.glob("csv/**/metrics.csv"):
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames or [], list(reader)
        kept = [row for row in rows if _keep_csv_row(row, fields, step, evaluated)]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
        _write_atomic(path, buffer.getvalue())


def _keep_csv_row(row: dict, fields: list[str], step: int, evaluated: set[int] | None) -> bool:
    at = _csv_step(row)
    if at is None:
        return False
    if any(row.get(k) for k in fields if k.startswith("train/")):
        return at < step  # logged by batch index: the checkpoint at `step` follows batch step - 1
    if any(row.get(k) for k in fields if k.startswith("eval/")):
        return at <= step and (evaluated is None or at in evaluated)
    return at < step


def _csv_step(row: dict) -> int | None:
    try:
        return int(float(row.get("step", "")))
    except ValueError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)
