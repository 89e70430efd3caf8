"""Logger factories for configs that need a little logic."""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import current_name, former_name


def wandb_logger(save_dir: str, project: str = "disentangle", offline: bool | None = None, group: str | None = None,
                 tags: Sequence[str] = (), model: str | None = None, data: str | None = None, seed=None,
                 run_config: Mapping | None = None, runtime: Mapping | None = None, key: str | None = None,
                 **kwargs):
    """The real W&B logger; offline unless an API key is configured, and ``WANDB_MODE`` always wins.

    A Hydra sweep is one W&B group: ``group=None`` means the sweep's name in a multirun (its directory's name,
    after the sweep config's name when it is not ``train``) and ``<model>-<data>`` in a single run. The run is
    tagged ``<model>``, ``<data>``, ``seed=<seed>`` and, in a sweep, ``sweep=<name>``. The W&B config gets those,
    the job's command-line overrides and, given ``run_config`` (the whole resolved job config, as
    :func:`disentangle.runtime.run.build` passes it), every entry of it as a dotted key (``model.optimizer.lr``,
    ``model.regularizers.klm.weight``, ``trainer.precision``, ...) plus ``config_key`` (``key``, from
    :func:`config_key`: the same for all seeds of one configuration, so W&B can group by it) and ``runtime.*``. At the end the final
    metrics (``metrics.json``) and the best InfoM with its step go into the run summary and the W&B run is finished,
    so that the next job of a sweep starts its own run."""
    if offline is None:
        offline = wandb_mode() != "online"
        if offline and not os.environ.get("WANDB_MODE") and _rank() == 0:
            # wandb's own hint ("run `wandb online`") cannot work without a key: say what happens and what to do
            where = Path(save_dir) / "wandb"
            print(f"W&B: no API key (WANDB_API_KEY or `wandb login`), so this run logs offline under {where}; "
                  f"upload it later with `wandb sync {where}/offline-run-*`", file=sys.stderr)
    sweep = current_sweep()
    if group is None:
        group = sweep or ("-".join(str(x) for x in (model, data) if x is not None) or None)
    tags = [*(str(t) for t in tags), *(str(x) for x in (model, data) if x is not None)]
    if seed is not None:
        tags.append(f"seed={seed}")
    if sweep:
        tags.append(f"sweep={sweep}")
    config = {"model": model, "data": data, "seed": seed, "sweep": sweep, **_job_overrides()}
    if run_config is not None:
        config.update(flatten(run_config, skip=("hydra",)))
    if key is not None:
        config["config_key"] = key
    config.update(flatten({"runtime": dict(runtime or {})}))
    config.update(kwargs.pop("config", {}))
    # the mode goes to wandb.init: Lightning's own offline=True refuses log_model (an offline run keeps its
    # artifacts for `wandb sync`) and sets WANDB_MODE for the whole process
    kwargs.setdefault("mode", "offline" if offline else "online")
    return _logger_class()(save_dir=save_dir, project=project, offline=False, group=group,
                           tags=list(dict.fromkeys(t[:64] for t in tags)), config=config, **kwargs)


def flatten(tree: Mapping, prefix: str = "", skip: Sequence[str] = ()) -> dict:
    """``{"model": {"optimizer": {"lr": 1e-3}}}`` -> ``{"model.optimizer.lr": 1e-3}`` (lists stay values)."""
    out = {}
    for key, value in tree.items():
        if key in skip:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


# Not hyperparameters: where a job writes, how it logs and shows progress, and which seed it is.
_NOT_CONFIGURATION = ("seed", "paths", "logger", "hydra", "resume", "auto_resume", "print_summary", "runs_per_gpu")
# how a run runs, not what it computes (trainer.compile: compiled steps compute the eager ones' terms)
_NOT_CONFIGURATION_LEAVES = ("output_dir", "dirpath", "progress", "background", "enable_progress_bar",
                             "enable_model_summary", "compile", "compile_mode")


def config_key(run_config: Mapping) -> str:
    """A short stable hash of a job's hyperparameters, all but the seed (and where it writes, how it logs): the
    seeds of one configuration share it, so a W&B dashboard groups by it for the mean and spread over seeds.
    ``run_config`` is the job config unresolved, so that values drawn from the seed (``data.seed: ${seed}``) keep
    their ``${seed}`` and only the seed itself is left out."""
    flat = flatten(_former_targets(run_config), skip=_NOT_CONFIGURATION)
    kept = {k: v for k, v in flat.items() if k.rsplit(".", 1)[-1] not in _NOT_CONFIGURATION_LEAVES}
    text = json.dumps(sorted(kept.items()), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _former_targets(tree):
    """``tree`` with every ``_target_`` written with the module names from before the modules moved
    (:data:`disentangle.MOVED`): a configuration keeps its :func:`config_key` across that change, whichever names
    its config uses."""
    if isinstance(tree, Mapping):
        return {k: former_name(current_name(v)) if k == "_target_" and isinstance(v, str) else _former_targets(v)
                for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_former_targets(v) for v in tree]
    return tree


def wandb_mode() -> str:
    """``online``, ``offline`` or ``disabled``: ``WANDB_MODE`` when set, else online only with an API key."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return {"dryrun": "offline", "run": "online"}.get(mode, mode)
    return "online" if has_api_key() else "offline"


def has_api_key() -> bool:
    """Whether a W&B API key is configured: ``WANDB_API_KEY`` or a ``wandb login`` entry in ``~/.netrc``."""
    return bool(os.environ.get("WANDB_API_KEY")) or _has_netrc_key()


def sweep_name(sweep_dir: str | Path, config_name: str | None = None) -> str:
    """The name a sweep goes by on W&B: its directory's name, after the sweep config's (``qlae_table2-<date>``)."""
    name = Path(str(sweep_dir)).name or str(sweep_dir)
    if config_name and config_name != "train" and not name.startswith(config_name):
        name = f"{config_name}-{name}"
    return name


def current_sweep() -> str | None:
    """The name of the Hydra sweep this job belongs to (None outside a multirun)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return None
        return sweep_name(hc.sweep.dir, hc.job.config_name)
    except Exception:  # noqa: BLE001 - no Hydra context: a plain run
        return None


def _job_overrides() -> dict:
    """The job's command-line overrides as config entries (``{"model.optimizer.lr": "0.001", ...}``)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return {}
        out = {}
        for item in HydraConfig.get().overrides.task:
            key, _, value = str(item).partition("=")
            if not key.startswith("~"):
                out.setdefault(key.lstrip("+"), value)
        return {k: v for k, v in out.items() if k not in ("model", "data", "seed") and not k.startswith("hydra")}
    except Exception:  # noqa: BLE001
        return {}


@functools.cache
def _logger_class():
    """WandbLogger with the final metrics in the run summary; made on first use (pytorch_lightning is heavy)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only
    from pytorch_lightning.loggers import WandbLogger

    class SummaryWandbLogger(WandbLogger):
        """Lightning's W&B logger that writes which run it is (``wandb_run.json``) as soon as the run exists, goes
        on with that run when training resumes (:meth:`resume_from`), and puts the final metrics in the summary."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # Lightning passes anonymous=None to wandb.init, which recent wandb warns about on every run; unset,
            # it is wandb's own default (the same behaviour)
            init = getattr(self, "_wandb_init", None)
            if isinstance(init, dict) and init.get("anonymous") is None:
                init.pop("anonymous", None)
            self._logged: set[tuple[int, str]] = set()  # (step, key) the run's earlier processes persisted
            self._replay: tuple[Path, int] | None = None

        def resume_from(self, output_dir, step: int) -> None:
            """Go on with the W&B run of the run directory (its ``wandb_run.json``) from the checkpoint at
            ``step``: the same run id (wandb's ``resume="allow"``); the points its transaction logs already hold
            are not logged again (training resumes exactly, so they would be the same values); the evaluations up
            to ``step`` that they lack (the wandb service loses what it had not written at a kill) are logged from
            the run's history (``metrics_history.jsonl``, already cut back to ``step``), with their figures."""
            from .wandb_log import logged_points

            try:
                record = json.loads((Path(output_dir) / RUN_RECORD).read_text())
                run_id = str(record["id"])
            except (OSError, ValueError, KeyError, TypeError):
                return  # no W&B run known: a new one
            self._id = self._wandb_init["id"] = run_id
            self._wandb_init["resume"] = "allow"
            import wandb

            if wandb.run is None:  # an earlier run of this process: its service writes its log after finish()
                wandb.teardown()
            # a service inherited from a parent process (WANDB_SERVICE) may still hold the killed run's stream under
            # this id ("run ID is in use"): the resumed run starts its own
            os.environ.pop("WANDB_SERVICE", None)
            wandb_dir = Path(record["dir"]).parent if record.get("dir") else Path(self.save_dir or ".") / "wandb"
            self._logged = logged_points(wandb_dir, run_id)
            self._replay = (Path(output_dir), int(step))

        @property
        def experiment(self):
            fresh = self._experiment is None
            run = WandbLogger.experiment.fget(self)
            if fresh and self._experiment is not None and rank_zero_only.rank == 0:
                write_run_record(run, Path(self.save_dir or ".") / RUN_RECORD)  # the id a resumed run goes on with
                if self._replay is not None:
                    replay, self._replay = self._replay, None
                    self._log_missing_evaluations(*replay)
            return run

        def log_metrics(self, metrics, step=None) -> None:
            if self._logged and step is not None:
                metrics = {k: v for k, v in metrics.items() if (int(step), k) not in self._logged}
                if not metrics:
                    return
            super().log_metrics(metrics, step)

        def log_image(self, key, images, step=None, **kwargs) -> None:
            if step is not None and (int(step), key) in self._logged:
                return
            super().log_image(key, images, step=step, **kwargs)

        def _log_missing_evaluations(self, output_dir: Path, step: int) -> None:
            from ..callbacks.outputs import HISTORY_FILE

            try:
                lines = (output_dir / HISTORY_FILE).read_text().splitlines()
            except OSError:
                return
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                at = int(entry.get("step", -1))
                if at < 0 or at > step:
                    continue
                self.log_metrics({f"eval/{k}": v for k, v in entry.items() if k not in ("step", "final")}, step=at)
                for image in sorted((output_dir / "figures" / f"step_{at}").glob("*.png")):
                    self.log_image(key=f"eval/{image.stem}", images=[str(image)], step=at)

        def finalize(self, status: str) -> None:
            super().finalize(status)
            run = self._experiment
            if run is None:
                return
            if status == "success":
                run.summary.update(final_metrics(Path(self.save_dir or ".") / "metrics.json"))
                run.summary.update(best_evaluation(Path(self.save_dir or ".") / "metrics_history.jsonl"))
            write_run_record(run, Path(self.save_dir or ".") / RUN_RECORD)
            # a Hydra sweep runs its jobs in one process: without this the next job would log into this run
            run.finish(exit_code=0 if status in ("success", "finished") else 1)
            self._experiment = None

    return SummaryWandbLogger


RUN_RECORD = "wandb_run.json"


def run_record(run) -> dict:
    """Which W&B run this was and what it holds, read back from the live run's public attributes: id, project,
    group, tags, job type, mode, URL (online), directory, config and summary (``_``-prefixed keys left out)."""
    return {
        "id": run.id, "name": run.name, "project": run.project, "group": run.group, "tags": list(run.tags or ()),
        "job_type": run.job_type, "mode": "offline" if run.offline else "online",
        "url": None if run.offline else run.url,  # offline: no URL (wandb warns when asked for one)
        "dir": str(Path(run.dir).parent) if run.dir else None,
        "config": {k: v for k, v in dict(run.config).items() if not k.startswith("_")},
        "summary": {k: v for k, v in dict(run.summary).items() if not k.startswith("_")},
    }


def write_run_record(run, path: Path) -> Path:
    """:func:`run_record` as JSON at ``path``: a run directory says which W&B run holds its logs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run_record(run), indent=2, default=str))
    return path


def final_metrics(path: Path) -> dict:
    """The scalar entries of a run's ``metrics.json`` (numbers, method and data), empty if it is missing."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for key, value in record.items():
        if isinstance(value, bool) or key in ("factor_names", "metrics"):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value) or isinstance(value, str):
            out[key] = value
    return out


def best_evaluation(history: Path, metric: str = "infom") -> dict:
    """``best_<metric>`` and ``best_<metric>_step``: the highest value among a run's evaluations
    (``metrics_history.jsonl``), e.g. the best InfoM and when it was reached; empty when there is none."""
    best = None
    try:
        lines = Path(history).read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        value = entry.get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value) and (best is None or value > best[0]):
            best = (float(value), int(entry.get("step", -1)))
    return {} if best is None else {f"best_{metric}": best[0], f"best_{metric}_step": best[1]}


def _rank() -> int:
    """This process's rank under data parallelism (0 alone): one notice per run, not one per process."""
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0)


def _has_netrc_key() -> bool:
    path = os.path.expanduser("~/.netrc")
    try:
        with open(path) as f:
            return "api.wandb.ai" in f.read()
    except OSError:
        return False


def csv_logger(save_dir: str, name: str = "csv", version: str = "", **kwargs):
    """Lightning's CSVLogger (scalars to ``<save_dir>/<name>/metrics.csv``) that can go on with the file of a run it
    resumes: ``logger.keep_existing = True`` (set by :func:`disentangle.runtime.run.train` after cutting the
    file back to the checkpoint's step) appends to it instead of deleting it, as the stock logger does with an
    old file."""
    return _csv_logger_class()(save_dir=save_dir, name=name, version=version, **kwargs)


@functools.cache
def _csv_logger_class():
    import csv

    from lightning_fabric.utilities.rank_zero import rank_zero_only
    from pytorch_lightning.loggers import CSVLogger
    from pytorch_lightning.loggers.csv_logs import ExperimentWriter

    class AppendingWriter(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:  # keep the file; new rows go after its rows, under its header
            if os.path.isfile(self.metrics_file_path):
                with open(self.metrics_file_path, newline="") as f:
                    self.metrics_keys = list(next(csv.reader(f), []))

    class ResumableCSVLogger(CSVLogger):
        keep_existing = False

        @property
        def experiment(self):
            if self._experiment is None and self.keep_existing and rank_zero_only.rank == 0:
                self._fs.makedirs(self.root_dir, exist_ok=True)
                self._experiment = AppendingWriter(log_dir=self.log_dir)
            return super().experiment

    return ResumableCSVLogger
