"""The doctor's fourth check (CUDA): k concurrent runs of one paper step on one device
(:mod:`disentangle.doctor.worker` processes), total steps/s for each k, and the recommended ``runs_per_gpu``."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .common import ROOT

CONCURRENCY_RUNS = (1, 2, 4, 8)
CONCURRENCY_CASE = "qlae"
NEAR_BEST = 0.05  # a k within 5% of the best total throughput is as good: the fewest such k is recommended


def recommend_runs_per_gpu(throughput: Mapping[int, float | None], near_best: float = NEAR_BEST) -> int:
    """The fewest concurrent runs whose total steps/s is within ``near_best`` (a fraction) of the best measured;
    k that failed (None) do not count. More runs than that cost memory and per-run latency for no real gain."""
    measured = {k: v for k, v in throughput.items() if v is not None and math.isfinite(v) and v > 0}
    if not measured:
        raise ValueError("no concurrency level was measured: nothing to recommend")
    best = max(measured.values())
    return min(k for k, v in measured.items() if v >= (1 - near_best) * best)


def measure_concurrency(device: str, runs: Sequence[int] = CONCURRENCY_RUNS, steps: int = 200,
                        batch_size: int = 64, precision: str = "32-true", case: str = CONCURRENCY_CASE,
                        resolution: int = 64, warmup: int = 3, workdir: Path | None = None,
                        timeout: float = 600, progress: Callable[[str], None] | None = None,
                        overrides: Sequence[str] = (), on_level: Callable[[dict], None] | None = None) -> dict:
    """For each k in ``runs``: k worker processes (:mod:`disentangle.doctor.worker`) train ``case``'s step on
    ``device`` at once (each warmed up first, then all timed from one start); total steps/s over the window
    from the first start to the last end, per-run steps/s, the ratio to k = 1; the recommended
    ``runs_per_gpu``. Each worker gets cores // k torch threads, as under ``hydra/launcher=gpu_node``. A k
    that fails (out of memory) is recorded and larger k are not tried. ``overrides`` change the workers' model
    (tests: ``model/arch=small`` at a small ``resolution``). ``on_level`` gets the result so far after each level
    (what a caller stopped at a time limit keeps)."""
    levels = []
    workdir = Path(workdir or tempfile.mkdtemp(prefix="doctor-concurrency-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {"device": device, "case": case, "overrides": list(overrides), "steps": steps, "batch_size": batch_size,
                "precision": precision, "resolution": resolution}
    for k in runs:
        if progress:
            progress(f"{k} concurrent run(s) of {case} on {device}")
        level = _concurrent_level(k, device, steps, batch_size, precision, case, resolution, warmup, workdir, timeout,
                                  overrides)
        levels.append(level)
        if on_level is not None:
            on_level(_summary(levels, runs, settings))
        if level["error"]:
            break
    return _summary(levels, runs, settings)


def _summary(levels: list[dict], runs: Sequence[int], settings: dict) -> dict:
    """The measurement over ``levels`` (so far): each level's ratio to one run, the recommendation, the status."""
    levels = [dict(level) for level in levels]
    throughput = {lv["runs"]: lv["total_steps_per_s"] for lv in levels}
    base = throughput.get(1)
    for level in levels:
        tps = level["total_steps_per_s"]
        level["vs_one_run"] = tps / base if tps and base else None
    try:
        recommended = recommend_runs_per_gpu(throughput)
    except ValueError:
        recommended = None
    failed = [lv for lv in levels if lv["error"]]
    # a failure at a large k (memory) is a limit, not a fault, as long as something was measured
    status = "ok" if recommended is not None and not (failed and failed[0]["runs"] == runs[0]) else "fail"
    return {"status": status, **settings, "levels": levels, "runs_per_gpu": recommended}


def _wait_ready(proc: subprocess.Popen) -> bool:
    """Read a worker's output up to its ``ready`` line (anything a library printed before it is skipped); False
    when it ended without one."""
    for line in proc.stdout:
        if line.strip() == "ready":
            return True
    return False


def _concurrent_level(k, device, steps, batch_size, precision, case, resolution, warmup, workdir, timeout,
                      overrides) -> dict:
    threads = max(1, (os.cpu_count() or 1) // k)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "disentangle.doctor.worker", "--device", device, "--case", case,
               "--steps", str(steps), "--batch-size", str(batch_size), "--precision", precision,
               "--resolution", str(resolution), "--warmup", str(warmup), *(f"--override={o}" for o in overrides)]
    procs, logs = [], []
    for i in range(k):
        logs.append(open(workdir / f"worker-k{k}-{i}.log", "w"))  # noqa: SIM115 - closed below, after the run
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=logs[-1], text=True))
    watchdog = threading.Timer(timeout, lambda: [p.kill() for p in procs])  # a hung worker cannot hang the doctor
    watchdog.start()
    level: dict = {"runs": k, "threads_per_run": threads, "total_steps_per_s": None, "per_run_steps_per_s": [],
                   "error": None}
    try:
        ready = [_wait_ready(p) for p in procs]
        if all(ready):
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
        else:
            for p in procs:
                p.kill()
        outputs = [p.communicate()[0] for p in procs]
    finally:
        watchdog.cancel()
        for f in logs:
            f.close()
    results = []
    for i, (p, out) in enumerate(zip(procs, outputs)):
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if p.returncode != 0 or not lines:
            tail = (workdir / f"worker-k{k}-{i}.log").read_text().strip().splitlines()
            reason = tail[-1] if tail else f"exit status {p.returncode}"
            level["error"] = f"run {i + 1} of {k} failed: {reason[:300]}"
            return level
        results.append(json.loads(lines[-1]))
    window = max(r["end"] for r in results) - min(r["start"] for r in results)
    level["total_steps_per_s"] = sum(r["steps"] for r in results) / window
    level["per_run_steps_per_s"] = [r["steps"] / (r["end"] - r["start"]) for r in results]
    return level
