"""Training the claims' runs: one ``python -m disentangle.train`` process per configuration and seed (forked from a
preloaded interpreter: :mod:`disentangle.runtime.launch`), under
``OUT/runs/<setting>/<model>[-overrides]/seed<k>``. A finished run (its ``metrics.json``) is reused; an interrupted
one resumes from its last checkpoint (``auto_resume=true``), so a killed command goes on where it stopped. Runs of
one paper go side by side (``jobs``, each with cores/jobs threads), seed by seed, so an interrupted command already
has every configuration's first seeds."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.launch import run_module
from .catalog import Claim, RunSpec, merge_overrides

RECORD = "claim_run.json"  # beside metrics.json: the run's command line and its accumulated wall time


@dataclass
class RunResult:
    spec: RunSpec
    seed: int
    path: Path
    metrics: dict = field(default_factory=dict)
    wall_s: float = 0.0
    error: str | None = None
    trained: bool = False  # False when a finished run was reused


def run_path(out: Path, spec: RunSpec, seed: int) -> Path:
    return Path(out) / "runs" / spec.key / f"seed{seed}"


def run_overrides(spec: RunSpec, seed: int, extra: Sequence[str] = ()) -> list[str]:
    """What the run is: its overrides, then ``extra`` (the command's ``--override``s) and the seed."""
    return [*merge_overrides(spec.overrides, extra), f"seed={seed}"]


def train_argv(spec: RunSpec, seed: int, path: Path, extra: Sequence[str] = ()) -> list[str]:
    """The run's arguments to ``python -m disentangle.train``; the compile cache is shared by all of OUT's runs, so
    that a compiled configuration pays its compilation once (docs/compile.md)."""
    cache = Path(path).parents[2] / ".compile_cache"
    return [*run_overrides(spec, seed, extra), f"hydra.run.dir={path}", f"paths.compile_cache={cache}",
            "print_summary=false", "trainer.enable_progress_bar=false", "logger=csv", "auto_resume=true"]


def _read(path: Path) -> dict:
    """A run's ``metrics.json``, with its ``ood`` section's numbers also as ``ood_<key>`` (what a claim names)."""
    record = json.loads(path.read_text()) if path.is_file() else {}
    if isinstance(record.get("ood"), dict):
        record.update({f"ood_{k}": v for k, v in record["ood"].items() if isinstance(v, (int, float))})
    return record


def train_run(out: Path, spec: RunSpec, seed: int, extra: Sequence[str] = (), threads: int | None = None
              ) -> RunResult:
    """Train one run, or read it back when it has finished. A run directory made by another command line is an
    error (one line), not silently reused."""
    path = run_path(out, spec, seed)
    overrides = run_overrides(spec, seed, extra)
    record = _read(path / RECORD)
    result = RunResult(spec, seed, path, wall_s=float(record.get("wall_s", 0.0)))
    if record and record.get("overrides") != overrides:
        result.error = (f"{path} was trained with other overrides ({' '.join(record.get('overrides', []))}); "
                        f"use another --out")
        return result
    if not (path / "metrics.json").is_file():
        path.mkdir(parents=True, exist_ok=True)
        (path / RECORD).write_text(json.dumps({"overrides": overrides, "wall_s": result.wall_s}, indent=2))
        start = time.perf_counter()
        code = run_module("disentangle.train", train_argv(spec, seed, path, extra), path / "train.log", threads=threads)
        result.wall_s += time.perf_counter() - start
        result.trained = True
        (path / RECORD).write_text(json.dumps({"overrides": overrides, "wall_s": result.wall_s}, indent=2))
        if code != 0 or not (path / "metrics.json").is_file():
            lines = [ln for ln in (path / "train.log").read_text(errors="replace").splitlines() if ln.strip()]
            result.error = f"{spec.key} seed {seed} failed ({path / 'train.log'}): {lines[-1] if lines else '?'}"
            return result
    result.metrics = _read(path / "metrics.json")
    return result


def evaluate_run(result: RunResult, n_samples: int) -> None:
    """Re-evaluate a finished run's last checkpoint on ``n_samples`` evaluation samples (its data's evaluation subset
    drawn at that size, its own estimators otherwise), written to ``<run>/eval<n>/`` and reused from there. The run's
    metrics become that evaluation's; keys it does not compute (Δ_ST) are kept. A failure is the run's error."""
    if result.error:
        return
    out = result.path / f"eval{n_samples}"
    if not (out / "metrics.json").is_file():
        result.error = _evaluate(result.path / "checkpoints" / "last.ckpt", n_samples, out)
        if result.error:
            return
    result.metrics = {**result.metrics, **_read(out / "metrics.json")}


def _evaluate(ckpt: Path, n_samples: int, out: Path) -> str | None:
    """What ``python -m disentangle.evaluate ckpt=CKPT callbacks.evaluation.n_samples=N`` computes, with the run's
    data config at ``eval_size=N``; None, or the one-line reason it failed."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from ..callbacks import EvaluationError
    from ..errors import ConfigError
    from ..runtime.checkpointing import load_checkpoint
    from ..runtime.config import one_line

    try:
        model, run, datamodule, state = load_checkpoint(ckpt, None, {"eval_size": n_samples})
        settings = OmegaConf.create(OmegaConf.to_container(run.callbacks.evaluation, resolve=True))
        settings.n_samples = n_samples
        evaluator = instantiate(settings, output_dir=out, progress=False)
        evaluator.run(model, datamodule, step=int(state.get("global_step", 0)))
    except (ConfigError, EvaluationError, ValueError) as exc:
        return f"re-evaluating {ckpt} on {n_samples} samples: {one_line(exc)}"
    return None


def measure_selection(claim: Claim, results: dict, progress: bool = False) -> None:
    """Δ_ST of every finished pool run of a selection claim, stored in its metrics.json (reused when stored)."""
    from ..reporting.selection import measure_run

    batches = int(claim.selection.get("batches", 1000))
    pool = {r.key for r in claim.runs()}
    for (key, _seed), result in sorted(results.items(), key=lambda kv: kv[0]):
        if key not in pool or result.error or "delta_st" in result.metrics:
            continue
        record = measure_run(result.path, n_batches=batches, batch_size=64, stream_seed=42, progress=progress)
        if record.error:
            result.error = f"Δ_ST of {result.path}: {record.error}"
        else:
            result.metrics = record.metrics


def schedule(runs: Sequence[RunSpec], seeds: Sequence[int]) -> list[tuple[RunSpec, int]]:
    """Seed by seed; within a seed the longest configurations first (they set the pace of side-by-side jobs)."""
    order = sorted(runs, key=lambda r: -r.seconds)
    return [(spec, seed) for seed in seeds for spec in order]


def train_all(out: Path, tasks: Sequence[tuple[RunSpec, int]], jobs: int = 1, extra: Sequence[str] = (),
              on_done: Callable[[RunResult], None] | None = None) -> dict:
    """Every task, ``jobs`` at a time; returns {(run key, seed): RunResult}."""
    cores = os.cpu_count() or 1
    threads = max(1, cores // max(1, jobs))
    results: dict = {}

    def one(task):
        spec, seed = task
        return train_run(out, spec, seed, extra, threads)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in as_completed([pool.submit(one, task) for task in tasks]):
            result = future.result()
            results[(result.spec.key, result.seed)] = result
            if on_done is not None:
                on_done(result)
    return results
