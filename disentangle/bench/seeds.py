"""``python -m disentangle.bench precision``: do bf16-mixed runs end where fp32 runs end? (``--compile``: do compiled
runs end where eager runs end?)

Each model's quickstart (``experiment=quickstart``) is trained for every seed in both variants, one
``python -m disentangle.train`` subprocess per run (a finished run's ``metrics.json`` is reused and a killed one
resumes from its last checkpoint, so an interrupted comparison goes on where it stopped). The table gives, per model and metric, fp32's and bf16's mean and standard
deviation over the seeds; bf16 (compiled) counts as within fp32's (eager's) seed spread when its mean is within two
of the reference's seed standard deviations of its mean (``!`` marks one that is not). Also each variant's median
wall time (which only means something on an otherwise idle machine).
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
# (name, overrides): the reference first. Precision runs keep trainer.compile's default (auto: eager at this length).
PRECISION_VARIANTS = (("32-true", ["trainer.precision=32-true"]), ("bf16-mixed", ["trainer.precision=bf16-mixed"]))
COMPILE_VARIANTS = (("eager", ["trainer.compile=false"]), ("compiled", ["trainer.compile=true"]))


def run_one(out: Path, model: str, variant: str, seed: int, extra: list[str], overrides=None) -> dict:
    """One quickstart run (or the record of a finished one): its metrics.json. ``variant`` names the run's directory;
    its ``overrides`` default to ``trainer.precision=<variant>``."""
    run_dir = out / model / variant / f"seed{seed}"
    record = run_dir / "metrics.json"
    if overrides is None:
        overrides = [f"trainer.precision={variant}"]
    if not record.is_file():
        cmd = [sys.executable, "-m", "disentangle.train", "experiment=quickstart", f"model={model}", f"seed={seed}",
               *overrides, f"hydra.run.dir={run_dir}", "print_summary=false",
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


SPREAD = 2.0  # the variant's mean within SPREAD x the reference's seed standard deviation of its mean


def compare_precisions(out: Path, models=MODELS, seeds=(0, 1, 2), extra: list[str] | None = None) -> bool:
    """fp32 against bf16-mixed (:func:`compare_variants`)."""
    return compare_variants(out, models, seeds, extra, PRECISION_VARIANTS)


def compare_compiled(out: Path, models=MODELS, seeds=(0, 1, 2), extra: list[str] | None = None) -> bool:
    """Eager against compiled, both in float32 (:func:`compare_variants`)."""
    return compare_variants(out, models, seeds, extra, COMPILE_VARIANTS)


def compare_variants(out: Path, models, seeds, extra: list[str] | None, variants) -> bool:
    """Run (or read) every model x seed x variant, print the comparison; True when every second variant's mean is
    within the first's seed spread (:data:`SPREAD`)."""
    from rich.console import Console
    from rich.table import Table

    (ref, _), (other, _) = variants
    out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], list[dict]] = {}
    total = len(models) * len(seeds) * len(variants)
    done = 0
    for seed in seeds:  # seed-major: an interrupted comparison already has every model's first seeds
        for model in models:
            for name, overrides in variants:  # alternate, so a drift in the machine's speed hits both
                results.setdefault((model, name), []).append(
                    run_one(out, model, name, seed, extra or [], overrides))
                done += 1
                print(f"[{done}/{total}] {model} seed {seed} {name}", flush=True)
    table = Table(title=f"quickstart, seeds {list(seeds)}: {ref} mean ± sd / {other} mean ± sd")
    table.add_column("model")
    for key in METRICS:
        table.add_column(key, justify="right")
    table.add_column(f"wall, median ({ref} / {other})", justify="right")
    ok = True
    summary = {}
    for model in models:
        row, record = [model], {}
        for key in METRICS:
            base = [r[key] for r in results[(model, ref)] if key in r]
            alt = [r[key] for r in results[(model, other)] if key in r]
            if not base or not alt:
                row.append("-")
                continue
            sd_base = statistics.stdev(base) if len(base) > 1 else 0.0
            sd_alt = statistics.stdev(alt) if len(alt) > 1 else 0.0
            delta = statistics.mean(alt) - statistics.mean(base)
            inside = abs(delta) <= SPREAD * sd_base
            ok &= inside
            record[key] = {ref: base, other: alt, "delta": delta, f"{ref}_sd": sd_base, "within_spread": inside,
                           f"inside_{ref}_range": min(base) <= statistics.mean(alt) <= max(base)}
            row.append(f"{statistics.mean(base):.2f}±{sd_base:.2f} / {statistics.mean(alt):.2f}±{sd_alt:.2f}"
                       f"{'' if inside else ' !'}")
        walls = {name: [r["wall_seconds"] for r in results[(model, name)] if "wall_seconds" in r]
                 for name, _ in variants}
        if all(walls.values()):
            base_wall, alt_wall = (statistics.median(walls[name]) for name, _ in variants)
            record["wall_seconds"] = walls
            row.append(f"{base_wall:.0f} / {alt_wall:.0f} s (x{base_wall / alt_wall:.2f})")
        else:
            row.append("-")
        table.add_row(*row)
        summary[model] = record
    Console(width=200).print(table)
    print(f"'!': {other}'s mean is more than {SPREAD:g} of {ref}'s seed standard deviations from {ref}'s mean")
    (out / "comparison.json").write_text(json.dumps(summary, indent=2))
    print(f"written: {out / 'comparison.json'}")
    return ok
