"""``dry_run=true``: the jobs a run or a sweep would start, without starting them.

``python -m disentangle.train -m -cd sweeps -cn tripod_table1 dry_run=true`` composes the sweep as Hydra would and
expands it into the jobs its sweeper would launch (Hydra's basic sweeper: ``hydra.sweeper.params``, then the command
line's sweeps), composes each job's config once (a job that would fail is named in one line), and prints how many
jobs there are, the keys that vary, each job's values, its time estimated from the measured step figures
(:mod:`~disentangle.runtime.step_figures`) and its output directory. Nothing trains and nothing is launched, whatever
``hydra/launcher`` says; nothing is written (no sweep directory, no ``.hydra``); torch is not imported. Without
``-m`` it shows the single run.

Why not ``--cfg job``: it prints the config the sweep file composes to, which is none of the sweep's jobs (its
``data`` is ``train.yaml``'s default), and Hydra refuses ``--cfg`` together with ``-m``.
"""
from __future__ import annotations

import copy
import heapq
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ..checks import PRECISION_ALIASES
from ..errors import ConfigError
from ..foundation.devices import GPU_ACCELERATORS, SIMULATE_VARIABLE, simulated_gpus
from . import config
from .paths import PACKAGE, config_dir
from .step_figures import (
    BENCH_BATCH,
    BENCH_RESOLUTION,
    DISCRETE_LATENTS,
    EVALUATION,
    SIGNATURES,
    STEP_TABLES,
    StepTable,
    signature,
)

__all__ = ["KEY", "Job", "Plan", "main", "plan", "render", "requested"]

KEY = "dry_run"
WIDTH = 120  # the report's lines at most (a narrower terminal, or COLUMNS, narrows them)
# Hydra's other commands: with one of them dry_run=true is a value of the config they show, not a request
_OTHER_COMMANDS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")
_LABEL_OF = {sig: label for label, sig in SIGNATURES.items()}


def requested(args: Sequence[str]) -> bool:
    """Whether the command line asks for a dry run: its last ``dry_run=`` override is anything but false (a typo or
    a sweep of it is refused by :func:`main` rather than run for real). Cheap: only the arguments are read."""
    if any(a.split("=", 1)[0] in _OTHER_COMMANDS for a in args):
        return False
    values = [a.split("=", 1)[1] for a in args
              if "=" in a and not a.startswith(("-", "~")) and config.override_key(a) == KEY]
    return bool(values) and values[-1].strip().lower() != "false"


# ---- the plan: the jobs, their configs and estimates --------------------------------------------------------------

@dataclass
class Estimate:
    """A job's estimated time, or why there is none (``missing``)."""

    seconds: float | None = None  # training + evaluation
    step_s: float | None = None  # the figure used (scaled to the job's batch when ``scaled``)
    scaled: bool = False  # from the batch-64 figure in proportion to the job's batch size (CPU)
    table: StepTable | None = None
    evaluation_s: float | None = None
    missing: str | None = None  # why no step figure applies
    case: str = ""  # the bench case (or the model) that the reason is about
    evaluation_missing: str | None = None


@dataclass
class Job:
    """One job the sweeper would launch."""

    num: int
    overrides: list[str]
    output_dir: str = ""
    steps: int | None = None
    device: str = ""
    precision: str = ""
    compile: str = ""
    estimate: Estimate = field(default_factory=Estimate)
    error: str | None = None  # the one line when its config does not compose


@dataclass
class Launch:
    """Where and how many at once the launcher would run the jobs (read from its config; nothing is launched)."""

    name: str  # the hydra/launcher choice
    at_once: int | None  # None: not known from the config
    remote: bool = False  # the jobs run on other machines (Slurm)
    gpus_per_job: int = 0  # Slurm: GPUs each job asks for
    own_device: bool = False  # each job alone on its device, so the figures hold with several at once
    timeout_s: float | None = None  # Slurm's time limit per job
    text: str = ""


@dataclass
class Plan:
    """What ``dry_run=true`` found: the jobs and how they would run."""

    multirun: bool
    sweeper: str
    jobs: list[Job]
    launch: Launch
    sweep_dir: str | None
    searched: dict[str, str] = field(default_factory=dict)  # a sweeper that picks values as it goes: key -> space
    picked_as_it_goes: bool = False
    gpus_here: int = 0

    @property
    def failures(self) -> list[str]:
        return [f"job {job.num} ({' '.join(_shown(job.overrides)) or 'no overrides'}): {job.error}"
                for job in self.jobs if job.error]


class DryRunError(ConfigError):
    """The command line cannot be composed: one line, exit 2, as for a run."""


def plan(args: Sequence[str]) -> Plan:
    """Compose the command line ``args`` (Hydra's, after :func:`disentangle.train.cli`'s rewriting) and every job
    it would start, as Hydra's sweeper and launcher would compose them; nothing is created on disk."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import compute_search_path_dir, create_config_search_path, get_args_parser
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.utils import setup_globals
    from hydra.types import RunMode

    parsed = get_args_parser().parse_args(list(args))
    value = next((o.split("=", 1)[1] for o in reversed(parsed.overrides) if config.override_key(o) == KEY), "")
    if value.strip().lower() != "true":
        raise DryRunError(f"{KEY}={value}: choose {KEY}=true (list the jobs, run nothing) or {KEY}=false")
    line = config.misspelt_addition(args) or config.misspelt_sweep_value(args)
    if line:
        raise DryRunError(line)
    primary = str(config_dir())
    if parsed.config_path is not None:  # -cp: as hydra.main resolves it, against disentangle/train.py
        primary = compute_search_path_dir(str(PACKAGE / "train.py"), None, parsed.config_path)
    search_path = create_config_search_path(primary)
    if parsed.config_dir is not None:
        extra = os.path.abspath(parsed.config_dir)
        if not os.path.isdir(extra):
            raise DryRunError(f"Additional config directory '{extra}' not found")
        search_path.prepend(provider="command-line", path=f"file://{extra}",
                            anchor=SearchPathQuery(provider="schema"))
    setup_globals()
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(task_name="train", config_search_path=search_path)
    name = parsed.config_name or "train"
    overrides = list(parsed.overrides)
    multirun = parsed.multirun or hydra.get_mode(config_name=name, overrides=overrides) == RunMode.MULTIRUN
    try:
        cfg = hydra.compose_config(name, overrides, run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN)
        HydraConfig.instance().set_config(cfg)
        launch = _launch(cfg) if multirun else Launch("none", 1, text="a single run")
    except Exception as exc:  # Hydra's and OmegaConf's errors: the run's one line
        raise DryRunError(config.mistake_line(exc, args) or config.one_line(exc)) from exc

    task = [str(o) for o in OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)]
    gpus = gpus_here()
    if not multirun:
        job = Job(0, task)
        _compose(job, cfg, lambda: cfg, "hydra.run.dir", None, launch, gpus)
        return Plan(False, "none", [job], launch, None, gpus_here=gpus)

    sweep_dir = str(OmegaConf.select(cfg, "hydra.sweep.dir"))  # resolved once, as the launcher does (${now:})
    sweeper = str(cfg.hydra.sweeper.get("_target_", "?")).rsplit(".", 1)[-1]
    parser = OverridesParser.create(config_loader=hydra.config_loader)
    params = cfg.hydra.sweeper.get("params") or {}
    if sweeper == BasicSweeper.__name__:
        try:
            parsed_overrides = parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + task)
            batches = BasicSweeper.split_arguments(parsed_overrides, cfg.hydra.sweeper.get("max_batch_size"))
        except Exception as exc:
            raise DryRunError(config.mistake_line(exc, args) or config.one_line(exc)) from exc
        jobs = [Job(num, list(o)) for num, o in enumerate(o for batch in batches for o in batch)]
        composer = JobComposer(hydra.config_loader, cfg, [job.overrides for job in jobs])
        for job in jobs:
            _compose(job, cfg, lambda job=job: composer(job.overrides), "hydra.sweep.dir", "hydra.sweep.subdir",
                     launch, gpus)
        return Plan(True, sweeper, jobs, launch, sweep_dir, gpus_here=gpus)

    # a sweeper that picks each job from the results before it (Optuna): how many, and the space it searches
    searched = {str(k): str(v) for k, v in params.items()}
    fixed = []
    for text in task:
        override = parser.parse_override(text)
        if override.is_sweep_override():
            searched[override.get_key_element()] = override.get_value_element_as_str()
        else:
            fixed.append(text)
    n_trials = cfg.hydra.sweeper.get("n_trials")
    jobs = [Job(num, list(fixed)) for num in range(int(n_trials) if isinstance(n_trials, int) else 1)]
    composer = JobComposer(hydra.config_loader, cfg, [job.overrides for job in jobs])  # the same config each
    for job in jobs:
        _compose(job, cfg, lambda job=job: composer(job.overrides), "hydra.sweep.dir", "hydra.sweep.subdir",
                 launch, gpus)
        if job.error:  # the same config for every trial: one line is enough
            del jobs[job.num + 1:]
            break
    return Plan(True, sweeper, jobs, launch, sweep_dir, searched, picked_as_it_goes=True, gpus_here=gpus)


class JobComposer:
    """Each job's config as Hydra's launcher composes it (``load_sweep_config``: the config again, with the job's
    overrides), composing once per distinct choice of config groups: jobs that differ only in values (``seed=0,1,2``)
    get a copy of that composition with their value overrides applied by Hydra's own override step, as its
    composition applies them after the groups'. Composing takes a quarter of a second; a copy a hundredth."""

    def __init__(self, loader, primary: DictConfig, jobs: Sequence[Sequence[str]]):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader, self.primary = loader, primary
        self.parser = OverridesParser.create(config_loader=loader)
        self.bases: dict[tuple[str, ...], DictConfig | Exception] = {}
        # how many jobs each composition still serves: the last one takes it without a copy
        self.uses = Counter(self._groups(self.parser.parse_overrides(list(o))) for o in jobs)

    def _by_groups(self, override) -> bool:
        """Whether ``override`` chooses configs (a group, a package, hydra's own), rather than setting a value."""
        return (override.is_hydra_override() or override.package is not None
                or self.loader.repository.group_exists(override.key_or_group))

    def _groups(self, parsed) -> tuple[str, ...]:
        return tuple(o.input_line for o in parsed if self._by_groups(o))

    def __call__(self, overrides: Sequence[str]) -> DictConfig:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

        parsed = self.parser.parse_overrides(list(overrides))
        groups = self._groups(parsed)
        if groups not in self.bases:
            try:
                self.bases[groups] = self.loader.load_sweep_config(self.primary, list(groups))
            except Exception as exc:  # noqa: BLE001  (every job of these groups fails alike)
                self.bases[groups] = exc
        base = self.bases[groups]
        self.uses[groups] -= 1
        if isinstance(base, Exception):
            raise base
        cfg = copy.deepcopy(base) if self.uses[groups] > 0 else self.bases.pop(groups)
        ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if not self._by_groups(o)], cfg)
        app = [o for o in parsed if not o.is_hydra_override()]
        dirname = cfg.hydra.job.config.override_dirname
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in app]
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=app, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
        return cfg


def _compose(job: Job, primary: DictConfig, compose, dir_key: str, subdir_key: str | None, launch: Launch,
             gpus: int) -> None:
    """Compose ``job`` (``compose()``), its output directory as the launcher's run_job names it, its resolved
    values (a resolution error is the job's too) and its estimate."""
    from hydra.core.hydra_config import HydraConfig

    try:
        cfg = compose()
        if cfg is not primary:
            with open_dict(cfg):
                cfg.hydra.job.id = job.num
                cfg.hydra.job.num = job.num
        where = OmegaConf.to_container(OmegaConf.select(cfg, dir_key.rsplit(".", 1)[0]), resolve=False)
        if "${hydra:" in str(where):  # the directory names read the job's own hydra node
            HydraConfig.instance().set_config(cfg)
        out = str(OmegaConf.select(cfg, dir_key))
        if subdir_key is not None:
            out = os.path.join(out, str(OmegaConf.select(cfg, subdir_key)))
        job.output_dir = out
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = os.path.abspath(out)  # what ${hydra:runtime.output_dir} gives the job
        HydraConfig.instance().set_config(cfg)
        values = {}
        for key in cfg:  # every value resolved, as the job would read them (hydra's own node aside)
            if key != "hydra":
                node = cfg[key]
                values[key] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        choices = OmegaConf.to_container(cfg.hydra.runtime.choices, resolve=False)
    except Exception as exc:  # noqa: BLE001  (a job that would fail to start: named, the others still listed)
        job.error = config.mistake_line(exc, job.overrides) or config.one_line(exc)
        return
    _estimate(job, values, choices, launch, gpus)


# ---- where the jobs run ------------------------------------------------------------------------------------------

def gpus_here() -> int:
    """The GPUs this machine shows a job, read without torch: ``/proc/driver/nvidia/gpus`` (the driver's list),
    narrowed by ``CUDA_VISIBLE_DEVICES``; none under ``DISENTANGLE_SIMULATE_GPUS`` (a simulation trains on the CPU)."""
    if simulated_gpus() is not None:
        return 0
    driver = Path("/proc/driver/nvidia/gpus")
    present = len(list(driver.iterdir())) if driver.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    listed = 0
    for entry in visible.split(","):  # CUDA stops at the first invalid entry
        if not entry.strip() or entry.strip().startswith("-"):
            break
        listed += 1
    return min(listed, present)


def _launch(cfg: DictConfig) -> Launch:
    """The launcher's concurrency and placement, from its config alone (nothing is instantiated or launched)."""
    choice = str(cfg.hydra.runtime.choices.get("hydra/launcher") or "basic")
    launcher = cfg.hydra.launcher
    target = str(launcher.get("_target_", "")).rsplit(".", 1)[-1]
    cores = os.cpu_count() or 1
    if target == "BasicLauncher":
        return Launch(choice, 1, text=f"hydra/launcher={choice}: one after another, on this machine")
    if target == "JoblibLauncher":
        n_jobs = _joblib_jobs(launcher)
        at_once = cores + 1 + n_jobs if n_jobs < 0 else n_jobs  # joblib: -1 = every core
        return Launch(choice, max(1, at_once), text=f"hydra/launcher={choice}: {max(1, at_once)} at once, on this "
                                                    f"machine")
    if target == "SlurmLauncher":
        gres = str(launcher.get("gres") or "")
        gpus = int(launcher.get("gpus_per_node") or launcher.get("gpus_per_task") or 0)
        if not gpus and "gpu" in gres:
            gpus = int(gres.rsplit(":", 1)[-1]) if gres.rsplit(":", 1)[-1].isdigit() else 1
        parallel = int(launcher.get("array_parallelism") or 256)
        timeout = launcher.get("timeout_min")
        where = f"{gpus} GPU(s) each" if gpus else "no GPU"
        return Launch(choice, parallel, remote=True, gpus_per_job=gpus, own_device=True,
                      timeout_s=float(timeout) * 60 if timeout else None,
                      text=f"hydra/launcher={choice}: Slurm jobs, {where}, up to {parallel} at once "
                           f"(array_parallelism) as the cluster grants them")
    if target == "LocalLauncher":
        return Launch(choice, None, text=f"hydra/launcher={choice}: submitit processes on this machine")
    return Launch(choice, None, text=f"hydra/launcher={choice}: how many it runs at once is not known here")


def _joblib_jobs(launcher) -> int:
    """``n_jobs`` of a joblib launcher, resolved; ``gpu_node``'s resolver counts the GPUs with torch, so it is given
    the count read without torch (the simulation variable) while it resolves."""
    if SIMULATE_VARIABLE in os.environ:
        return int(launcher.n_jobs)
    os.environ[SIMULATE_VARIABLE] = str(gpus_here())
    try:
        return int(launcher.n_jobs)
    finally:
        os.environ.pop(SIMULATE_VARIABLE, None)


# ---- the estimate ---------------------------------------------------------------------------------------------

def _estimate(job: Job, values: dict, choices: dict, launch: Launch, gpus: int) -> None:
    """``job``'s device, precision and time from its resolved config: steps x the measured step time of its bench
    case (:data:`~disentangle.runtime.step_figures.SIGNATURES`) on that device, plus its evaluations' metrics."""
    trainer, model, data = values.get("trainer") or {}, values.get("model") or {}, values.get("data") or {}
    steps = trainer.get("max_steps")
    job.steps = steps if isinstance(steps, int) and steps >= 0 else None
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator == "cpu":
        job.device = "cpu"
    elif accelerator in GPU_ACCELERATORS:
        has_gpu = launch.gpus_per_job > 0 if launch.remote else gpus > 0
        job.device = "cuda" if has_gpu else "cpu"
    else:
        job.device = accelerator
    precision = str(trainer.get("precision", "auto"))
    precision = PRECISION_ALIASES.get(precision, precision)
    job.precision = ("bf16-mixed" if job.device == "cuda" else "32-true") if precision == "auto" else precision
    job.compile = str(trainer.get("compile", "auto")).lower()
    estimate = job.estimate
    label = _LABEL_OF.get(signature(choices))
    table = next((t for t in STEP_TABLES if t.device == job.device and t.precision == job.precision
                  and t.compiled == (job.compile == "true") and label in t.seconds), None)
    batch, resolution = model.get("batch_size"), data.get("resolution")
    estimate.case = label or str(choices.get("model"))
    if job.steps is None:
        estimate.missing = "no step count (trainer.max_steps)"
    elif label is None:
        estimate.missing = "no bench case with these model and regularizer choices (bench steps)"
        estimate.case = signature(choices)
    elif table is None:
        kind = "compiled" if job.compile == "true" else "eager"
        estimate.missing = f"no measured figure on {job.device}, {job.precision}, {kind}"
    elif not isinstance(batch, int) or batch < 1:
        estimate.missing = f"no batch size (model.batch_size={batch})"
    elif resolution != BENCH_RESOLUTION:
        estimate.missing = f"measured at {BENCH_RESOLUTION}x{BENCH_RESOLUTION}, not {resolution}x{resolution}"
    elif batch != BENCH_BATCH and job.device != "cpu":
        estimate.missing = f"measured at batch {BENCH_BATCH}, not {batch}, on {job.device}"
    else:
        estimate.table = table
        estimate.step_s = table.seconds[label]
        if batch != BENCH_BATCH:  # a CPU step is compute-bound: in proportion to the batch
            estimate.step_s *= batch / BENCH_BATCH
            estimate.scaled = True
        estimate.seconds = job.steps * estimate.step_s
    evaluation = (values.get("callbacks") or {}).get("evaluation")
    if estimate.seconds is not None and isinstance(evaluation, dict):
        every = evaluation.get("every_n_steps")
        count = (job.steps // every if isinstance(every, int) and every > 0 else 0) + 1  # periodic ones, final one
        metrics = _names(evaluation.get("metrics")) | _names(evaluation.get("periodic_metrics"))
        samples = evaluation.get("n_samples") or data.get("eval_size")
        latent = str((model.get("latent") or {}).get("_target_", "")).rsplit(".", 1)[-1]
        if job.device != EVALUATION.device:
            estimate.evaluation_missing = f"evaluation: no measured figure on {job.device}"
        elif not metrics <= EVALUATION.metrics or samples != EVALUATION.samples:
            estimate.evaluation_missing = (f"evaluation of {', '.join(sorted(metrics))} on {samples} samples: no "
                                           f"measured figure")
        else:
            estimate.evaluation_s = count * EVALUATION.seconds[latent in DISCRETE_LATENTS]
            estimate.seconds += estimate.evaluation_s


def _names(metrics) -> set[str]:
    """A metric setting as names: a list, one name, ``all`` or nothing."""
    if isinstance(metrics, str):
        return {metrics}
    return {str(m) for m in metrics or ()}


# ---- the report ------------------------------------------------------------------------------------------------

def duration(seconds: float) -> str:
    """A duration the way a person reads it: 45 s, 12 min, 5.2 h, 59.7 d, 3.1 years."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds < 730 * 86400:
        return f"{seconds / 86400:.1f} d"
    return f"{seconds / (365.25 * 86400):.1f} years"


def width() -> int:
    """The report's width: the terminal's (``COLUMNS`` where set), at most :data:`WIDTH`; 120 through a pipe."""
    import shutil

    return max(60, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def _shown(overrides: Sequence[str]) -> list[str]:
    """The overrides a reader wants to see: not ``dry_run=true`` itself."""
    return [o for o in overrides if config.override_key(o) != KEY]


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key, value


def _varying(jobs: Sequence[Job]) -> tuple[dict[str, list[str]], list[str]]:
    """The keys whose value differs between jobs (with their values, in order of first use) and the overrides that
    every job has."""
    values: dict[str, list[str]] = {}
    for job in jobs:
        for key, value in map(_split, _shown(job.overrides)):
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    counts = Counter(key for job in jobs for key, _ in map(_split, _shown(job.overrides)))
    varying = {k: v for k, v in values.items() if len(v) > 1 or counts[k] != len(jobs)}
    common = [f"{k}={v[0]}" for k, v in values.items() if k not in varying]
    return varying, common


def _wrap(head: str, items: Sequence[str], indent: int, sep: str = ", ") -> list[str]:
    """``head`` then ``items`` joined by ``sep``, wrapped at :func:`width` under an indent."""
    text = " ".join(part for part in (head.strip(), sep.join(items)) if part)
    lead = " " * (len(head) - len(head.lstrip()))
    return textwrap.wrap(text, width(), initial_indent=lead, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False) or [head]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _table(jobs: Sequence[Job], varying: dict[str, list[str]], sweep_dir: str | None, steps_vary: bool) -> list[str]:
    columns = ["#", *varying, *(["steps"] if steps_vary else []), "s/step", "est. time", "output dir"]
    rows = []
    for job in jobs:
        mine = dict(map(_split, _shown(job.overrides)))
        est = job.estimate
        if job.error:
            step, time = "", "error"
        elif est.seconds is None:
            step, time = "", "–"
        else:
            step = f"{est.step_s:.4g}" + ("~" if est.scaled else "")
            time = ("~" if est.scaled else "") + duration(est.seconds)
        out = job.output_dir
        if sweep_dir and out.startswith(sweep_dir.rstrip("/") + "/"):
            out = out[len(sweep_dir.rstrip("/")) + 1:]
        steps = [f"{job.steps:,}" if job.steps is not None else "?"] if steps_vary else []
        rows.append([str(job.num), *(mine.get(k, "") for k in varying), *steps, step, time, out])
    widths = [min(28, max(len(c), *(len(r[i]) for r in rows))) for i, c in enumerate(columns[:-1])]
    room = width() - 2 - sum(w + 2 for w in widths)
    right = {0, len(columns) - 3, len(columns) - 2} | ({len(columns) - 4} if steps_vary else set())

    def line(cells):
        parts = [_fit(c, w).rjust(w) if i in right else _fit(c, w).ljust(w) for i, (c, w) in
                 enumerate(zip(cells[:-1], widths))]
        return ("  " + "  ".join(parts) + "  " + _fit(cells[-1], max(10, room))).rstrip()

    return [line(columns), *(line(r) for r in rows)]


def render(p: Plan) -> str:
    """The report: how many jobs, what varies, each job (values, estimate, output dir), the totals."""
    jobs = p.jobs
    n = len(jobs)
    lines = []
    if p.picked_as_it_goes:
        lines += _wrap(f"{n} job{'s' if n != 1 else ''} (the {p.sweeper} picks each job's values from the results "
                       f"before it: they are not known until it runs); {p.launch.text}", [], 2)
        lines += _wrap("searched:", [f"{k}: {v}" for k, v in p.searched.items()], 2)
    elif p.multirun:
        lines += _wrap(f"{n} job{'s' if n != 1 else ''} (Hydra's basic sweeper); {p.launch.text}", [], 2)
    else:
        lines.append("1 job (no -m: a single run)")
    varying, common = _varying(jobs)
    if varying and not p.picked_as_it_goes:
        lines.append(f"keys that vary ({len(varying)}):")
        for key, values in varying.items():
            lines += _wrap(f"  {key} ({len(values)}):", values, 4)
    if common:
        lines += _wrap("every job:" if n > 1 else "overrides:", common, 2)
    if p.sweep_dir:
        lines += _wrap(f"outputs: {p.sweep_dir}/<output dir below>, relative to {os.getcwd()}", [], 2)
    elif not p.multirun:
        lines += _wrap(f"output dir: {jobs[0].output_dir}, relative to {os.getcwd()}", [], 2)
    lines += _basis(jobs, p)
    lines.append("")
    steps = {job.steps for job in jobs if not job.error}
    lines += _table(jobs, {} if p.picked_as_it_goes else varying, p.sweep_dir, len(steps) > 1)
    lines.append("")
    lines += _notes(jobs)
    lines += _totals(jobs, p)
    lines.append("nothing was run or written (dry_run=true)")
    return "\n".join(lines)


def _basis(jobs: Sequence[Job], p: Plan) -> list[str]:
    """Where the figures come from: the jobs' device, precision and compile setting, each table's machine."""
    ok = [job for job in jobs if not job.error]
    if not ok:
        return []
    settings = Counter((job.device, job.precision, job.compile) for job in ok)
    gpus = f"{p.gpus_here} GPU(s)" if p.gpus_here else "no GPU"
    here = "the Slurm nodes" if p.launch.remote else f"this machine ({gpus}, {os.cpu_count()} CPU cores)"
    lines = []
    for (device, precision, compile_), count in settings.items():
        of = "" if count == len(ok) else f" ({count} jobs)"
        rule = " (trainer.compile=auto decides at the start: eager figures)" if compile_ == "auto" else ""
        lines += _wrap(f"estimates{of}:", [f"{device} on {here}", precision,
                                           f"{'compiled' if compile_ == 'true' else 'eager'}{rule}"], 2)
    tables: list[StepTable] = []
    for table in (j.estimate.table for j in ok if j.estimate.table is not None):
        if all(table is not t for t in tables):
            tables.append(table)
    for table in tables:
        lines += _wrap("  steps measured on", [f"{table.machine}: {table.source}"], 4)
    if any(j.estimate.evaluation_s is not None for j in ok):
        each = (f"each {EVALUATION.seconds[True]} s (discrete latents) or {EVALUATION.seconds[False]} s, "
                f"{EVALUATION.machine}: {EVALUATION.source}")
        lines += _wrap("  evaluations:", [each], 4)
    return lines


def _notes(jobs: Sequence[Job]) -> list[str]:
    """Why some jobs have no estimate, once per reason, and the scaled ones."""
    lines = []
    reasons: dict[str, dict[str, int]] = {}
    for job in jobs:
        if job.estimate.missing and not job.error:
            cases = reasons.setdefault(job.estimate.missing, {})
            cases[job.estimate.case] = cases.get(job.estimate.case, 0) + 1
    for reason, cases in reasons.items():
        count = sum(cases.values())
        lines += _wrap(f"– {count} job{'s' if count != 1 else ''} without an estimate, {reason}:", list(cases), 4,
                       sep="; ")
    scaled = sum(1 for j in jobs if j.estimate.scaled)
    if scaled:
        lines.append(f"~ {scaled} job(s): the batch-{BENCH_BATCH} CPU figure scaled to the job's batch size")
    for reason, count in Counter(j.estimate.evaluation_missing for j in jobs
                                 if j.estimate.evaluation_missing).items():
        lines += _wrap(f"  {count} job{'s' if count != 1 else ''}: {reason} (not counted)", [], 4)
    return lines


def _totals(jobs: Sequence[Job], p: Plan) -> list[str]:
    known = [j.estimate.seconds for j in jobs if j.estimate.seconds is not None]
    unknown = len(jobs) - len(known)
    but = f" ({unknown} job{'s' if unknown != 1 else ''} without an estimate not counted)" if unknown else ""
    if not known:
        return [f"total: no estimate{but}"]
    total = sum(known)
    if len(jobs) == 1:
        lines = [f"total: {duration(total)}{but}"]
    elif p.launch.at_once == 1:
        lines = [f"total: {duration(total)}, one after another{but}"]
    else:
        lines = [f"total: {duration(total)} of compute{but}"]
        at_once = p.launch.at_once
        if at_once is None:
            lines.append("  how many run at once is not known from the launcher's config: no wall time")
        elif p.launch.own_device or (all(j.device == "cuda" for j in jobs) and at_once <= p.gpus_here):
            lines.append(f"  {at_once} at once, each on its own device: {duration(_makespan(known, at_once))}")
        else:
            lines.append(f"  {at_once} at once share this machine's {'GPUs' if p.gpus_here else 'CPU cores'}: the "
                         f"figures are for one job alone, so no wall time is estimated")
    if p.launch.timeout_s:
        over = sum(1 for s in known if s > p.launch.timeout_s)
        if over:
            lines.append(f"  {over} job(s) longer than the launcher's time limit ({duration(p.launch.timeout_s)}, "
                         f"timeout_min): they would be stopped before the end")
    return lines


def _makespan(seconds: Sequence[float], slots: int) -> float:
    """When the last job ends if the jobs start in order, each on the first slot that frees up."""
    ends = [0.0] * min(slots, len(seconds))
    for s in seconds:
        heapq.heappush(ends, heapq.heappop(ends) + s)
    return max(ends)


def main(args: Sequence[str]) -> int:
    """Print the dry run of ``args``; the exit status is 2 when the command line or a job's config is wrong (each
    failing job gets an ``error:`` line naming its overrides on stderr), else 0."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        result = plan(args)
    else:
        try:
            result = plan(args)
        except DryRunError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(render(result), flush=True)
    for line in result.failures:
        print(f"error: {line}", file=sys.stderr)
    return 2 if result.failures else 0
