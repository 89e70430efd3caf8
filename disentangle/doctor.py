"""Check an accelerator: ``python -m disentangle.doctor [--quick] [--families NAME ...] [--skip-timing] [--json PATH]``.

What it does, in order, with a progress bar:

1. **devices**: the CPU (cores, oneDNN, whether bf16 is native: ``avx512_bf16``/``amx_bf16``) and every CUDA device
   (name, compute capability, memory, bf16, TF32), and which ``trainer.precision`` each can run;
2. **families**: every model family (:data:`disentangle.families.FAMILIES`) trains a few steps through the real
   config path (:func:`disentangle.run.train` on a composed config, small networks, 16x16 images) on each
   accelerator (the CPU, and CUDA when present) in ``32-true`` and ``bf16-mixed``; every logged loss term must be
   finite. On a GPU, the checkpoint is then evaluated on the GPU and on the CPU, which must give the same
   InfoMEC, DCI, PSNR (and MCC) within :data:`TOLERANCES`;
3. **timing**: seconds per training step of the paper configurations (:func:`disentangle.bench.time_steps`, batch
   64 at 64x64) in each precision. On a CPU only a few cheap ones by default (:data:`CPU_TIMING_CASES`; the
   others take several to tens of seconds per step there); ``--timing-cases all`` times every one;
4. **concurrency** (CUDA): k = 1, 2, 4, 8 processes train the QLAE paper step on one GPU at once; total steps/s for
   each k and the recommended ``runs_per_gpu`` (:func:`recommend_runs_per_gpu`) for ``hydra/launcher=gpu_node``;
5. **ddp** (two or more GPUs): a 2-process DDP run through ``python -m disentangle.train trainer=ddp`` must finish
   with finite losses.

It prints tables and writes everything to JSON (``--json``, default ``outputs/doctor.json``); what it could not run
here (no GPU, one GPU, a precision the device lacks, families or timing cases not selected) is named in the table
``skipped`` and under ``"skipped"`` in the JSON. Exit status 0 when every check that ran passed, 1 otherwise, 2 for
bad options (one line).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from .paths import checkout_root

__all__ = [
    "CPU_TIMING_CASES",
    "QUICK_FAMILIES",
    "TOLERANCES",
    "compare_evaluations",
    "describe_devices",
    "family_name",
    "main",
    "measure_concurrency",
    "print_report",
    "read_losses",
    "recommend_runs_per_gpu",
    "run_ddp_check",
    "run_family",
    "time_cases",
]

# runs start in the checkout when there is one (its copy of the package), else here (an installed wheel)
ROOT = checkout_root()
PRECISIONS = ("32-true", "bf16-mixed")
# paper configurations that take about a second or less per step on a CPU: the QLAE paper's networks and
# disentanglement_lib's (categorical and Gaussian latent); most others take several to tens of seconds per step
# there (a GAN is timed over 5 iterations of about 4 s each)
CPU_TIMING_CASES = ("qlae", "dvae_friede", "vae_friede")
# --quick: one family of each kind (latent quantizer, adversary, labelled stream, encoder-only, GAN)
QUICK_FAMILIES = ("qlae", "factorvae", "dvae_friede_masked", "cliff2d", "infowgan_gp")
# GPU and CPU evaluations of the same weights: |difference| allowed per metric (scores in [0, 1]; PSNR in dB). Not
# zero: float sums run in another order on the GPU, and a quantized latent on a code boundary may flip
TOLERANCES = {"infom": 0.02, "infoe": 0.02, "infoc": 0.02, "dci_d": 0.02, "dci_i": 0.02, "dci_c": 0.02,
              "psnr": 0.05, "mcc": 0.02}
CONCURRENCY_RUNS = (1, 2, 4, 8)
CONCURRENCY_CASE = "qlae"
NEAR_BEST = 0.05  # a k within 5% of the best total throughput is as good: the fewest such k is recommended

class DoctorError(ValueError):
    """A bad option: the doctor stops in one line before any work."""


# -- 1. devices ------------------------------------------------------------------------------------------------
def _cpu_info() -> tuple[str, set[str]]:
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):  # no /proc (macOS): the name from platform, no flags
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    return name, flags


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return None


def describe_devices() -> list[dict]:
    """The CPU and every CUDA device: names, memory, and which ``trainer.precision`` each runs (bf16 native or
    emulated on the CPU; bf16, fp16 and TF32 on CUDA)."""
    import torch

    name, flags = _cpu_info()
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    cpu = {
        "kind": "cpu", "name": name, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "memory_gib": _memory_gib(), "mkldnn": torch.backends.mkldnn.is_available(),
        "bf16": "native" if native else "emulated", "bf16_flags": native,
        "precisions": {"32-true": True, "bf16-mixed": True, "16-mixed": False},
        "note": (f"bf16 in hardware ({', '.join(native)})" if native else
                 "no avx512_bf16/amx_bf16: bf16 is emulated (correct, slower than fp32)")
        + ("" if torch.backends.mkldnn.is_available() else "; oneDNN unavailable"),
    }
    devices = [cpu]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            with torch.cuda.device(index):
                bf16 = bool(torch.cuda.is_bf16_supported())  # torch may count emulation (before Ampere) as support
            native = props.major >= 8  # Ampere and later: bf16 and TF32 in the tensor cores
            devices.append({
                "kind": "cuda", "index": index, "name": props.name, "capability": f"{props.major}.{props.minor}",
                "memory_gib": props.total_memory / 2**30, "multiprocessors": props.multi_processor_count,
                "bf16": "native" if bf16 and native else "emulated" if bf16 else "unsupported",
                "tf32_available": native,
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "precisions": {"32-true": True, "bf16-mixed": bf16, "16-mixed": True},
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "note": "" if bf16 and native else "bf16 emulated: slow" if bf16 else
                "no bf16: bf16-mixed runs are skipped",
            })
    return devices


# -- 2. families -----------------------------------------------------------------------------------------------
def family_name(choice: Sequence[str]) -> str:
    """A family's name on the command line and in the tables: its representative's model (or experiment) name."""
    return str(choice[-1]).split("=", 1)[1]


def _run_overrides(family, steps: int) -> list[str]:
    """A few steps on small networks, a small final evaluation, a checkpoint at the last step."""
    common = [
        f"trainer.max_steps={steps}", "trainer.enable_model_summary=false", "trainer.enable_progress_bar=false",
        "~callbacks.progress", "trainer.log_every_n_steps=1", "callbacks.evaluation.n_samples=256",
        "callbacks.evaluation.every_n_steps=0", "callbacks.evaluation.dci.max_depth=4",
        "callbacks.evaluation.dci.n_estimators=10", "callbacks.evaluation.dci.predictor=forest",
        "callbacks.evaluation.progress=false", "callbacks.evaluation.figures=false",
        f"callbacks.checkpoint.every_n_train_steps={steps}", "print_summary=false", "seed=0",
    ]
    if family.encoder_only:  # Cliff's 2-D points and an MLP encoder: no image options, MCC is its metric
        return [*common, "data.num_samples=256", "data.eval_size=128", "model.batch_size=64",
                "callbacks.evaluation.metrics=[mcc]", "callbacks.evaluation.periodic_metrics=[mcc]"]
    images = [*common, "data=shapes2d", "model/arch=small", "data.resolution=16", "model.batch_size=16",
              "callbacks.evaluation.metrics=[infomec,dci]", "callbacks.evaluation.periodic_metrics=[infomec]"]
    if family.labelled_stream:  # a small labelled set, so drawing it costs nothing
        images += ["model.regularizers.supervision.n_labels=40", "model.regularizers.supervision.batch_size=8"]
    return images


def _compose(overrides: Sequence[str], output_dir: Path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from .bench import CONF

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[*overrides, f"paths.output_dir={output_dir}"])


def read_losses(run_dir: Path) -> dict[str, list[float]]:
    """Every ``train/*`` term a run logged (``csv/metrics.csv``), column by column, in step order."""
    path = Path(run_dir) / "csv" / "metrics.csv"
    if not path.is_file():
        return {}
    terms: dict[str, list[float]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key and key.startswith("train/") and value not in ("", None):
                    terms.setdefault(key, []).append(float(value))
    return terms


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


_NOISE = (r".*isinstance\(treespec, LeafSpec\).*", "Using ModelCheckpoint with manual optimization")


@contextlib.contextmanager
def _quiet() -> Iterator[list]:
    """Lightning's info lines off the terminal (they would scroll the table away); warnings recorded, not shown."""
    names = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for noise in _NOISE:  # known and harmless (pyproject's pytest filters drop them too)
                warnings.filterwarnings("ignore", message=noise)
            yield caught
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def run_family(family, choice: Sequence[str], accelerator: str, precision: str, steps: int, workdir: Path,
               compare_on: str | None = None) -> dict:
    """Train ``family``'s representative ``steps`` steps on ``accelerator`` (``cpu``/``cuda``) in ``precision``
    through :func:`disentangle.run.train`; ``ok`` when it finished and every logged loss term is finite. With
    ``compare_on`` (``"cpu"`` after a GPU run) the checkpoint is also evaluated on the accelerator and on that
    device (:func:`compare_evaluations`)."""
    from .config import one_line
    from .families import family_label
    from .run import train

    name = family_name(choice)
    out = Path(workdir) / accelerator / precision / name
    record: dict = {"family": name, "kind": family_label(family), "family_fields": family._asdict(),
                    "config": list(choice),
                    "accelerator": accelerator, "precision": precision, "steps": steps, "run_dir": str(out)}
    overrides = [*_run_overrides(family, steps), *choice, f"trainer.accelerator={accelerator}",
                 f"trainer.precision={precision}"]
    start = time.perf_counter()
    with _quiet() as caught:
        try:
            result = train(_compose(overrides, out))
            record["error"] = None
        except Exception as exc:  # noqa: BLE001 - a family that fails is the finding: report it, check the rest
            result, record["error"] = {}, f"{type(exc).__name__}: {one_line(exc)}"
    record["seconds"] = time.perf_counter() - start
    record["warnings"] = sorted({" ".join(str(w.message).split())[:200] for w in caught})
    losses = read_losses(out)
    record["losses"] = {key: values[-1] for key, values in losses.items()}
    bad = sorted(key for key, values in losses.items() if not all(math.isfinite(v) for v in values))
    record["non_finite_terms"] = bad
    record["metrics"] = {key: value for key, value in result.items() if key in TOLERANCES}
    if record["error"] is None and not losses:
        record["error"] = "no training loss was logged (csv/metrics.csv)"
    elif record["error"] is None and bad:
        record["error"] = f"non-finite logged loss terms: {', '.join(bad)}"
    record["status"] = "ok" if record["error"] is None else "fail"
    if compare_on is not None:
        if record["status"] != "ok":
            record["cpu_check"] = {"status": "skipped", "reason": "training failed"}
        else:
            with _quiet():
                record["cpu_check"] = compare_evaluations(out / "checkpoints" / "last.ckpt",
                                                          (_torch_device(accelerator), compare_on))
            if record["cpu_check"]["status"] != "ok":
                record["status"] = "fail"
    return record


def _torch_device(accelerator: str) -> str:
    return "cuda" if accelerator in ("cuda", "gpu") else accelerator


def compare_evaluations(ckpt: Path, devices: tuple[str, str] = ("cuda", "cpu")) -> dict:
    """Evaluate the weights of ``ckpt`` with the run's own evaluation settings on each of the two ``devices`` and
    compare the metrics of :data:`TOLERANCES` (``ok`` when every difference is within its tolerance)."""
    import torch
    from hydra.utils import instantiate

    from .checkpointing import load_checkpoint
    from .config import one_line

    first, second = devices
    names = (first, second if second != first else f"{second} (again)")
    record: dict = {"devices": list(devices)}
    if "cuda" in devices:  # float32 products in TF32 would move the GPU's numbers: say whether they were on
        record["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    try:
        model, run, datamodule, raw = load_checkpoint(ckpt)
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for device in devices:
                model.to(device)
                evaluator = instantiate(run.callbacks.evaluation, output_dir=tmp, progress=False, figures=False)
                results.append(evaluator.run(model, datamodule, step=int(raw.get("global_step", 0)), write=False))
    except Exception as exc:  # noqa: BLE001 - an evaluation that fails on one device is the finding
        return {**record, "status": "fail", "error": f"{type(exc).__name__}: {one_line(exc)}"}
    keys = [k for k in TOLERANCES if k in results[0] and k in results[1]]
    metrics = {k: {names[0]: results[0][k], names[1]: results[1][k], "diff": abs(results[0][k] - results[1][k])}
               for k in keys}
    failed = [k for k, m in metrics.items() if not (m["diff"] <= TOLERANCES[k])]  # a NaN difference fails too
    error = f"beyond tolerance: {', '.join(failed)}" if failed else None if keys else "no metric to compare"
    return {**record, "status": "ok" if error is None else "fail", "metrics": metrics,
            "max_diff": max((m["diff"] for m in metrics.values()), default=None), "error": error}


# -- 3. timing -------------------------------------------------------------------------------------------------
def time_cases(labels: Sequence[str], device: str, precisions: Sequence[str], batch_size: int = 64,
               repeats: int = 10, warmup: int = 2, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Median seconds per training step (:func:`disentangle.bench.time_steps`) of each paper configuration in
    ``labels`` (labels of :data:`disentangle.bench.STEP_CASES`) in each precision, with each precision's ratio to
    QLAE's step (when QLAE is timed) and bf16's speed-up over fp32."""
    import torch

    from .bench import STEP_CASES, time_steps
    from .config import one_line

    cases = dict(STEP_CASES)
    rows = []
    for label in labels:
        row: dict = {"case": label, "overrides": cases[label], "seconds": {}, "errors": {}}
        for precision in precisions:
            if progress:
                progress(f"timing {label} on {device}, {precision}")
            with _quiet():
                try:
                    times = time_steps(cases[label], torch.device(device), batch_size, repeats, warmup,
                                       precision=precision)
                    row["seconds"][precision] = statistics.median(times)
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory: reported, the other cases go on
                    row["errors"][precision] = f"{type(exc).__name__}: {one_line(exc)}"
        rows.append(row)
    base = next((r["seconds"] for r in rows if r["case"] == "qlae"), {})
    for row in rows:
        row["vs_qlae"] = {p: s / base[p] for p, s in row["seconds"].items() if base.get(p)}
        fp32, bf16 = row["seconds"].get("32-true"), row["seconds"].get("bf16-mixed")
        row["bf16_speedup"] = fp32 / bf16 if fp32 and bf16 else None
        row["status"] = "fail" if row["errors"] else "ok"
    return rows


# -- 4. concurrent runs on one GPU -----------------------------------------------------------------------------
def recommend_runs_per_gpu(throughput: Mapping[int, float | None], near_best: float = NEAR_BEST) -> int:
    """The fewest concurrent runs whose total steps/s is within ``near_best`` (a fraction) of the best measured;
    k that failed (None) do not count. More runs than that cost memory and per-run latency for no real gain."""
    measured = {k: v for k, v in throughput.items() if v is not None and math.isfinite(v) and v > 0}
    if not measured:
        raise ValueError("no concurrency level was measured: nothing to recommend")
    best = max(measured.values())
    return min(k for k, v in measured.items() if v >= (1 - near_best) * best)


def _worker(args) -> int:
    """One of k concurrent runs: build the paper model, warm up, say ``ready``, wait for ``go`` on stdin, then time
    ``--steps`` training steps (the step of :func:`disentangle.bench.time_steps`) and print one JSON line."""
    import torch
    from hydra.utils import instantiate

    from .bench import DATASET_SIZE, STEP_CASES
    from .precision import autocast_for, float32_math

    device = torch.device(args.device)
    cfg = _compose([*dict(STEP_CASES)[args.case], "data=shapes2d", f"model.batch_size={args.batch_size}",
                    *args.override],
                   Path(tempfile.gettempdir()) / "disentangle-doctor-worker")
    model = instantiate(cfg.model, in_channels=3, resolution=args.resolution, dataset_size=DATASET_SIZE).to(device)
    if any(reg.needs_data for reg in model.regularizers.values()):
        from .data import ProceduralDataModule

        model.attach_data(ProceduralDataModule("shapes2d", eval_size=10))
    # TF32 on CUDA as a run of this model sets it (tf32: auto), as bench.StepTimer does
    float32_math(device.type, not any(reg.exact_float32 for reg in model.regularizers.values()))
    configured = model.configure_optimizers()
    optimizers, schedulers = configured if isinstance(configured, tuple) else ([configured], [])
    x = torch.rand(args.batch_size * (2 if model.split_batch else 1), 3, args.resolution, args.resolution,
                   device=device)
    period = model.steps_per_period

    def steps(n: int) -> None:
        for _ in range(n * period):
            with autocast_for(args.precision, device):
                model.optimization_step(x, optimizers)
            for scheduler in schedulers:
                scheduler.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps(args.warmup)
    print("ready", flush=True)
    sys.stdin.readline()  # every run starts timing at once
    start = time.time()
    steps(args.steps)
    end = time.time()
    print(json.dumps({"start": start, "end": end, "steps": args.steps * period}), flush=True)
    return 0


def measure_concurrency(device: str, runs: Sequence[int] = CONCURRENCY_RUNS, steps: int = 200,
                        batch_size: int = 64, precision: str = "32-true", case: str = CONCURRENCY_CASE,
                        resolution: int = 64, warmup: int = 3, workdir: Path | None = None,
                        timeout: float = 600, progress: Callable[[str], None] | None = None,
                        overrides: Sequence[str] = ()) -> dict:
    """For each k in ``runs``: k worker processes train ``case``'s step on ``device`` at once (each warmed up first,
    then all timed from one start); total steps/s over the window from the first start to the last end, per-run
    steps/s, the ratio to k = 1; the recommended ``runs_per_gpu``. Each worker gets cores // k torch threads, as
    under ``hydra/launcher=gpu_node``. A k that fails (out of memory) is recorded and larger k are not tried.
    ``overrides`` change the workers' model (tests: ``model/arch=small`` at a small ``resolution``)."""
    levels = []
    workdir = Path(workdir or tempfile.mkdtemp(prefix="doctor-concurrency-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for k in runs:
        if progress:
            progress(f"{k} concurrent run(s) of {case} on {device}")
        level = _concurrent_level(k, device, steps, batch_size, precision, case, resolution, warmup, workdir, timeout,
                                  overrides)
        levels.append(level)
        if level["error"]:
            break
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
    return {"status": status, "device": device, "case": case, "overrides": list(overrides), "steps": steps,
            "batch_size": batch_size, "precision": precision, "resolution": resolution, "levels": levels,
            "runs_per_gpu": recommended}


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
    command = [sys.executable, "-m", "disentangle.doctor", "--worker", "--device", device, "--case", case,
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


# -- 5. DDP ----------------------------------------------------------------------------------------------------
def run_ddp_check(accelerator: str, workdir: Path, steps: int = 4, timeout: float = 600) -> dict:
    """A 2-process DDP run of QLAE (``trainer=ddp trainer.devices=2``) through ``python -m disentangle.train`` on
    ``accelerator`` (``gpu``; ``cpu`` runs gloo processes): it must exit cleanly with finite logged losses."""
    from .families import FAMILIES

    family = next(f for f, choice in FAMILIES.items() if family_name(choice) == "qlae")
    run_dir = Path(workdir).resolve() / "ddp"
    overrides = [*_run_overrides(family, steps), "model=qlae", "trainer=ddp", "trainer.devices=2",
                 f"trainer.accelerator={accelerator}", "trainer.precision=32-true", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "disentangle.train", *overrides], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, check=False)
        error = None if proc.returncode == 0 else \
            f"exit status {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:300]}"
    except subprocess.TimeoutExpired:
        error = f"did not finish in {timeout:.0f} s"
    losses = read_losses(run_dir)
    bad = sorted(k for k, v in losses.items() if not all(math.isfinite(x) for x in v))
    if error is None and not losses:
        error = "no training loss was logged"
    elif error is None and bad:
        error = f"non-finite logged loss terms: {', '.join(bad)}"
    return {"status": "ok" if error is None else "fail", "accelerator": accelerator, "devices": 2, "steps": steps,
            "seconds": time.perf_counter() - start, "losses": {k: v[-1] for k, v in losses.items()},
            "error": error, "run_dir": str(run_dir)}


# -- the command -----------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        raise DoctorError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m disentangle.doctor",
                     description="Check this machine's accelerators: devices and precisions, every model family a few "
                                 "steps in fp32 and bf16 (finite losses; on a GPU, the same metrics as on the CPU), "
                                 "the paper configurations' steps, concurrent runs per GPU, DDP. Prints tables, "
                                 "writes JSON, names what it skipped.")
    parser.add_argument("--json", type=Path, default=Path("outputs/doctor.json"), help="where the report goes")
    parser.add_argument("--quick", action="store_true",
                        help=f"fewer families ({', '.join(QUICK_FAMILIES)}), 2 steps, QLAE's timing only, "
                             f"concurrency 1, 2, 4")
    parser.add_argument("--families", nargs="+", metavar="NAME",
                        help="only these families, by their representative's name (default: every one)")
    parser.add_argument("--accelerators", nargs="+", choices=("cpu", "cuda"),
                        help="where the families train (default: the CPU, and CUDA when present)")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS,
                        help="trainer.precision values (default: both)")
    parser.add_argument("--steps", type=int, help="training steps per family run (default 4; --quick 2)")
    parser.add_argument("--skip-timing", action="store_true", help="no timing of the paper configurations")
    parser.add_argument("--timing-cases", nargs="+", metavar="LABEL",
                        help="bench step labels to time, or 'all' (default: all on CUDA; "
                             f"{', '.join(CPU_TIMING_CASES)} on a CPU)")
    parser.add_argument("--timing-repeats", type=int, help="timed steps per case (default 10 on CUDA, 3 on a CPU)")
    parser.add_argument("--concurrency-runs", type=int, nargs="+", metavar="K",
                        help=f"concurrent runs to measure (default {' '.join(map(str, CONCURRENCY_RUNS))})")
    parser.add_argument("--concurrency-steps", type=int, default=None,
                        help="timed steps per concurrent run (default 200; --quick 50)")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary directory)")
    # testing: the concurrency measurement on another device (the CPU), smaller
    parser.add_argument("--concurrency-device", choices=("cpu", "cuda"), help=argparse.SUPPRESS)
    parser.add_argument("--concurrency-batch-size", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency-resolution", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency-override", action="append", default=[], help=argparse.SUPPRESS)
    # one of the concurrent runs (started by the doctor itself)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--case", default=CONCURRENCY_CASE, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--resolution", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="32-true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--override", action="append", default=[], help=argparse.SUPPRESS)
    return parser


def _check_options(args, cuda: bool) -> None:
    from .bench import STEP_CASES
    from .families import FAMILIES

    names = [family_name(c) for c in FAMILIES.values()]
    unknown = [n for n in args.families or () if n not in names]
    if unknown:
        raise DoctorError(f"--families {unknown[0]}: not a family; choose from {', '.join(names)}")
    labels = [label for label, _ in STEP_CASES]
    unknown = [c for c in args.timing_cases or () if c not in labels and c != "all"]
    if unknown:
        raise DoctorError(f"--timing-cases {unknown[0]!r}: not a bench step label; choose from 'all' or "
                          f"{', '.join(repr(label) for label in labels)}")
    if "cuda" in (args.accelerators or ()) and not cuda:
        raise DoctorError("--accelerators cuda: no CUDA device here (torch.cuda.is_available() is False)")
    for option in ("steps", "timing_repeats", "concurrency_steps", "concurrency_batch_size"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise DoctorError(f"--{option.replace('_', '-')} must be >= 1 (got {value})")
    if any(k < 1 for k in args.concurrency_runs or ()):
        raise DoctorError(f"--concurrency-runs must all be >= 1 (got {args.concurrency_runs})")


def _jsonable(value):
    """Non-finite floats as strings ("nan", "inf"): the JSON stays standard and a NaN loss stays visible."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class _Bar:
    """The progress bar's one task: calling it marks the previous unit of work done and names the next."""

    def __init__(self, progress, total: int):
        self.progress, self.task, self.open = progress, progress.add_task("doctor", total=total), False

    def __call__(self, description: str) -> None:
        self.done()
        self.open = True
        self.progress.update(self.task, description=description)

    def done(self) -> None:
        if self.open:
            self.progress.advance(self.task)
        self.open = False


def _timing_plan(args, cuda: bool, labels: list[str]) -> tuple[list[str], str | None]:
    """(the bench labels to time, why the others are not) from the options."""
    if args.skip_timing:
        return [], None
    if args.timing_cases and "all" not in args.timing_cases:
        timed, why = [label for label in labels if label in args.timing_cases], "not selected (--timing-cases)"
    elif args.timing_cases or (cuda and not args.quick):
        timed, why = list(labels), None
    elif args.quick:
        timed, why = ["qlae"], "--quick"
    else:
        timed, why = [label for label in labels if label in CPU_TIMING_CASES], "seconds to minutes per step on a CPU"
    if "qlae" not in timed:  # the baseline of the ratios
        timed.insert(0, "qlae")
    return timed, why


def _doctor(args, progress) -> dict:
    import torch

    from .bench import STEP_CASES
    from .families import FAMILIES
    from .precision import cuda_bf16_native

    cuda = torch.cuda.is_available()
    n_gpus = torch.cuda.device_count() if cuda else 0
    _check_options(args, cuda)
    cuda_bf16 = cuda and cuda_bf16_native()  # emulated bf16 is not run (precision.resolve_precision refuses it)
    steps = args.steps or (2 if args.quick else 4)
    report: dict = {"started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                    "command": ["python", "-m", "disentangle.doctor", *args.argv],
                    "python": platform.python_version(), "torch": torch.__version__, "skipped": []}

    def skip(check: str, reason: str) -> None:
        report["skipped"].append({"check": check, "reason": reason})

    report["devices"] = describe_devices()

    # the plan first, so the progress bar knows its length and the skipped list is complete
    accelerators = args.accelerators or (["cpu", "cuda"] if cuda else ["cpu"])
    if not cuda:
        skip("families on CUDA", "no CUDA device: the accelerator here is the CPU")
        skip("GPU vs CPU evaluation of the same weights", "no GPU: the CPU is the only device")
    names = [family_name(c) for c in FAMILIES.values()]
    chosen = args.families or (QUICK_FAMILIES if args.quick else names)
    families = [(f, c) for f, c in FAMILIES.items() if family_name(c) in chosen]
    left_out = [n for n in names if n not in chosen]
    if left_out:
        skip(f"{len(left_out)} families not selected", f"{', '.join(left_out)} (--families/--quick)")
    runs = []
    for accelerator in accelerators:
        for precision in args.precisions:
            if accelerator == "cuda" and precision == "bf16-mixed" and not cuda_bf16:
                skip("families on CUDA in bf16-mixed", f"{torch.cuda.get_device_name()} has no bf16")
            else:
                runs += [(f, c, accelerator, precision) for f, c in families]
    timing_device = "cuda" if cuda else "cpu"
    labels = [label for label, _ in STEP_CASES]
    timed, why = _timing_plan(args, cuda, labels)
    if args.skip_timing:
        skip("timing of the paper configurations", "--skip-timing")
    elif len(timed) < len(labels):
        skip(f"timing of {len(labels) - len(timed)} more paper configurations",
             f"{why}; --timing-cases all times them")
    timing_precisions = [p for p in args.precisions if not (p == "bf16-mixed" and timing_device == "cuda"
                                                            and not cuda_bf16)]
    concurrency_device = args.concurrency_device or ("cuda" if cuda else None)
    levels = args.concurrency_runs or ((1, 2, 4) if args.quick else CONCURRENCY_RUNS)
    if concurrency_device is None:
        skip("concurrent runs on one GPU (runs_per_gpu)", "no CUDA device")
    if n_gpus < 2:
        skip("2-process DDP", f"needs 2 or more GPUs ({n_gpus} visible)")
    bar = _Bar(progress, len(runs) + len(timed) * len(timing_precisions)
               + (len(levels) if concurrency_device else 0) + (n_gpus >= 2))

    workdir_context = contextlib.nullcontext(args.workdir) if args.workdir else \
        tempfile.TemporaryDirectory(prefix="disentangle-doctor-")
    with workdir_context as workdir:
        workdir = Path(workdir).resolve()  # the runs it starts may work in ROOT
        report["families"] = []
        for family, choice, accelerator, precision in runs:
            bar(f"{family_name(choice)} on {accelerator}, {precision}")
            record = run_family(family, choice, accelerator, precision, steps, workdir,
                                compare_on="cpu" if accelerator == "cuda" else None)
            report["families"].append(record)
            if record["status"] != "ok":
                problem = record["error"] or record.get("cpu_check", {}).get("error")
                progress.console.print(f"[red]FAIL[/red] {record['family']} on {accelerator}, {precision}: {problem}")

        report["timing"] = {"status": "skipped", "reason": "--skip-timing"}
        if timed:
            repeats = args.timing_repeats or (10 if timing_device == "cuda" else 3)
            warmup = 3 if timing_device == "cuda" else 1
            # each case sets TF32 as its runs would (tf32=auto: off with a Hessian penalty; bench.StepTimer)
            cases = time_cases(timed, timing_device, timing_precisions, 64, repeats, warmup, progress=bar)
            report["timing"] = {"status": "fail" if any(c["status"] != "ok" for c in cases) else "ok",
                                "device": timing_device, "batch_size": 64, "resolution": 64, "repeats": repeats,
                                "warmup": warmup, "cases": cases}
            if timing_device == "cuda":
                report["timing"]["tf32"] = "auto (per case: off for the Hessian penalties)"

        if concurrency_device:
            # what a sweep there would train in: bf16-mixed on a GPU that has it (trainer.precision=auto)
            precision = "bf16-mixed" if concurrency_device == "cuda" and cuda_bf16 else "32-true"
            report["concurrency"] = measure_concurrency(
                concurrency_device, levels, args.concurrency_steps or (50 if args.quick else 200),
                args.concurrency_batch_size, precision, resolution=args.concurrency_resolution,
                workdir=workdir / "concurrency", progress=bar, overrides=args.concurrency_override)
        else:
            report["concurrency"] = {"status": "skipped", "reason": "no CUDA device"}

        if n_gpus >= 2:
            bar("2-process DDP on the GPUs")
            with _quiet():
                report["ddp"] = run_ddp_check("gpu", workdir, steps)
        else:
            report["ddp"] = {"status": "skipped", "reason": f"needs 2 or more GPUs ({n_gpus} visible)"}
        bar.done()
        progress.update(bar.task, description="done")
        report["workdir"] = str(workdir) if args.workdir else None  # a temporary one is removed
    failures = [f"{r['family']} ({r['accelerator']}, {r['precision']})" for r in report["families"]
                if r["status"] != "ok"]
    failures += [name for name in ("timing", "concurrency", "ddp") if report[name].get("status") == "fail"]
    report["failures"], report["ok"] = failures, not failures
    return report


def _short_kind(fields: Mapping) -> str:
    parts = [fields["latent"]] if fields["model_class"] == "Autoencoder" else [fields["model_class"], fields["latent"]]
    parts += [flag for flag, on in (("2 updates", fields["several_updates"]), ("labels", fields["labelled_stream"]),
                                    ("no decoder", fields["encoder_only"])) if on]
    return ", ".join(parts)


def _cell(record: dict) -> str:
    if record["status"] == "ok":
        loss = record["losses"].get("train/loss")
        text = f"[green]ok[/green] {loss:.3g}" if loss is not None else "[green]ok[/green]"
        check = record.get("cpu_check")
        if check and check.get("max_diff") is not None:
            text += f"\nCPU eval Δ {check['max_diff']:.1e}"
        return text + f" ({record['seconds']:.1f} s)"
    check = record.get("cpu_check") or {}
    return f"[red]FAIL[/red] {(record['error'] or check.get('error') or '')[:80]}"


def print_report(report: dict, console) -> None:
    """The report as tables: devices, families x (accelerator, precision), timing, concurrency, DDP, skipped."""
    from rich.table import Table

    table = Table(title="devices")
    for column in ("device", "name", "memory", "precisions", "notes"):
        table.add_column(column)
    for d in report["devices"]:
        label = "cpu" if d["kind"] == "cpu" else f"cuda:{d['index']}"
        runs = ", ".join(p for p, ok in d["precisions"].items() if ok)
        detail = f"{d['cores']} cores, {d['torch_threads']} torch threads, bf16 {d['bf16']}" if d["kind"] == "cpu" \
            else f"sm {d['capability']}, bf16 {d['bf16']}, TF32 {'yes' if d['tf32_available'] else 'no'}"
        memory = f"{d['memory_gib']:.0f} GiB" if d.get("memory_gib") else "?"
        table.add_row(label, d["name"], memory, runs, "; ".join(x for x in (detail, d.get("note")) if x))
    console.print(table)

    if report["families"]:
        columns = list(dict.fromkeys((r["accelerator"], r["precision"]) for r in report["families"]))
        table = Table(title=f"families: {report['families'][0]['steps']} training steps each (last train/loss)")
        table.add_column("family")
        table.add_column("kind")
        for accelerator, precision in columns:
            table.add_column(f"{accelerator} {precision}")
        rows: dict[str, dict] = {}
        for r in report["families"]:
            rows.setdefault(r["family"], {"kind": _short_kind(r["family_fields"])})[(r["accelerator"],
                                                                                     r["precision"])] = r
        for name, row in rows.items():
            table.add_row(name, row["kind"], *(_cell(row[c]) if c in row else "-" for c in columns))
        console.print(table)

    timing = report.get("timing", {})
    if timing.get("cases"):
        precisions = list(dict.fromkeys(p for c in timing["cases"] for p in (*c["seconds"], *c["errors"])))
        table = Table(title=f"training step on {timing['device']}: batch {timing['batch_size']} at "
                            f"{timing['resolution']}x{timing['resolution']}, median of {timing['repeats']}")
        table.add_column("case")
        for p in precisions:
            table.add_column(f"{p} s/step", justify="right")
            table.add_column("x qlae", justify="right")
        table.add_column("bf16 speed-up", justify="right")
        for c in timing["cases"]:
            cells = []
            for p in precisions:
                if p in c["seconds"]:
                    cells += [f"{c['seconds'][p]:.4g}", f"{c['vs_qlae'].get(p, float('nan')):.2f}"]
                else:
                    cells += [f"[red]{c['errors'].get(p, '-')[:40]}[/red]", ""]
            speedup = f"{c['bf16_speedup']:.2f}" if c.get("bf16_speedup") else "-"
            table.add_row(c["case"], *cells, speedup)
        console.print(table)

    concurrency = report.get("concurrency", {})
    if concurrency.get("levels"):
        table = Table(title=f"concurrent {concurrency['case']} runs on one {concurrency['device']} device "
                            f"({concurrency['precision']}, batch {concurrency['batch_size']})")
        for column in ("runs", "total steps/s", "per run", "x one run"):
            table.add_column(column, justify="right")
        for lv in concurrency["levels"]:
            if lv["error"]:
                table.add_row(str(lv["runs"]), f"[red]{lv['error'][:60]}[/red]", "", "")
                continue
            per_run = statistics.mean(lv["per_run_steps_per_s"])
            ratio = f"{lv['vs_one_run']:.2f}" if lv.get("vs_one_run") else "-"
            table.add_row(str(lv["runs"]), f"{lv['total_steps_per_s']:.1f}", f"{per_run:.1f}", ratio)
        console.print(table)
        if concurrency.get("runs_per_gpu"):
            console.print(f"recommended: runs_per_gpu={concurrency['runs_per_gpu']} "
                          f"(python -m disentangle.train -m hydra/launcher=gpu_node "
                          f"runs_per_gpu={concurrency['runs_per_gpu']} ...)")
    ddp = report.get("ddp", {})
    if ddp.get("status") in ("ok", "fail"):
        console.print(f"2-process DDP: {'[green]ok[/green]' if ddp['status'] == 'ok' else '[red]FAIL[/red]'}"
                      f"{'' if ddp['status'] == 'ok' else ' ' + str(ddp['error'])} ({ddp['seconds']:.0f} s)")

    if report["skipped"]:
        table = Table(title="skipped")
        table.add_column("check")
        table.add_column("why")
        for s in report["skipped"]:
            table.add_row(s["check"], s["reason"])
        console.print(table)
    verdict = "[green]all checks passed[/green]" if report["ok"] else \
        f"[red]{len(report['failures'])} failed:[/red] {', '.join(report['failures'])}"
    console.print(verdict)


def main(argv: Sequence[str] | None = None) -> int:
    """The command: run the checks, print the tables, write the JSON report; 0 when every check that ran passed,
    1 when one failed, 2 for a bad option (one line on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        args.argv = argv
        if args.worker:
            return _worker(args)
        console = Console()
        start = time.perf_counter()
        columns = (TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            report = _doctor(args, progress)
    except DoctorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["wall_seconds"] = time.perf_counter() - start
    print_report(report, console)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(_jsonable(report), indent=2, allow_nan=False) + "\n")
    console.print(f"report: {args.json.resolve()}\nwall time: {report['wall_seconds']:.0f} s", highlight=False)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
