"""Finding and reading the runs under a directory: ``metrics.json`` and Hydra's ``.hydra/config.yaml``.

A run directory is one holding ``.hydra/config.yaml`` (a ``disentangle.train`` job, finished or not) or a
``metrics.json``; the search does not descend into a run directory (its ``checkpoints/metrics.json`` from
``disentangle.evaluate`` or its ``wandb/`` files are part of the run). A run that cannot be used is kept with its
``error`` (one line) so that the report can list it: no ``metrics.json`` (failed or still running; the job's
``error.txt`` line, else the last error line of its ``train.log``, is quoted), an unreadable file, or a config
that lacks ``model.name`` or ``data.name``.

``metrics.json`` is the run's final evaluation; ``metrics_history.jsonl`` (:func:`read_history`) holds every
evaluation, periodic and final, one JSON object a line (``step``, ``final`` and the scalar metric keys), which the
per-run rules of :mod:`.checkpoints` choose from.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# metrics.json entries that are numbers but not results
NOT_METRICS = frozenset({"step", "n_samples", "eval_seconds", "wall_seconds", "batches", "delta_st_settings",
                         "n_heldout", "n_inside"})
# every evaluation of a run, one JSON object a line (disentangle.callbacks.outputs.HISTORY_FILE; not imported: torch)
HISTORY_FILE = "metrics_history.jsonl"
_SKIP_DIRS = frozenset({".hydra", "wandb", "csv", "checkpoints", "__pycache__", ".git"})
_ERROR_LINE = re.compile(r"\b(error|exception|traceback|non-finite|nan loss)\b|\[ERROR\]", re.IGNORECASE)


@dataclass
class Run:
    """One run directory. ``params`` / ``raw`` are the flattened config (dotted keys) with interpolations resolved
    where they can be (``params``) and as written (``raw``); ``metrics`` holds the finite numeric results."""

    path: Path
    model: str | None = None
    data: str | None = None
    seed: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    step: int | None = None        # the training step of the evaluation ``metrics`` come from
    evaluation: str = ""           # which evaluation that is, when a per-run rule chose it (one line)

    @property
    def ok(self) -> bool:
        return self.error is None


def is_run_dir(path: Path) -> bool:
    return (path / ".hydra" / "config.yaml").is_file() or (path / "metrics.json").is_file()


def find_run_dirs(root: Path) -> list[Path]:
    """Every run directory at or below ``root`` (sorted, natural order of job numbers)."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and is_run_dir(here):
            found.append(here)
            dirnames[:] = []  # a run's subfolders belong to it
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
    return sorted(found, key=_natural_key)


def _natural_key(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def last_error_line(log: Path) -> str | None:
    """The last line of a log that reads like an error, or None."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return " ".join(line.split())[:300]
    return None


def flatten(cfg) -> tuple[dict[str, Any], dict[str, Any]]:
    """(resolved, raw) flat views of an OmegaConf config: dotted keys -> hashable leaf values (lists become tuples).
    A leaf whose interpolation cannot be resolved outside its Hydra job (``${hydra:...}``) keeps its raw text."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    raw: dict[str, Any] = {}

    def walk(node, path):
        if isinstance(node, dict) and node:
            for key, child in node.items():
                walk(child, (*path, str(key)))
        else:
            raw[path] = hashable(node)

    walk(OmegaConf.to_container(cfg, resolve=False), ())
    resolved = {}
    for path, raw_value in raw.items():
        try:
            node = cfg
            for key in path:
                node = node[key]
            if isinstance(node, (DictConfig, ListConfig)):
                node = OmegaConf.to_container(node, resolve=True)
            resolved[".".join(path)] = hashable(node)
        except Exception:  # noqa: BLE001 - unresolvable here (e.g. ${hydra:runtime.output_dir}): keep the text
            resolved[".".join(path)] = raw_value
    return resolved, {".".join(p): v for p, v in raw.items()}


def read_overrides(path: Path) -> dict[str, str]:
    """The command-line overrides of a Hydra job as ``{key: value}`` (``+``/``++``/``~`` prefixes dropped; a deletion
    reads ``"(deleted)"``); empty when the file is missing or unreadable."""
    import yaml

    try:
        items = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError):
        return {}
    out = {}
    for item in items if isinstance(items, list) else []:
        text = str(item)
        key, _, value = text.partition("=")
        if key.startswith("~"):
            value = "(deleted)"
        out[key.lstrip("+~")] = value
    return out


def hashable(value):
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), hashable(v)) for k, v in value.items()))
    return value


def read_run(path: Path) -> Run:
    """The run in ``path``; problems become ``Run.error`` (one line)."""
    from omegaconf import OmegaConf

    from ..runtime import config as _config  # noqa: F401  (the resolvers the configs use: mul, len)

    path = Path(path)
    run = Run(path)
    cfg_path = path / ".hydra" / "config.yaml"
    metrics_path = path / "metrics.json"
    if not cfg_path.is_file():
        run.error = "no .hydra/config.yaml (not a disentangle.train run directory)"
        return run
    try:
        cfg = OmegaConf.load(cfg_path)
        run.params, run.raw = flatten(cfg)
    except Exception as exc:  # noqa: BLE001
        run.error = f".hydra/config.yaml unreadable: {' '.join(str(exc).split())}"
        return run
    run.model, run.data, run.seed = (run.params.get(k) for k in ("model.name", "data.name", "seed"))
    run.overrides = read_overrides(path / ".hydra" / "overrides.yaml")
    missing = [k for k, v in (("model.name", run.model), ("data.name", run.data)) if v in (None, "")]
    if not metrics_path.is_file():
        recorded = path / "error.txt"  # a multirun job's own error line (disentangle.runtime.multirun)
        if recorded.is_file() and recorded.read_text().strip():
            run.error = "failed: " + recorded.read_text().strip().splitlines()[0]
        else:
            why = last_error_line(path / "train.log")
            run.error = "no metrics.json (the run failed or has not finished)" + (f"; train.log: {why}" if why else "")
        return run
    try:
        record = json.loads(metrics_path.read_text())
    except (OSError, ValueError) as exc:
        run.error = f"metrics.json unreadable: {' '.join(str(exc).split())}"
        return run
    if not isinstance(record, dict):
        run.error = "metrics.json unreadable: not a JSON object"
        return run
    if missing:
        run.error = f"config lacks {' and '.join(missing)} (cannot tell which model/dataset this run is)"
        return run
    run.model, run.data = str(run.model), str(run.data)
    run.metrics = scalar_metrics(record)
    run.step = _step(record.get("step"))
    return run


def _step(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


@dataclass
class Evaluation:
    """One line of ``metrics_history.jsonl``: the step, whether it is the final evaluation, its scalar metrics."""

    step: int | None
    final: bool
    metrics: dict[str, float]


def read_history(path: Path) -> tuple[list[Evaluation] | None, str]:
    """The evaluations of a ``metrics_history.jsonl`` in file order and a note; ``(None, why)`` when the file is
    missing, unreadable or holds no evaluation. Lines that are not JSON objects (one cut by a kill) are skipped and
    counted in the note."""
    path = Path(path)
    if not path.is_file():
        return None, f"no {path.name}"
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        return None, f"{path.name} unreadable: {' '.join(str(exc).split())}"
    out, bad = [], 0
    for line in filter(str.strip, lines):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            bad += 1
            continue
        out.append(Evaluation(_step(entry.get("step")), entry.get("final") is True, scalar_metrics(entry)))
    note = f"{bad} unreadable line(s) of {path.name} skipped" if bad else ""
    if not out:
        return None, f"{path.name} holds no evaluation" + (f" ({note})" if note else "")
    return out, note


def scalar_metrics(record: dict) -> dict[str, float]:
    """The finite numeric results of a ``metrics.json`` (booleans, bookkeeping numbers and arrays left out); the
    ``ood`` section's as ``ood_<key>``."""
    out = {}
    for key, value in record.items():
        if key == "ood" and isinstance(value, dict):  # a data.split run's held-out scores, as ood_<metric>
            out.update({f"ood_{k}": v for k, v in scalar_metrics(value).items()})
            continue
        if key in NOT_METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(float(value)):
            out[key] = float(value)
    return out


@dataclass
class Collection:
    runs: list[Run]                                  # usable runs
    left_out: list[Run]                              # runs with an error
    empty: list[str] = field(default_factory=list)   # one line per given directory without runs


def read_runs(dirs: Iterable[Path | str]) -> Collection:
    runs, left_out, empty = [], [], []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            empty.append(f"{d}: no such directory")
            continue
        paths = find_run_dirs(d)
        if not paths:
            empty.append(f"{d}: no runs (no .hydra/config.yaml or metrics.json below it)")
            continue
        for p in paths:
            r = read_run(p)
            (runs if r.ok else left_out).append(r)
    return Collection(runs, left_out, empty)


def describe(runs: Sequence[Run]) -> str:
    return ", ".join(str(r.path) for r in runs)
