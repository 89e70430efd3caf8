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

from .. import current_name
from ..callbacks import DisentanglementEvaluation
from ..data import DatasetNotFoundError
from ..errors import ConfigError
from ..metrics.suite import SCALAR_LABELS
from . import config as _config  # noqa: F401  (registers the resolvers used by conf/)
from .checkpointing import check_checkpoint, find_checkpoint, trim_logs
from .compilation import CompileNetworks, compile_setting, compiler_missing
from .config import one_line, progress_enabled, progress_setting
from ..foundation.devices import job_placement, release_slot, sweep_directory
from ..foundation.precision import float32_math, resolve_precision, tf32_mode

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
    quiet_known_noise()
    try:
        datamodule = instantiate(cfg.data)
        model = instantiate(cfg.model, in_channels=datamodule.num_channels, resolution=datamodule.resolution,
                            dataset_size=datamodule.num_samples)
        placement = job_placement(cfg)  # job i of a sweep on GPU i mod N (disentangle.foundation.devices)
        precision = precision_of(cfg, model, placement.trainer_kwargs.get("accelerator"))
        # progress bars: `auto` (the default) draws them only in a terminal, not into log files and pipes
        progress = progress_enabled(cfg.trainer.get("enable_progress_bar", "auto"), "trainer.enable_progress_bar")
        callbacks = [instantiate(c, **progress_setting(c)) for c in (cfg.get("callbacks") or {}).values()
                     if c is not None]
        if not progress:  # the switch wins over the configured bar
            callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.ProgressBar)]
        summary = bool(cfg.trainer.get("enable_model_summary", True))
        if summary and not any(isinstance(c, pl.callbacks.ModelSummary) for c in callbacks):
            callbacks.append(ModelSummary())  # in place of Lightning's default one (see the class)
        callbacks.append(LogLastStep())
        run_config = OmegaConf.to_container(cfg, resolve=True)  # stored in checkpoints; the W&B run config
        run_config["trainer"]["precision"] = precision["precision"]  # what ran, not "auto"
        run_config["tf32"] = precision["tf32"]
        # the extras go to the factory as they are (instantiate would build every _target_ inside run_config)
        logger = instantiate(cfg.logger, _partial_=True)(
            **_logger_extras(cfg, run_config, {**precision, **placement.record})) if cfg.get("logger") else False
        extra = {}
        if model.updates_per_step > 1 and cfg.trainer.get("strategy") == "ddp":
            # several backward passes per step, each reaching only some networks: DDP must find the unused ones
            extra["strategy"] = "ddp_find_unused_parameters_true"
        extra.update(placement.trainer_kwargs)
        callbacks.append(compile_callback(cfg, placement))
        trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)  # a Trainer without our own keys
        trainer_cfg.pop("compile", None)
        trainer_cfg.pop("compile_mode", None)
        trainer = instantiate(trainer_cfg, callbacks=callbacks, logger=logger, precision=precision["precision"],
                              enable_progress_bar=progress, enable_model_summary=False, **extra)
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
    parts = datamodule.batch_parts = model.batch_parts  # each rank's rows of every part of a batch (docs/runs.md)
    if batch and trainer.world_size > 1 and parts > 1 and batch % (parts * trainer.world_size):
        raise ConfigError(f"model.batch_size={batch} is the global batch, cut in {parts} (the model's half-batch and "
                          f"the negatives' half): each part must divide evenly over the {trainer.world_size} processes")
    model.run_config = run_config
    model.runtime.update(precision)
    model.runtime.update(placement.record)  # where it ran (device, job, GPUs): in metrics.json
    evaluation = next((c for c in callbacks if isinstance(c, DisentanglementEvaluation)), None)
    return Job(cfg, datamodule, model, trainer, evaluation)


def _logger_extras(cfg: DictConfig, run_config: dict, runtime: dict) -> dict:
    """The whole resolved config and the runtime record for a logger that takes them (W&B's run config)."""
    if current_name(str(cfg.logger.get("_target_", ""))) == "disentangle.runtime.loggers.wandb_logger":
        from .loggers import config_key

        return {"run_config": run_config, "runtime": runtime,
                "key": config_key(OmegaConf.to_container(cfg, resolve=False))}
    return {}


def compile_callback(cfg: DictConfig, placement) -> CompileNetworks:
    """``trainer.compile`` checked (a bad value, or ``true`` where no compiler can build kernels, fails here in one
    line) and its callback; a sweep's jobs share one compile cache in the sweep directory
    (:mod:`disentangle.runtime.compilation`)."""
    setting = compile_setting(cfg.trainer.get("compile", "auto"))
    mode = str(cfg.trainer.get("compile_mode", "auto"))
    if setting == "false":
        return CompileNetworks(setting, mode)  # still there: its decision goes into the checkpoint
    device = str(placement.record.get("device", "cpu"))
    device_type = "cuda" if device.startswith("cuda") and not placement.record.get("simulated_gpus") else "cpu"
    missing = compiler_missing(device_type)
    if setting == "true" and missing:
        raise ConfigError(f"trainer.compile=true: {missing}; use trainer.compile=auto or false")
    cache = cfg.paths.get("compile_cache")
    sweep_dir = sweep_directory(cfg)
    if cache is None and sweep_dir is not None:
        cache = sweep_dir / ".compile_cache"
    return CompileNetworks(setting, mode, None if cache is None else Path(str(cache)).expanduser())


def precision_of(cfg: DictConfig, model, accelerator: str | None = None) -> dict:
    """``trainer.precision`` and ``tf32`` settled for this model on this device (``accelerator``: the job's
    placement, else ``trainer.accelerator``; :mod:`disentangle.foundation.precision`): ``auto`` becomes what
    runs; what cannot run fails in one line. TF32 is set here for the whole process."""
    accelerator = accelerator or cfg.trainer.get("accelerator", "auto")
    precision = resolve_precision(cfg.trainer.get("precision", "auto"), accelerator,
                                  updates_per_step=model.updates_per_step)
    tf32 = tf32_mode(cfg.get("tf32", "auto"))
    if tf32 == "auto":  # off where a regularizer's gradients difference nearly equal activations
        tf32 = str(not any(reg.exact_float32 for reg in model.regularizers.values())).lower()
    return {"precision": precision, "tf32": float32_math(accelerator, tf32)}


def train(cfg: DictConfig) -> dict:
    """Seed, build, fit; returns the final evaluation (also written to ``metrics.json``).

    With ``resume`` (a run directory or a ``.ckpt`` file) or ``auto_resume`` and a ``last.ckpt`` in the output
    directory, training goes on from that checkpoint (:mod:`disentangle.runtime.checkpointing`): the
    checkpoint is checked first (a missing, partial or corrupt one stops here, with nothing changed), then the
    logs are cut back to its step and Lightning restores the model, optimizers, schedulers, loop counters and
    (through ``RngState``) the random generators."""
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
    job = build(cfg)  # under hydra/launcher=gpu_node this holds a GPU slot until the job ends
    try:
        return _fit(cfg, job, ckpt_path, resumed_step)
    finally:
        release_slot()


def _fit(cfg: DictConfig, job: Job, ckpt_path, resumed_step: int | None) -> dict:
    """:func:`train` after the build: resume bookkeeping, fit, final evaluation, summary."""
    if ckpt_path is None and cfg.get("auto_resume") and job.trainer.is_global_zero:
        trim_logs(cfg.paths.output_dir, 0)  # killed before its first checkpoint: start over without its logs
    if ckpt_path is not None or cfg.get("auto_resume"):
        if ckpt_path is not None and job.trainer.is_global_zero:
            trim_logs(cfg.paths.output_dir, resumed_step)
        for logger in job.trainer.loggers:
            if hasattr(logger, "keep_existing") and ckpt_path is not None:
                logger.keep_existing = True
            if hasattr(logger, "resume_from"):  # W&B: the same run, each point once
                logger.resume_from(cfg.paths.output_dir, resumed_step or 0)
    if ckpt_path is not None:
        log.info("resuming from %s (step %d)", ckpt_path, resumed_step)
    if ckpt_path is None:
        _warn_stale_checkpoints(job.trainer)
    start = time.perf_counter()
    # weights_only: Lightning's own restore reads the checkpoint as data too
    # (disentangle.runtime.checkpointing.read_checkpoint)
    job.trainer.fit(job.model, datamodule=job.datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path),
                    weights_only=True)
    if job.evaluation is not None and resumed_step is not None and resumed_step >= job.trainer.max_steps:
        # killed after its last checkpoint, during the final evaluation: Lightning does not run a finished loop
        # again (no on_train_end), so the final evaluation of the restored weights is done here
        job.evaluation.finish(job.trainer, job.model)
    wall = time.perf_counter() - start
    result = dict(job.evaluation.last or {}) if job.evaluation else {}
    result["wall_seconds"] = wall
    if cfg.get("print_summary", True) and job.trainer.is_global_zero:
        # the data module's own name where a data config names none (the run is done: the table must print)
        data_name = cfg.data.get("name") or getattr(job.datamodule, "name", "data")
        title = f"{cfg.model.get('name') or type(job.model).__name__} on {data_name}: final evaluation"
        print_summary(title, result, job.evaluation.artifacts if job.evaluation else {})
    return result


def quiet_known_noise() -> None:
    """Silence what Lightning and torch print on every run that a user cannot act on, each by its exact message."""
    # the loader yields index batches (cheap); images are made on the device, so no workers are needed
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # manual optimization: a checkpoint at step N holds the weights after N updates, as with automatic
    # optimization; that is what resuming needs, so Lightning's warning about the post-step state is noise
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    # Lightning's own pytree helper builds torch's LeafSpec, deprecated by recent torch: nothing to change here
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)
    # the checkpoint directory always holds checkpoints/hydra (keep_run_config) and, when resuming, the run's own
    # checkpoints; a fresh start over an earlier run's checkpoints gets its own line (_warn_stale_checkpoints)
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    rank_zero = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(f, _NoTips) for f in rank_zero.filters):
        rank_zero.addFilter(_NoTips())


class _NoTips(logging.Filter):
    """Drops Lightning's "💡 Tip: try installing litlogger/litmodels" advertisements."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


def _warn_stale_checkpoints(trainer: pl.Trainer) -> None:
    """A fresh start whose checkpoint directory holds an earlier run's checkpoints: say what happens to them."""
    dirpath = getattr(trainer.checkpoint_callback, "dirpath", None)
    if not trainer.is_global_zero or not dirpath or not Path(dirpath).is_dir():
        return
    found = sorted(p.name for p in Path(dirpath).glob("*.ckpt"))
    if found:
        log.warning("%s holds an earlier run's checkpoints (%s): this fresh start overwrites its last.ckpt; "
                    "auto_resume=true continues that run instead, another hydra.run.dir keeps both",
                    dirpath, ", ".join(found[:3]))


class ModelSummary(pl.callbacks.RichModelSummary):
    """Lightning's model summary without its FLOPs column and total when no FLOPs were counted: Lightning counts
    them only through a model's ``example_input_array``, which these models do not define, and printed 0s."""

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  total_flops, **summarize_kwargs) -> None:
        from pytorch_lightning.utilities.model_summary import (
            get_formatted_model_size,
            get_human_readable_count,
        )
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs" or total_flops]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, style="dim" if name == " " else None,
                             justify="left" if name in (" ", "Name", "Type", "Mode") else "right")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*(str(v) for v in row))
        console = get_console()
        console.print(table)
        totals = [("Trainable params", get_human_readable_count(int(trainable_parameters))),
                  ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
                  ("Total params", get_human_readable_count(int(total_parameters))),
                  ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
                  ("Modules in train mode", total_training_modes["train"]),
                  ("Modules in eval mode", total_training_modes["eval"])]
        if total_flops:
            totals.append(("Total FLOPs", get_human_readable_count(total_flops)))
        for label, value in totals:
            console.print(f"[bold]{label}[/]: {str(value).strip()}")


class LogLastStep(pl.callbacks.Callback):
    """The training losses of a run's last step go to the loggers whatever ``trainer.log_every_n_steps`` is: Lightning
    writes them only every n steps, so a run shorter than n (a smoke test, a quick try) had no training-loss curve at
    all, and a longer one's curve stopped short of its end."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        connector = trainer._logger_connector  # what Lightning would write at this step, written now
        every = trainer.log_every_n_steps
        last = trainer.max_steps is not None and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        stepped = trainer.fit_loop.epoch_loop._batches_that_stepped + 1  # as Lightning counts it for this step
        if last and every and stepped % every and trainer.loggers:
            metrics = connector.metrics["log"]
            if metrics:
                connector.log_metrics(metrics)


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
