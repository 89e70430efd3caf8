"""``python -m disentangle.bench precision``: do bf16-mixed runs end where fp32 runs end?

Each model's quickstart (``experiment=quickstart``) is trained for every seed in both precisions, one
``python -m disentangle.train`` subprocess per run (a finished run's ``metrics.json`` is reused and a killed one
resumes from its last checkpoint, so an interrupted comparison goes on where it stopped). The table gives, per model and metric, fp32's and bf16's mean and standard
deviation over the seeds; bf16 counts as within fp32's seed spread when its mean is within two of fp32's seed
standard deviations of fp32's mean (``!`` marks one that is not). Also each precision's median wall time (which
only means something on an otherwise idle machine).
A benchmark, not a test: the figures go in docs/benchmarks.md and the closing note of issue 22.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("tripod", "qlae", "betavae", "betatcvae", "factorqvae", "dvae_friede", "infowgan_gp")
METRICS = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")
PRECISIONS = ("32-true", "bf16-mixed")


def run_one(out: Path, model: str, precision: str, seed: int, extra: list[str]) -> dict:
    """One quickstart run (or the record of a finished one): its metrics.json."""
    run_dir = out / model / precision / f"seed{seed}"
    record = run_dir / "metrics.json"
    if not record.is_file():
        cmd = [sys.executable, "-m", "disentangle.train", "experiment=quickstart", f"model={model}", f"seed={seed}",
               f"trainer.precision={precision}", f"hydra.run.dir={run_dir}", "print_summary=false",
               "trainer.enable_progress_bar=false", "logger=csv", "auto_resume=true", *extra]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not record.is_file():
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip().splitlines()[-1:]}")
        (run_dir / "bench_wall.json").write_text(json.dumps({"wall_seconds": time.perf_counter() - start}))
    values = json.loads(record.read_text())
    wall = run_dir / "bench_wall.json"
    if wall.is_file():
        values.update(json.loads(wall.read_text()))
    return values


SPREAD = 2.0  # bf16's mean within SPREAD x fp32's seed standard deviation of fp32's mean: "within the seed spread"


def compare_precisions(out: Path, models=MODELS, seeds=(0, 1, 2), extra: list[str] | None = None) -> bool:
    """Run (or read) every model x seed x precision, print the comparison; True when every bf16 mean is within
    fp32's seed spread (:data:`SPREAD`)."""
    from rich.console import Console
    from rich.table import Table

    out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], list[dict]] = {}
    total = len(models) * len(seeds) * len(PRECISIONS)
    done = 0
    for seed in seeds:  # seed-major: an interrupted comparison already has every model's first seeds
        for model in models:
            for precision in PRECISIONS:  # alternate, so a drift in the machine's speed hits both
                results.setdefault((model, precision), []).append(run_one(out, model, precision, seed, extra or []))
                done += 1
                print(f"[{done}/{total}] {model} seed {seed} {precision}", flush=True)
    table = Table(title=f"quickstart, seeds {list(seeds)}: fp32 mean ± sd / bf16-mixed mean ± sd")
    table.add_column("model")
    for key in METRICS:
        table.add_column(key, justify="right")
    table.add_column("wall, median (fp32 / bf16)", justify="right")
    ok = True
    summary = {}
    for model in models:
        row, record = [model], {}
        for key in METRICS:
            fp32 = [r[key] for r in results[(model, "32-true")] if key in r]
            bf16 = [r[key] for r in results[(model, "bf16-mixed")] if key in r]
            if not fp32 or not bf16:
                row.append("-")
                continue
            sd32 = statistics.stdev(fp32) if len(fp32) > 1 else 0.0
            sd16 = statistics.stdev(bf16) if len(bf16) > 1 else 0.0
            delta = statistics.mean(bf16) - statistics.mean(fp32)
            inside = abs(delta) <= SPREAD * sd32
            ok &= inside
            record[key] = {"fp32": fp32, "bf16": bf16, "delta": delta, "fp32_sd": sd32, "within_spread": inside,
                           "inside_fp32_range": min(fp32) <= statistics.mean(bf16) <= max(fp32)}
            row.append(f"{statistics.mean(fp32):.2f}±{sd32:.2f} / {statistics.mean(bf16):.2f}±{sd16:.2f}"
                       f"{'' if inside else ' !'}")
        walls = {p: [r["wall_seconds"] for r in results[(model, p)] if "wall_seconds" in r] for p in PRECISIONS}
        if all(walls.values()):
            fp32_wall, bf16_wall = (statistics.median(walls[p]) for p in PRECISIONS)
            record["wall_seconds"] = walls
            row.append(f"{fp32_wall:.0f} / {bf16_wall:.0f} s (x{fp32_wall / bf16_wall:.2f})")
        else:
            row.append("-")
        table.add_row(*row)
        summary[model] = record
    Console(width=200).print(table)
    print(f"'!': bf16's mean is more than {SPREAD:g} of fp32's seed standard deviations from fp32's mean")
    (out / "comparison.json").write_text(json.dumps(summary, indent=2))
    print(f"written: {out / 'comparison.json'}")
    return ok
