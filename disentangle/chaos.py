"""Entry point: ``python -m disentangle.chaos [--jobs 4] [--kills 4] [--seed 0] [--launcher basic|joblib] [DIR]``
(``make chaos``).

A chaos sweep: a local multirun of ``--jobs`` short runs with ``auto_resume=true`` is started, and a supervisor
SIGKILLs the whole sweep (its process group: the launcher and any joblib workers) at random times drawn from
``--seed``, relaunching the same sweep after each kill, until a launch finishes on its own (after ``--kills`` kills
at most, the sweep is left to finish). Then every job's ``metrics.json`` is compared with the one of its
uninterrupted twin (the same sweep run once without kills): every float must agree within ``--tolerance``. Prints
how many kills the sweep survived and exits 0 when every job matches its twin, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from .runtime.paths import checkout_root

# the sweeps run in the checkout when there is one (its copy of the package), else here (an installed wheel)
ROOT = checkout_root()

# short, deterministic runs on tiny networks: 4 checkpoints each, so kills land between them
JOB = ["model/arch=small", "data=shapes2d", "data.resolution=16", "model.batch_size=16", "trainer.max_steps=24",
       "+trainer.deterministic=true", "trainer.enable_progress_bar=false", "~callbacks.progress",
       "trainer.enable_model_summary=false", "callbacks.checkpoint.every_n_train_steps=6",
       "callbacks.evaluation.every_n_steps=12", "callbacks.evaluation.n_samples=128",
       "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.figures=false",
       "callbacks.evaluation.progress=false", "print_summary=false", "auto_resume=true"]


def sweep_command(sweep_dir: Path, jobs: int, launcher: str) -> list[str]:
    """The multirun: ``jobs`` runs of AE / QLAE / Tripod / β-VAE (cycled) with their own seeds."""
    models = ["ae", "qlae", "tripod", "betavae"]
    grid = [f"model={','.join((models * jobs)[:jobs])}"] if jobs <= len(models) else [
        f"model={','.join(models)}", f"seed={','.join(str(s) for s in range(-(-jobs // len(models))))}"]
    extra = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    return [sys.executable, "-m", "disentangle.train", "-m", *JOB, *grid, *extra, f"hydra.sweep.dir={sweep_dir}"]


def run_sweep(command: list[str], *, kill_after: float | None) -> tuple[bool, int | None]:
    """Run the sweep in a new process group; with ``kill_after`` seconds, SIGKILL the group then if it is still
    running. Returns (killed, exit code)."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=kill_after)
        return False, proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True, None


def job_metrics(sweep_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/metrics.json"))}


def compare(twin: dict[str, dict], chaos: dict[str, dict], tolerance: float) -> list[str]:
    """One line per difference between the uninterrupted and the killed sweep's final metrics."""
    problems = [f"{job}: no metrics.json" for job in twin if job not in chaos]
    for job, expected in twin.items():
        got = chaos.get(job)
        if got is None:
            continue
        for key, value in expected.items():
            timing = key in ("eval_seconds", "wall_seconds")
            if isinstance(value, float) and not timing and not abs(got.get(key, float("nan")) - value) <= tolerance:
                problems.append(f"{job}: {key} = {got.get(key)} after kills, {value} uninterrupted")
    return problems


def chaos(out: Path, *, jobs: int = 4, kills: int = 4, seed: int = 0, launcher: str = "basic",
          tolerance: float = 1e-6, min_wait: float = 3.0, max_wait: float = 15.0, log=print) -> dict:
    """Run the twin sweep, then the chaos sweep; returns {"kills", "launches", "jobs", "problems"}."""
    rng = random.Random(seed)
    out = Path(out).resolve()  # the sweeps may run in another directory (ROOT)
    twin_dir, chaos_dir = out / "uninterrupted", out / "chaos"
    log(f"uninterrupted sweep of {jobs} jobs -> {twin_dir}")
    killed, code = run_sweep(sweep_command(twin_dir, jobs, launcher), kill_after=None)
    if code != 0:
        raise RuntimeError(f"the uninterrupted sweep failed (exit {code}); see {twin_dir}")
    survived = launches = 0
    while True:
        launches += 1
        wait = rng.uniform(min_wait, max_wait) if survived < kills else None
        killed, code = run_sweep(sweep_command(chaos_dir, jobs, launcher), kill_after=wait)
        if killed:
            survived += 1
            done = len(job_metrics(chaos_dir))
            log(f"launch {launches}: killed after {wait:.1f} s ({done} of {jobs} jobs had finished)")
            continue
        if code != 0:
            raise RuntimeError(f"launch {launches} of the chaos sweep failed (exit {code}); see {chaos_dir}")
        log(f"launch {launches}: finished")
        break
    problems = compare(job_metrics(twin_dir), job_metrics(chaos_dir), tolerance)
    return {"kills": survived, "launches": launches, "jobs": jobs, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m disentangle.chaos", description=__doc__.split("\n\n")[1])
    p.add_argument("out", nargs="?", type=Path, default=Path("multirun") / f"chaos_{time.strftime('%Y%m%d_%H%M%S')}",
                   help="where the two sweeps go (default multirun/chaos_<time>)")
    p.add_argument("--jobs", type=int, default=4, help="jobs in the sweep (default 4)")
    p.add_argument("--kills", type=int, default=4, help="kills before the sweep is left to finish (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill times (default 0)")
    p.add_argument("--launcher", default="basic", choices=("basic", "joblib"),
                   help="basic: jobs one after another in the sweep process; joblib: 2 worker processes")
    p.add_argument("--tolerance", type=float, default=1e-6, help="largest difference allowed per metric")
    p.add_argument("--min-wait", type=float, default=3.0, help="shortest time before a kill, in seconds")
    p.add_argument("--max-wait", type=float, default=15.0, help="longest time before a kill, in seconds")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.kills < 0 or not 0 < args.min_wait <= args.max_wait:
        print("error: need --jobs >= 1, --kills >= 0 and 0 < --min-wait <= --max-wait", file=sys.stderr)
        return 2
    report = chaos(args.out, jobs=args.jobs, kills=args.kills, seed=args.seed, launcher=args.launcher,
                   tolerance=args.tolerance, min_wait=args.min_wait, max_wait=args.max_wait)
    for line in report["problems"]:
        print(f"mismatch: {line}")
    verdict = "every job matches its uninterrupted twin" if not report["problems"] else "MISMATCHES"
    print(f"chaos sweep: {report['jobs']} jobs survived {report['kills']} kills in {report['launches']} launches; "
          f"{verdict}")
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
