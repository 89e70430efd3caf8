"""Every GPU of a node, several runs per GPU: where each job of a sweep runs.

``hydra/launcher=gpu_node`` (conf/hydra/launcher/gpu_node.yaml) runs ``max(1, N) * runs_per_gpu`` jobs at once on a
node with N visible GPUs (:func:`concurrent_jobs`, registered as the ``gpu_node_jobs`` resolver), and each job
places itself with :func:`job_placement`: it takes a free **slot** of the N x ``runs_per_gpu`` slots (slot s = GPU
``s // runs_per_gpu``), held by an exclusive lock on a file in the sweep's directory for as long as the job runs and
released when it ends, however it ends (the kernel drops a dead process's locks). So no GPU ever runs more than
``runs_per_gpu`` jobs of the sweep at once, whatever their lengths. Job i tries a slot of GPU ``i mod N`` first, so
jobs of equal length land as they always did; a job that finds it busy takes the next free slot. With no GPU
everything stays on the CPU and the jobs share the cores.

``DISENTANGLE_SIMULATE_GPUS=N`` is a **simulation**, for tests and dry runs on a CPU machine: :func:`visible_gpus`
then answers N, the placement (and the launcher's concurrency) is computed as if N GPUs were present and recorded in
``metrics.json`` (``"simulated_gpus": true``), but training runs on the CPU.

Kept import-light (torch only inside the functions) so that the config resolvers can import it without slowing
``--help`` or ``--cfg job``.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException
from omegaconf.errors import InterpolationResolutionError

from ..errors import ConfigError

__all__ = [
    "GPU_ACCELERATORS",
    "SIMULATE_VARIABLE",
    "SLOTS_DIR",
    "LauncherConfigError",
    "Placement",
    "acquire_slot",
    "check_gpu_request",
    "check_runs_per_gpu",
    "concurrent_jobs",
    "describe_node",
    "gpu_share",
    "job_number",
    "job_placement",
    "launcher_jobs",
    "release_slot",
    "simulated_gpus",
    "visible_gpus",
]

log = logging.getLogger(__name__)

SIMULATE_VARIABLE = "DISENTANGLE_SIMULATE_GPUS"
# trainer.accelerator values under which a job is placed on a GPU when there is one
GPU_ACCELERATORS = ("auto", "gpu", "cuda")


def simulated_gpus() -> int | None:
    """N from ``DISENTANGLE_SIMULATE_GPUS=N`` (a simulation: placement as if N GPUs were present, training on the
    CPU), or None when the variable is unset or empty. A value that is not an integer >= 0 fails in one line."""
    value = os.environ.get(SIMULATE_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ConfigError(f"{SIMULATE_VARIABLE} must be a number of GPUs >= 0 (got {value!r})")
    return int(value)


def visible_gpus() -> int:
    """The number of GPUs this process sees: ``torch.cuda.device_count()`` (which honours
    ``CUDA_VISIBLE_DEVICES``), or N under the simulation ``DISENTANGLE_SIMULATE_GPUS=N``."""
    simulated = simulated_gpus()
    if simulated is not None:
        return simulated
    import torch

    return int(torch.cuda.device_count())


def check_runs_per_gpu(value: Any) -> int:
    """``runs_per_gpu`` as an int, or a one-line ConfigError naming the key when it is not an integer >= 1."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit() or int(text) < 1:
        raise ConfigError(f"runs_per_gpu must be an integer >= 1 (got {value!r}): the number of jobs that share "
                          f"one GPU under hydra/launcher=gpu_node")
    return int(text)


class LauncherConfigError(ConfigError, InterpolationResolutionError, CompactHydraException):
    """A bad ``gpu_node`` setting found by the ``gpu_node_jobs`` resolver, before any job starts. OmegaConf passes an
    InterpolationResolutionError through a resolver unwrapped and Hydra prints a CompactHydraException as its message
    alone, so the sweep stops with this one line rather than a traceback."""


def concurrent_jobs(runs_per_gpu: Any, devices: Any = 1, accelerator: Any = "auto", overrides: Any = ()) -> int:
    """How many jobs ``hydra/launcher=gpu_node`` runs at once: ``max(1, N) * runs_per_gpu`` for N visible GPUs (on a
    CPU-only machine, ``runs_per_gpu`` jobs share the cores). The ``gpu_node_jobs`` config resolver; it also refuses,
    in one line before any job, ``runs_per_gpu`` < 1, ``runs_per_gpu`` swept on the command line (``overrides``:
    the launcher is sized once, for the whole sweep) and more GPUs requested (``trainer.devices``) than present."""
    try:
        runs = check_runs_per_gpu(runs_per_gpu)
        _check_not_swept("runs_per_gpu", overrides)
        n_gpus = visible_gpus()
        check_gpu_request(accelerator, devices, n_gpus)
    except ConfigError as exc:
        raise LauncherConfigError(str(exc)) from None
    return max(1, n_gpus) * runs


def _check_not_swept(key: str, overrides: Any) -> None:
    """A command-line override of ``key`` that is a sweep (``key=1,4``, ``range(...)``, ...) fails in one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in overrides or ():
        if str(text).lstrip("+~").split("=", 1)[0] != key:
            continue
        if parser.parse_override(str(text)).is_sweep_override():
            raise ConfigError(f"{text}: {key} sizes the launcher once for the whole sweep; give one value (run one "
                              f"sweep per value)")


def job_number() -> int:
    """This job's index in its sweep (Hydra's ``hydra.job.num``); 0 for a single run or a config composed outside
    Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return 0
        num = HydraConfig.get().job.get("num")
        return int(num) if num is not None else 0
    except Exception:  # noqa: BLE001 - a missing or unresolvable hydra.job.num: not in a sweep
        return 0


def launcher_jobs() -> int | None:
    """The launcher's concurrency (``hydra.launcher.n_jobs``, joblib's meaning: -1 is every core) when this job was
    started by a launcher that has one (joblib, gpu_node), else None."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        n_jobs = HydraConfig.get().launcher.get("n_jobs")
    except Exception:  # noqa: BLE001 - no Hydra context, or a launcher without n_jobs
        return None
    if n_jobs is None:
        return None
    n_jobs = int(n_jobs)
    return n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) + 1 + n_jobs)


def gpu_share() -> int:
    """How many concurrent jobs of this sweep share one GPU: ``ceil(n_jobs / N)`` under a launcher that runs
    ``n_jobs`` at once (``runs_per_gpu`` under ``gpu_node``), 1 otherwise. ``data.on_device=auto`` divides the
    device's free memory by it."""
    n_jobs = launcher_jobs()
    if not n_jobs:
        return 1
    return max(1, -(-n_jobs // max(1, visible_gpus())))


@dataclass
class Placement:
    """Where a job runs: ``trainer_kwargs`` go to the Lightning Trainer (``{}`` when nothing changes), ``record`` is
    written into the run's ``metrics.json`` (``model.runtime``)."""

    trainer_kwargs: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)


def _requested_devices(devices: Any) -> tuple[int | None, list[int] | None]:
    """(count, explicit indices) of ``trainer.devices``: an int or digit string is a count, a list or a
    comma-separated string names GPUs, -1 / "-1" / "auto" is every GPU (None, None)."""
    if isinstance(devices, str):
        text = devices.strip().lower()
        if text in ("auto", "-1"):
            return None, None
        if "," in text or "[" in text:
            return None, [int(p) for p in text.strip("[]").split(",") if p.strip()]
        devices = int(text)
    if isinstance(devices, int):
        return (None, None) if devices == -1 else (devices, None)
    return None, [int(d) for d in devices]


def check_gpu_request(accelerator: Any, devices: Any, n_gpus: int) -> tuple[int | None, list[int] | None] | None:
    """What a job asks of the GPUs, checked against the ``n_gpus`` present: None when it runs elsewhere
    (``trainer.accelerator`` cpu or another kind, or auto with no GPU), else ``trainer.devices`` as (count, explicit
    indices), (None, None) meaning every GPU. More GPUs requested than present fails in one line."""
    accelerator = str(accelerator).lower()
    if accelerator not in GPU_ACCELERATORS or (n_gpus == 0 and accelerator == "auto"):
        return None
    if n_gpus == 0:
        raise ConfigError(f"trainer.accelerator={accelerator}: more GPUs requested than present (0 visible); "
                          f"use trainer.accelerator=cpu or auto")
    try:
        count, explicit = _requested_devices(devices)
    except (TypeError, ValueError):
        raise ConfigError(f"trainer.devices={devices!r}: expected a number of GPUs, a list of GPU indices, -1 or "
                          f"auto") from None
    if count is not None and count < 1:
        raise ConfigError(f"trainer.devices={count}: expected a number of GPUs >= 1, a list of GPU indices, -1 or "
                          f"auto")
    if count is not None and count > n_gpus:
        raise ConfigError(f"trainer.devices={count}: more GPUs requested than present ({n_gpus} visible)")
    if explicit is not None and (not explicit or max(explicit) >= n_gpus or min(explicit) < 0):
        raise ConfigError(f"trainer.devices={explicit}: more GPUs requested than present (GPUs 0 to {n_gpus - 1} "
                          f"visible)")
    return count, explicit


def job_placement(cfg) -> Placement:
    """Place this job: with N visible GPUs and a GPU accelerator (``trainer.accelerator`` auto/gpu/cuda), job i
    (Hydra's ``hydra.job.num``) of a single-GPU multirun takes a free slot (:func:`acquire_slot`; GPU ``i mod N``
    when that one is free), a single run trains on GPU 0; with no GPU, or
    ``trainer.accelerator=cpu``, nothing changes. A job that asks for several GPUs (``trainer.devices`` > 1, a list,
    or -1) keeps them as Lightning picks them. Under the simulation (``DISENTANGLE_SIMULATE_GPUS``) the placement is
    only recorded and training runs on the CPU.

    Bad input fails in one line, before any work: ``runs_per_gpu`` < 1, a GPU accelerator with no GPU present, or
    more GPUs requested (``trainer.devices``) than present."""
    import torch

    runs = check_runs_per_gpu(cfg.get("runs_per_gpu", 1))
    simulated = simulated_gpus() is not None
    n_gpus = visible_gpus()
    job = job_number()
    trainer = cfg.get("trainer") or {}
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    record: dict[str, Any] = {"job": job, "n_gpus": n_gpus, "runs_per_gpu": runs}
    if simulated:
        record["simulated_gpus"] = True
    n_jobs = launcher_jobs()
    if n_jobs is not None:
        record["concurrent_jobs"] = n_jobs
    # joblib's worker processes already cap OMP_NUM_THREADS (hence torch's threads) at cores // n_jobs
    record["torch_threads"] = torch.get_num_threads()
    request = check_gpu_request(accelerator, trainer.get("devices", 1), n_gpus)
    if request is None:  # the CPU (no GPU, or asked for), or another accelerator (mps, tpu): left as configured
        record["device"] = "cpu" if accelerator in GPU_ACCELERATORS else accelerator
        # the simulation promises CPU training even where accelerator=auto would find a real GPU
        return Placement({"accelerator": "cpu"} if simulated and accelerator == "auto" else {}, record)
    count, explicit = request
    if count == 1:
        sweep_dir = sweep_directory(cfg)
        if sweep_dir is not None:  # a multirun job: a free slot, so no GPU runs more than runs_per_gpu jobs at once
            # first choice: GPU i mod N (its (i // N)-th slot), so equal jobs land as they always did
            first = (job % n_gpus) * runs + (job // n_gpus) % runs
            slot = acquire_slot(sweep_dir / SLOTS_DIR, n_gpus * runs, first)
            gpu = slot // runs
            record["slot"] = slot
        else:
            gpu = job % n_gpus
        record["device"] = f"cuda:{gpu}"
        record["placed_at"] = time.time()
        # simulated: trained on the CPU, only the placement is recorded
        return Placement({"accelerator": "cpu"} if simulated else {"accelerator": "gpu", "devices": [gpu]}, record)
    # several GPUs (DDP) or the user's own list: kept as given
    gpus = explicit if explicit is not None else list(range(count if count is not None else n_gpus))
    record["device"] = ",".join(f"cuda:{g}" for g in gpus)
    if (n_jobs or 1) > 1:
        log.warning("trainer.devices=%s: concurrent multi-GPU jobs share the same GPUs; run such sweeps with "
                    "hydra/launcher=local", trainer.get("devices"))
    return Placement({"accelerator": "cpu", "devices": len(gpus)} if simulated else {}, record)


_HELD_SLOT: dict[str, Any] = {}  # this process's slot lock (one job at a time per process)
SLOTS_DIR = ".gpu_slots"  # in the sweep's directory


def acquire_slot(directory: Path, n_slots: int, first: int, timeout_s: float = 3600.0) -> int:
    """An exclusive lock on one of ``n_slots`` slot files in ``directory``, tried from ``first`` on (then round the
    others), waiting while all are held; returns the slot. The lock lives until :func:`release_slot` or the
    process's end (a killed job frees its slot)."""
    import fcntl

    release_slot()
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        for k in range(n_slots):
            slot = (first + k) % n_slots
            handle = open(directory / f"slot{slot}.lock", "a+")  # noqa: SIM115 - held open for the job's lifetime
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            _HELD_SLOT["handle"] = handle
            return slot
        if time.monotonic() > deadline:
            raise ConfigError(f"no free GPU slot in {directory} after {timeout_s:.0f} s: more jobs than GPUs x "
                              f"runs_per_gpu are running (another sweep in the same directory?)")
        time.sleep(0.2)


def release_slot() -> None:
    """Give back this process's slot, if it holds one (the end of a job; a worker process runs the next job)."""
    handle = _HELD_SLOT.pop("handle", None)
    if handle is not None:
        handle.close()


def sweep_directory(cfg) -> Path | None:
    """The directory of this job's sweep (the parent of the job's output directory) in a multirun, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized() or str(HydraConfig.get().mode) != "RunMode.MULTIRUN":
            return None
    except Exception:  # noqa: BLE001 - no Hydra context: a single run
        return None
    return Path(str(cfg.paths.output_dir)).parent


def describe_node(runs_per_gpu: int | str = 1) -> str:
    """One line on the node's layout under ``hydra/launcher=gpu_node``: GPUs (simulated or not), concurrent jobs,
    the job-to-GPU rule and the CPU threads each job gets."""
    runs = check_runs_per_gpu(runs_per_gpu)
    n_gpus, jobs, cores = visible_gpus(), concurrent_jobs(runs), os.cpu_count() or 1
    kind = " (simulated: training runs on the CPU)" if simulated_gpus() is not None else ""
    where = f"each job on a free slot of {n_gpus} x {runs}, cuda:(slot // {runs})" if n_gpus else "every job on the CPU"
    return (f"{n_gpus} GPU(s){kind}, {runs} run(s) per GPU: {jobs} concurrent job(s), {where}; {cores} CPU core(s), "
            f"{max(1, cores // jobs)} torch thread(s) per job")


if __name__ == "__main__":  # python -m disentangle.foundation.devices [runs_per_gpu]: the node's layout
    import sys

    try:
        print(describe_node(sys.argv[1] if len(sys.argv) > 1 else 1))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
