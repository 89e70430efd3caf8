"""Evaluation callback: every N steps and at the end of training, encode the fixed evaluation subset and compute
the chosen metrics (InfoMEC and DCI by default, QLAE paper §4, App. C.5; any metric of
:data:`disentangle.metrics.suite.REGISTRY`) and reconstruction PSNR/MSE; at the end write ``metrics.json`` and
figures.

This module only schedules; three small units do the work:

* :mod:`~disentangle.callbacks.gather` (training thread, needs the model): encode this process's shard of the
  evaluation subset, all-gather every rank's rows in evaluation-set order, run the sampled metrics, decode what
  the figures show. A few forward passes;
* :mod:`~disentangle.callbacks.worker` (``background=True``: a worker thread, numpy only): the array metrics,
  which take seconds to minutes on CPU, while training goes on; outcomes come back in order;
* :mod:`~disentangle.callbacks.outputs`: ``metrics.json``, ``latents.npz`` and figures (in the worker), logging and
  ``metrics_history.jsonl`` (on the training thread, at the next batch, at the step the evaluation was taken).

At the end of training, and on an exception, the callback waits for the worker, so the final results always reach
the loggers and ``metrics.json`` before ``trainer.fit`` returns. An error in the worker is re-raised on the training
thread (:class:`EvaluationError`, naming the step) at the next batch or at the end of training.

Under DDP every rank encodes its shard and takes part in the all-gather; only global rank 0 computes the
metrics, writes files and logs.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import get_method

from ..metrics.accumulate import disentanglement_metrics
from ..metrics.suite import REGISTRY, SCALAR_KEYS, check_metric_names, metric_names
from ..models.base import EvaluableModel
from .gather import EvaluationError, GatherSettings, failure, gather_job, shard_positions
from .jobs import EvaluationJob, EvaluationOutcome
from .outputs import HISTORY_FILE, OutputSettings, compute_outcome, record_outcome
from .worker import MetricWorker

log = logging.getLogger(__name__)

SUMMARY_KEYS = SCALAR_KEYS  # every built-in scalar an evaluation can report, in table order

__all__ = ["HISTORY_FILE", "SUMMARY_KEYS", "DisentanglementEvaluation", "EvaluationError", "EvaluationJob",
           "EvaluationOutcome", "shard_positions"]


class DisentanglementEvaluation(pl.Callback):
    """Args:
        output_dir: where ``metrics.json``, ``metrics_history.jsonl`` and the PNGs go (the Hydra run
            directory).
        every_n_steps: periodic evaluation cadence (0 = only at the end).
        n_samples: evaluation subset size (None = the data module's ``eval_size``).
        batch_size: encoding batch size (per process; under DDP the batches are dealt to the ranks).
        metrics: metrics of the final evaluation (and of :meth:`run` by default): registered names
            (:func:`disentangle.metrics.suite.metric_names`), or ``"all"``.
        periodic_metrics: metrics of the periodic evaluations (DCI and the sampled scores are the slow ones).
        periodic_figures: also draw the figures at every periodic evaluation (into
            ``figures/step_<N>/``) and send them to the loggers that take images, at their step; ``auto``: when a
            logger takes images (W&B), so that its media panels step through training
        figures: write the NMI and DCI-importance heatmaps, the intervention grid and the reconstruction
            grid at the end (the last two only for a model with a decoder); the latent scatter
            (``latent_scatter.png``, Friede et al. Fig. 3) when the representation is 2-D or the rotation
            angle was computed; when MCC was computed, true vs recovered factors (``factor_recovery.png``, Cliff
            paper Fig. 1); for a model that generates (the GANs), ``samples.png``.
        n_interventions: interpolation points per latent in the intervention grid.
        progress: progress bar while encoding.
        background: compute the metrics in a worker thread so training is not stalled; the final evaluation is
            waited for before training returns. False computes them on the training thread.
        n_reconstructions: images in the reconstruction grid.
        save_latents: also write the gathered evaluation arrays (``latents.npz``: latents, factors, psnr) at
            the end.
        metric_fn: replacement for :func:`disentangle.metrics.accumulate.disentanglement_metrics` (a callable
            or a dotted path; same signature).
        **metric_options: each registered metric's keyword options, by metric name (``callbacks.evaluation.dci:
            {max_depth: 8}`` arrives as ``dci={"max_depth": 8}``); passed to that metric's function unnamed here.
    """

    def __init__(
        self,
        output_dir: str | Path = ".",
        every_n_steps: int = 5000,
        n_samples: int | None = None,
        batch_size: int = 256,
        metrics: Sequence[str] | str = ("infomec", "dci"),
        periodic_metrics: Sequence[str] | str = ("infomec",),
        figures: bool = True,
        periodic_figures: bool | str = "auto",
        n_interventions: int = 10,
        progress: bool = True,
        background: bool = True,
        n_reconstructions: int = 8,
        save_latents: bool = False,
        metric_fn: Callable[..., dict] | str | None = None,
        **metric_options: dict[str, Any] | None,
    ):
        super().__init__()
        if int(every_n_steps) < 0:
            raise ValueError(f"callbacks.evaluation.every_n_steps must be >= 0 (got {every_n_steps})")
        if n_samples is not None and int(n_samples) < 2:
            raise ValueError(f"callbacks.evaluation.n_samples must be >= 2 (got {n_samples})")
        if int(batch_size) < 1:
            raise ValueError(f"callbacks.evaluation.batch_size must be >= 1 (got {batch_size})")
        if int(n_reconstructions) < 0:
            raise ValueError(f"callbacks.evaluation.n_reconstructions must be >= 0 (got {n_reconstructions})")
        unknown = [key for key in metric_options if key not in REGISTRY]
        if unknown:
            raise ValueError(f"callbacks.evaluation.{unknown[0]}: not an option nor a registered metric; metrics "
                             f"take options under their names: {list(metric_names())}")
        if str(periodic_figures).lower() not in ("auto", "true", "false"):
            raise ValueError(f"callbacks.evaluation.periodic_figures={periodic_figures!r}: choose auto, true or false")
        self.periodic_figures = str(periodic_figures).lower()
        self.output_dir = Path(output_dir)
        self.every_n_steps = int(every_n_steps)
        self.metrics = check_metric_names(metrics, key="callbacks.evaluation.metrics")
        self.periodic_metrics = check_metric_names(periodic_metrics, key="callbacks.evaluation.periodic_metrics")
        self.options = {name: dict(opts or {}) for name, opts in metric_options.items()}
        self.gathering = GatherSettings(
            n_samples=None if n_samples is None else int(n_samples), batch_size=int(batch_size),
            progress=bool(progress), figures=bool(figures), n_interventions=int(n_interventions),
            n_reconstructions=int(n_reconstructions),
        )
        self.writing = OutputSettings(self.output_dir, figures=bool(figures), save_latents=bool(save_latents))
        if isinstance(metric_fn, str):
            metric_fn = get_method(metric_fn)
        self.metric_fn = metric_fn or disentanglement_metrics
        self.worker = MetricWorker(self.compute, background=bool(background))
        self.last: dict | None = None  # the latest finished evaluation (the final one after training)
        self.artifacts: dict[str, Path] = {}  # files of the latest written evaluation
        self.history: list[dict] = []  # every finished evaluation of this callback, with its step

    @property
    def background(self) -> bool:
        return self.worker.background

    @property
    def n_samples(self) -> int | None:
        return self.gathering.n_samples

    @property
    def batch_size(self) -> int:
        return self.gathering.batch_size

    # -- Lightning hooks ---------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        """A resumed run (global step > 0): take up the history on disk (already cut back to the checkpoint's
        step by :func:`disentangle.runtime.checkpointing.trim_logs`) and redo the periodic evaluation of the
        checkpoint's step if the kill came before the worker had recorded it, so the history has no missing
        step."""
        step = trainer.global_step
        if step == 0:
            return
        history = self._history_path(trainer)
        if history is not None and history.is_file():
            self.history = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        due = bool(self.every_n_steps and step % self.every_n_steps == 0 and step < trainer.max_steps)
        missing = due and not any(e.get("step") == step for e in self.history)  # rank 0 knows the history
        if trainer.world_size > 1:  # every rank encodes its shard: all of them must agree to evaluate
            missing = bool(trainer.strategy.broadcast(missing, src=0))
        if missing:
            self.evaluate(trainer, pl_module, final=False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._collect(trainer, wait=False)
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0 and step < trainer.max_steps:
            self.evaluate(trainer, pl_module, final=False)

    def on_train_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, final=True)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # the run failed: still deliver everything the worker finishes, without masking the original exception
        try:
            for error in self._drain(trainer):
                log.error("%s", error)
        finally:
            self.worker.shutdown()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        try:
            errors = self._drain(trainer)
        finally:
            self.worker.shutdown()
        if errors:
            raise errors[0]

    # -- the work ----------------------------------------------------------------------------------
    def evaluate(self, trainer, pl_module: EvaluableModel, final: bool) -> dict | None:
        """Encode on every rank; on rank 0 compute (in the worker if ``background``) and, at the end, wait.
        Returns the final result (rank 0, ``final``), else None."""
        draw = not final and trainer.is_global_zero and self._draws_periodic_figures(trainer)
        job = self.prepare(
            pl_module, trainer.datamodule, step=trainer.global_step, final=final,
            write=final and trainer.is_global_zero, metrics=self.metrics if final else self.periodic_metrics,
            rank=trainer.global_rank, world_size=trainer.world_size,
            figures_dir=self.output_dir / "figures" / f"step_{trainer.global_step}" if draw else None,
        )
        if job is None:  # not global rank 0: its rows went to rank 0 in the all-gather
            return None
        self.worker.submit(job)
        self._collect(trainer, wait=final)
        return self.last if final else None

    def finish(self, trainer, pl_module: EvaluableModel) -> dict | None:
        """The final evaluation after ``trainer.fit`` when the fit did not run it: a run resumed from the checkpoint
        of its last step (the kill came during the final evaluation). Every rank takes part, as in training."""
        try:
            return self.evaluate(trainer, pl_module, final=True)
        finally:
            self.worker.shutdown()

    def run(self, pl_module: EvaluableModel, datamodule, *, step: int = 0, logger=None, final: bool = True,
            write: bool = True, metrics: Sequence[str] | str | None = None) -> dict | None:
        """Evaluate ``pl_module`` on ``datamodule``'s evaluation subset now (on this thread) with ``metrics``
        (None = the callback's ``metrics``); with ``write``, also write ``metrics.json`` and the figures to
        ``output_dir``. Used by ``python -m disentangle.evaluate`` (no Trainer). In an initialised process group
        every rank must call it; rank 0 returns the result, the others None."""
        chosen = self.metrics if metrics is None else check_metric_names(metrics)
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank, world = (torch.distributed.get_rank(), torch.distributed.get_world_size()) if dist else (0, 1)
        job = self.prepare(pl_module, datamodule, step=step, final=final, write=write and rank == 0,
                           metrics=chosen, rank=rank, world_size=world)
        if job is None:
            return None
        try:
            outcome = self.compute(job)
        except Exception as exc:
            raise failure(step, exc) from exc
        loggers = [] if logger is None else list(getattr(logger, "loggers", [logger]))
        self._record(outcome, loggers, history=None)
        return outcome.result

    def prepare(self, pl_module: EvaluableModel, datamodule, *, step: int, final: bool, write: bool,
                metrics: Sequence[str] = ("infomec", "dci"), rank: int = 0,
                world_size: int = 1, figures_dir: Path | None = None) -> EvaluationJob | None:
        """The training-thread part (:func:`~disentangle.callbacks.gather.gather_job`): the job on rank 0, None on
        the other ranks."""
        return gather_job(pl_module, datamodule, self.gathering, self.options, step=step, final=final, write=write,
                          metrics=metrics, rank=rank, world_size=world_size, figures_dir=figures_dir)

    def compute(self, job: EvaluationJob) -> EvaluationOutcome:
        """The worker part (:func:`~disentangle.callbacks.outputs.compute_outcome`): metrics, then for a writing
        job metrics.json and figures."""
        return compute_outcome(job, self.metric_fn, self.options, self.writing)

    # -- outcomes ----------------------------------------------------------------------------------
    def _collect(self, trainer, *, wait: bool) -> None:
        history = self._history_path(trainer)
        for outcome in self.worker.collect(wait=wait):
            self._record(outcome, trainer.loggers, history=history)

    def _drain(self, trainer) -> list[EvaluationError]:
        return self.worker.drain(partial(self._record, loggers=trainer.loggers,
                                         history=self._history_path(trainer)))

    def _record(self, outcome: EvaluationOutcome, loggers: Sequence, history: Path | None) -> None:
        self.history.append(record_outcome(outcome, loggers, history))
        self.last = outcome.result
        if "metrics" in outcome.artifacts:  # a written evaluation (a periodic one's figures are only logged)
            self.artifacts = outcome.artifacts

    def _draws_periodic_figures(self, trainer) -> bool:
        if not self.writing.figures or self.periodic_figures == "false":
            return False
        return self.periodic_figures == "true" or any(hasattr(lg, "log_image") for lg in trainer.loggers)

    def _history_path(self, trainer) -> Path | None:
        return self.output_dir / HISTORY_FILE if trainer.is_global_zero else None
