"""Build and run a training job from a composed config (what ``python -m disentangle.train`` does).

Kept apart from the Hydra entry point so tests can build the same objects from the same config.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from . import config as _config  # noqa: F401  (registers the resolvers used by conf/)
from .callbacks import DisentanglementEvaluation
from .checkpointing import check_checkpoint, find_checkpoint, trim_logs
from .config import one_line
from .data import DatasetNotFoundError
from .devices import job_placement
from .errors import ConfigError
from .metrics.suite import SCALAR_LABELS
from .precision import float32_math, resolve_precision

log = logging.getLogger(__name__)


@dataclass
class Job:
    cfg: DictConfig
    datamodule: pl.LightningDataModule
    model: pl.LightningModule
    trainer: pl.Trainer
    evaluation: DisentanglementEvaluation | None


def build(cfg: DictConfig) -> Job:
    """Instantiate data, model, callbacks, logger and trainer; every bad value fails here, in one line."""
    try:
        datamodule = instantiate(cfg.data)
        model = instantiate(cfg.model, in_channels=datamodule.num_channels, resolution=datamodule.resolution,
                            dataset_size=datamodule.num_samples)
        placement = job_placement(cfg)  # job i of a sweep on GPU i mod N (disentangle.devices)
        precision = precision_of(cfg, model, placement.trainer_kwargs.get("accelerator"))
        callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
        if cfg.trainer.get("enable_progress_bar") is False:  # the switch wins over the configured bar
            callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.ProgressBar)]
        logger = instantiate(cfg.logger) if cfg.get("logger") else False
        extra = {}
        if model.updates_per_step > 1 and cfg.trainer.get("strategy") == "ddp":
            # several backward passes per step, each reaching only some networks: DDP must find the unused ones
            extra["strategy"] = "ddp_find_unused_parameters_true"
        extra.update(placement.trainer_kwargs)
        trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=logger, precision=precision["precision"],
                              **extra)
    except Exception as exc:  # construction errors (bad values, wrong types) become one clear line
        cause = exc
        while cause.__cause__ is not None and not isinstance(cause, DatasetNotFoundError):
            cause = cause.__cause__  # Hydra wraps what a constructor raised
        kind = DatasetNotFoundError if isinstance(cause, DatasetNotFoundError) else ConfigError
        raise kind(one_line(exc)) from exc
    if trainer.max_steps is None or trainer.max_steps < 1:
        raise ConfigError(f"trainer.max_steps must be >= 1 (got {trainer.max_steps})")
    batch = getattr(datamodule, "batch_size", None)
    if batch and trainer.world_size > 1 and batch % trainer.world_size:
        raise ConfigError(f"model.batch_size={batch} is the global batch (the paper's): it must divide evenly over "
                          f"the {trainer.world_size} processes (trainer.devices x trainer.num_nodes)")
    model.run_config = OmegaConf.to_container(cfg, resolve=True)
    model.run_config["trainer"]["precision"] = precision["precision"]  # what ran, not "auto"
    model.run_config["tf32"] = precision["tf32"]
    model.runtime.update(precision)
    model.runtime.update(placement.record)  # where it ran (device, job, GPUs): in metrics.json
    evaluation = next((c for c in callbacks if isinstance(c, DisentanglementEvaluation)), None)
    return Job(cfg, datamodule, model, trainer, evaluation)


def precision_of(cfg: DictConfig, model, accelerator: str | None = None) -> dict:
    """``trainer.precision`` and ``tf32`` settled for this model on this device (``accelerator``: the job's
    placement, else ``trainer.accelerator``; :mod:`disentangle.precision`): ``auto`` becomes what runs; what cannot
    run fails in one line. TF32 is set here for the whole process."""
    accelerator = accelerator or cfg.trainer.get("accelerator", "auto")
    precision = resolve_precision(cfg.trainer.get("precision", "auto"), accelerator,
                                  updates_per_step=model.updates_per_step)
    tf32 = cfg.get("tf32", "auto")
    if str(tf32) not in ("auto", "True", "False", "true", "false"):
        raise ConfigError(f"tf32={tf32!r}: choose auto, true or false")
    if str(tf32) == "auto":  # off where a regularizer's gradients difference nearly equal activations
        tf32 = not any(reg.exact_float32 for reg in model.regularizers.values())
    return {"precision": precision, "tf32": float32_math(accelerator, str(tf32).lower() == "true")}


def train(cfg: DictConfig) -> dict:
    """Seed, build, fit; returns the final evaluation (also written to ``metrics.json``).

    With ``resume`` (a run directory or a ``.ckpt`` file) or ``auto_resume`` and a ``last.ckpt`` in the output
    directory, training goes on from that checkpoint (:mod:`disentangle.checkpointing`): the checkpoint is checked
    first (a missing, partial or corrupt one stops here, with nothing changed), then the logs are cut back to its
    step and Lightning restores the model, optimizers, schedulers, loop counters and (through ``RngState``) the
    random generators."""
    ckpt_path = find_checkpoint(cfg.get("resume"), cfg.paths.output_dir, bool(cfg.get("auto_resume", False)))
    resumed_step = None
    if ckpt_path is not None:
        try:
            resumed_step = int(check_checkpoint(ckpt_path)["global_step"])
        except ConfigError:
            restore_run_config(cfg.paths.output_dir)  # Hydra rewrote .hydra/ before this job started: undo it
            raise
    keep_run_config(cfg.paths.output_dir)
    pl.seed_everything(int(cfg.seed), workers=True, verbose=False)
    job = build(cfg)
    if ckpt_path is None and cfg.get("auto_resume") and job.trainer.is_global_zero:
        trim_logs(cfg.paths.output_dir, 0)  # killed before its first checkpoint: start over without its logs
    if ckpt_path is not None:
        if job.trainer.is_global_zero:
            trim_logs(cfg.paths.output_dir, resumed_step)
        for logger in job.trainer.loggers:
            if hasattr(logger, "keep_existing"):
                logger.keep_existing = True
        log.info("resuming from %s (step %d)", ckpt_path, resumed_step)
    # the loader yields index batches (cheap); images are made on the device, so no workers are needed
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # manual optimization: a checkpoint at step N holds the weights after N updates, as with automatic
    # optimization; that is what resuming needs, so Lightning's warning about the post-step state is noise
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    start = time.perf_counter()
    job.trainer.fit(job.model, datamodule=job.datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
    if job.evaluation is not None and resumed_step is not None and resumed_step >= job.trainer.max_steps:
        # killed after its last checkpoint, during the final evaluation: Lightning does not run a finished loop
        # again (no on_train_end), so the final evaluation of the restored weights is done here
        job.evaluation.finish(job.trainer, job.model)
    wall = time.perf_counter() - start
    result = dict(job.evaluation.last or {}) if job.evaluation else {}
    result["wall_seconds"] = wall
    if cfg.get("print_summary", True) and job.trainer.is_global_zero:
        title = f"{cfg.model.name} on {cfg.data.name}: final evaluation"
        print_summary(title, result, job.evaluation.artifacts if job.evaluation else {})
    return result


CONFIG_COPY = Path("checkpoints") / "hydra"  # the .hydra/ files of the last start that went ahead


def keep_run_config(output_dir) -> None:
    """Copy the run's ``.hydra/*.yaml`` (written by Hydra for this start) beside the checkpoints, so that a later start
    which stops on a bad checkpoint can put them back (:func:`restore_run_config`)."""
    source, target = Path(output_dir) / ".hydra", Path(output_dir) / CONFIG_COPY
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("*.yaml"):
        (target / path.name).write_bytes(path.read_bytes())


def restore_run_config(output_dir) -> None:
    """Put back the ``.hydra/*.yaml`` of the last start that went ahead (a multirun job's Hydra writes them before
    the job can check its checkpoint; a single run checks before Hydra, in ``disentangle.train``)."""
    source, target = Path(output_dir) / CONFIG_COPY, Path(output_dir) / ".hydra"
    if source.is_dir() and target.is_dir():
        for path in source.glob("*.yaml"):
            (target / path.name).write_bytes(path.read_bytes())


def print_summary(title: str, result: dict, artifacts: dict) -> None:
    """The final metric table and where the files are."""
    from rich.console import Console
    from rich.table import Table

    # the InfoMEC/DCI/PSNR columns whenever one of them was computed (a "-" marks one that was not), the other
    # metrics when present (an MCC-only run such as experiment=cliff2d shows just its MCC)
    defaults = _DEFAULT_COLUMNS if any(k in result for k in _DEFAULT_COLUMNS) else ()
    keys = [k for k in SCALAR_LABELS if k in result or k in defaults]  # registered metrics included
    table = Table(title=title, min_width=len(title))
    if len(keys) <= len(_DEFAULT_COLUMNS) + 1:  # one row fits a terminal
        for key in keys:
            table.add_column(SCALAR_LABELS[key], justify="right")
        table.add_row(*(_format(k, result[k]) if k in result else "-" for k in keys))
    else:  # many metrics: one row each, only those computed
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key in (k for k in keys if k in result):
            table.add_row(SCALAR_LABELS[key], _format(key, result[key]))
    Console().print(table)
    for label, path in artifacts.items():  # plain print: paths must not be wrapped
        print(f"{label}: {Path(path).resolve()}")
    if "wall_seconds" in result:
        print(f"wall time: {result['wall_seconds']:.1f} s")
    elif "eval_seconds" in result:
        print(f"evaluation time: {result['eval_seconds']:.1f} s")


_DEFAULT_COLUMNS = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


def _format(key: str, value: float) -> str:
    return f"{value:.2e}" if key == "mse" else f"{value:.2f}"


__all__ = ["ConfigError", "DatasetNotFoundError", "Job", "build", "one_line", "print_summary", "train"]
