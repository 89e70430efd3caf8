"""Evaluation callback: every N steps and at the end of training, encode the fixed evaluation subset and
compute the chosen metrics (InfoMEC and DCI by default, spec qlae.md §8; any of
:data:`disentangle.metrics.METRICS`) and reconstruction PSNR/MSE; at the end write ``metrics.json`` and figures.

Metric definitions live in :mod:`disentangle.metrics`; this callback only gathers latents, calls them, draws
figures and logs. The work is split in two:

* **on the training thread** (it needs the model): encode this process's shard of the evaluation subset,
  gather all ranks' rows with :class:`~disentangle.metrics.accumulate.LatentFactorAccumulator` (sorted by
  evaluation-set position, so 1 and N processes give the same matrix), and, for the final evaluation, decode
  the intervention sweeps and the reconstructions that the figures show. This is a few forward passes. The
  sampled metrics (FactorVAE, BetaVAE scores), when chosen, also run here: they encode their own batches.
* **in a worker thread** (``background=True``; numpy arrays only, no model): the array metrics (InfoMEC, DCI,
  MIG, ...), which take seconds to minutes on CPU, then ``metrics.json`` and the figures. Training goes on meanwhile. Finished
  results are handed back to the training thread at the next batch, which logs them to the Lightning loggers
  at the step they were taken (``logger.log_metrics(..., step=...)``), appends them to
  ``metrics_history.jsonl`` and ``history``. At the end of training, and on an exception, the callback waits
  for the worker, so the final results always reach the loggers and ``metrics.json`` before ``trainer.fit``
  returns. An error in the worker is re-raised on the training thread (:class:`EvaluationError`, naming the
  step) at the next batch or at the end of training.

Under DDP every rank encodes its shard and takes part in the all-gather; only global rank 0 computes the
metrics, writes files and logs.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from hydra.utils import get_method
from tqdm.auto import tqdm

from .. import metrics as M
from ..metrics.accumulate import LatentFactorAccumulator, disentanglement_metrics
from ..metrics.suite import SAMPLED_METRICS, SCALAR_KEYS, check_metric_names, sampled_metrics
from .figures import (
    dci_importance_heatmap,
    factor_recovery_scatter,
    intervention_grid,
    latent_scatter,
    nmi_heatmap,
    reconstruction_grid,
)

log = logging.getLogger(__name__)

SUMMARY_KEYS = SCALAR_KEYS  # every scalar an evaluation can report, in table order
HISTORY_FILE = "metrics_history.jsonl"
# per-metric option groups of the callback's config (keyword arguments of each metric function)
OPTION_GROUPS = M.METRICS


class EvaluationError(RuntimeError):
    """A metric computation (possibly in the background worker) failed; ``__cause__`` is the original."""


@dataclass
class EvaluationJob:
    """What the training thread hands to the metric worker: numpy arrays and plain values, no model."""

    step: int
    final: bool
    write: bool
    metrics: tuple[str, ...]  # the array metrics to compute (the sampled ones are already in ``sampled``)
    latents: np.ndarray  # (n, n_z), rows in evaluation-set order
    factors: np.ndarray  # (n, n_s)
    psnr: np.ndarray | None  # (n,) per-image PSNR in dB
    mse: np.ndarray | None  # (n,) per-image MSE
    discrete_latents: bool
    method: str
    data: str
    factor_names: tuple[str, ...]
    encode_seconds: float
    model_device: str = "cpu"  # where the model ran: infomec.device=auto computes there when it is a GPU
    infoe_features: str = "standardize"  # what infomec.infoe_features=auto means for this latent module
    sampled: dict = field(default_factory=dict)  # FactorVAE/BetaVAE results, computed on the training thread
    interventions: np.ndarray | None = None  # (T, n_z, C, H, W) decoded latent sweeps, in [0, 1]
    intervention_start: str = "the first evaluation image"  # what the sweeps start from (the figure's title)
    reconstructions: tuple[np.ndarray, np.ndarray] | None = None  # originals, reconstructions (k, C, H, W)


@dataclass
class EvaluationOutcome:
    step: int
    final: bool
    result: dict[str, float]
    artifacts: dict[str, Path] = field(default_factory=dict)


def shard_positions(n: int, batch_size: int, rank: int = 0, world_size: int = 1) -> list[torch.Tensor]:
    """This rank's batches of evaluation-set positions ``0..n-1``: the subset is cut into batches of
    ``batch_size`` exactly as a single process would, and whole batches are dealt round-robin to the ranks.
    Every image is thus encoded in the same batch as in a single-process run (batch composition can change a
    network's floating-point output), and the gathered matrix is bitwise the single-process one."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    return list(torch.arange(n).split(int(batch_size)))[rank::world_size]


class DisentanglementEvaluation(pl.Callback):
    """Args:
        output_dir: where ``metrics.json``, ``metrics_history.jsonl`` and the PNGs go (the Hydra run
            directory).
        every_n_steps: periodic evaluation cadence (0 = only at the end).
        n_samples: evaluation subset size (None = the data module's ``eval_size``).
        batch_size: encoding batch size (per process; under DDP the batches are dealt to the ranks).
        metrics: metrics of the final evaluation (and of :meth:`run` by default): names from
            :data:`disentangle.metrics.METRICS`, or ``"all"``.
        periodic_metrics: metrics of the periodic evaluations (DCI and the sampled scores are the slow ones).
        infomec, dci, mig, sap, modularity, explicitness, mcc, rotation, factorvae, betavae: keyword options of
            each metric's function in :mod:`disentangle.metrics` (e.g. ``dci={"max_depth": 8}``).
        figures: write the NMI and DCI-importance heatmaps, the intervention grid and the reconstruction
            grid at the end (the last two only for a model with a decoder); the latent scatter
            (``latent_scatter.png``, spec categorical_vae.md §16) when the representation is 2-D or the rotation
            angle was computed; and, when MCC was computed, true vs recovered factors (``factor_recovery.png``,
            Cliff paper Fig. 1).
        n_interventions: interpolation points per latent in the intervention grid.
        progress: progress bar while encoding.
        background: compute the metrics in a worker thread so training is not stalled; the final evaluation is
            waited for before training returns. False computes them on the training thread.
        n_reconstructions: images in the reconstruction grid.
        save_latents: also write the gathered evaluation arrays (``latents.npz``: latents, factors, psnr) at
            the end.
        metric_fn: replacement for :func:`disentangle.metrics.accumulate.disentanglement_metrics` (a callable
            or a dotted path; same signature), e.g. to add a metric.
    """

    def __init__(
        self,
        output_dir: str | Path = ".",
        every_n_steps: int = 5000,
        n_samples: int | None = None,
        batch_size: int = 256,
        metrics: Sequence[str] | str = ("infomec", "dci"),
        periodic_metrics: Sequence[str] | str = ("infomec",),
        infomec: dict | None = None,
        dci: dict | None = None,
        mig: dict | None = None,
        sap: dict | None = None,
        modularity: dict | None = None,
        explicitness: dict | None = None,
        mcc: dict | None = None,
        rotation: dict | None = None,
        factorvae: dict | None = None,
        betavae: dict | None = None,
        figures: bool = True,
        n_interventions: int = 10,
        progress: bool = True,
        background: bool = True,
        n_reconstructions: int = 8,
        save_latents: bool = False,
        metric_fn: Callable[..., dict] | str | None = None,
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
        self.output_dir = Path(output_dir)
        self.every_n_steps = int(every_n_steps)
        self.n_samples = None if n_samples is None else int(n_samples)
        self.batch_size = int(batch_size)
        self.metrics = check_metric_names(metrics, key="callbacks.evaluation.metrics")
        self.periodic_metrics = check_metric_names(periodic_metrics, key="callbacks.evaluation.periodic_metrics")
        given = {"infomec": infomec, "dci": dci, "mig": mig, "sap": sap, "modularity": modularity,
                 "explicitness": explicitness, "mcc": mcc, "rotation": rotation, "factorvae": factorvae,
                 "betavae": betavae}
        self.options = {name: dict(given[name] or {}) for name in OPTION_GROUPS}
        self.figures = bool(figures)
        self.n_interventions = int(n_interventions)
        self.progress = bool(progress)
        self.background = bool(background)
        self.n_reconstructions = int(n_reconstructions)
        self.save_latents = bool(save_latents)
        if isinstance(metric_fn, str):
            metric_fn = get_method(metric_fn)
        self.metric_fn = metric_fn or disentanglement_metrics
        self.last: dict | None = None  # the latest finished evaluation (the final one after training)
        self.artifacts: dict[str, Path] = {}  # files of the latest written evaluation
        self.history: list[dict] = []  # every finished evaluation of this callback, with its step
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[int, Future]] = deque()

    def __getstate__(self):  # threads and futures do not pickle (ddp_spawn, deepcopy)
        state = dict(self.__dict__)
        state["_executor"], state["_pending"] = None, deque()
        return state

    # -- Lightning hooks ---------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        """A resumed run (global step > 0): take up the history on disk (already cut back to the checkpoint's
        step by :func:`disentangle.checkpointing.trim_logs`) and redo the periodic evaluation of the checkpoint's
        step if the kill came before the worker had recorded it, so the history has no missing step."""
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
        self._collect(trainer.loggers, wait=False, history=self._history_path(trainer))
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0 and step < trainer.max_steps:
            self.evaluate(trainer, pl_module, final=False)

    def on_train_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, final=True)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # the run failed: still deliver everything the worker finishes, without masking the original exception
        try:
            for error in self._collect_all(trainer):
                log.error("%s", error)
        finally:
            self._shutdown()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        try:
            errors = self._collect_all(trainer)
        finally:
            self._shutdown()
        if errors:
            raise errors[0]

    # -- the work ----------------------------------------------------------------------------------
    def evaluate(self, trainer, pl_module, final: bool) -> dict | None:
        """Encode on every rank; on rank 0 compute (in the worker if ``background``) and, at the end, wait.
        Returns the final result (rank 0, ``final``), else None."""
        job = self.prepare(
            pl_module, trainer.datamodule, step=trainer.global_step, final=final,
            write=final and trainer.is_global_zero, metrics=self.metrics if final else self.periodic_metrics,
            rank=trainer.global_rank, world_size=trainer.world_size,
        )
        if job is None:  # not global rank 0: its rows went to rank 0 in the all-gather
            return None
        self._submit(job)
        history = self._history_path(trainer)
        self._collect(trainer.loggers, wait=final, history=history)
        return self.last if final else None

    def run(self, pl_module, datamodule, *, step: int = 0, logger=None, final: bool = True,
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
            raise _failure(step, exc) from exc
        self._record(outcome, _as_list(logger), history=None)
        return outcome.result

    @torch.no_grad()
    def encode_subset(self, pl_module, datamodule, rank: int = 0, world_size: int = 1) -> dict:
        """Encode this rank's shard of the evaluation subset and all-gather every rank's rows.

        Returns numpy ``{"latents", "factors", "index", "psnr", "mse"}`` over the whole subset in evaluation-set
        order (every rank receives them; the collective needs every rank to call this)."""
        device = pl_module.device
        n = min(self.n_samples or datamodule.eval_size, datamodule.eval_size)
        indices = datamodule.eval_indices()[:n]
        shard = shard_positions(n, self.batch_size, rank, world_size)
        acc = LatentFactorAccumulator()
        for pos in tqdm(shard, desc="evaluate: encode", leave=False, disable=not self.progress or rank != 0):
            images, factors = datamodule.gather(indices[pos].to(device))
            z, recon = pl_module.embed(images)
            if recon is None:  # encoder-only model: no reconstruction, no PSNR/MSE
                acc.update(z.float(), factors, pos.to(device))
                continue
            mse = M.mse_per_image(recon, images)
            acc.update(z.float(), factors, pos.to(device), torch.as_tensor(M.psnr_from_mse(mse), device=device),
                       torch.as_tensor(mse, device=device))
        if not shard:  # more ranks than batches: contribute zero rows of the right dtype and width
            images, factors = datamodule.gather(indices[:1].to(device))
            z, recon = pl_module.embed(images)
            empty = torch.zeros(0, dtype=torch.float64, device=device)
            quality = () if recon is None else (empty, empty)
            acc.update(z[:0].float(), factors[:0], torch.zeros(0, dtype=torch.long, device=device), *quality)
        out = acc.compute()
        acc.reset()
        return out

    @torch.no_grad()
    def prepare(self, pl_module, datamodule, *, step: int, final: bool, write: bool,
                metrics: Sequence[str] = ("infomec", "dci"), rank: int = 0,
                world_size: int = 1) -> EvaluationJob | None:
        """The training-thread part: encode and gather (all ranks), then on rank 0 run the sampled metrics
        among ``metrics`` (they need the model) and decode what the figures show. Returns the job for
        :meth:`compute` on rank 0, None on the other ranks."""
        start = time.perf_counter()
        was_training = pl_module.training
        pl_module.eval()
        try:
            data = self.encode_subset(pl_module, datamodule, rank=rank, world_size=world_size)
            if rank != 0:
                return None
            sampled = {}
            if any(m in SAMPLED_METRICS for m in metrics):
                represent = getattr(pl_module, "represent", None) or (lambda x: pl_module.embed(x)[0])
                try:
                    sampled = sampled_metrics(datamodule, represent, metrics=metrics, options=self.options,
                                              device=pl_module.device, progress=self.progress)
                except Exception as exc:
                    raise _failure(step, exc) from exc
            interventions = reconstructions = None
            if write and self.figures and getattr(pl_module, "has_decoder", True):  # encoder-only: nothing to decode
                interventions = self._decode_interventions(pl_module, datamodule, data["latents"])
                reconstructions = self._reconstructions(pl_module, datamodule)
        finally:
            pl_module.train(was_training)
        return EvaluationJob(
            step=int(step), final=final, write=write,
            metrics=tuple(m for m in metrics if m not in SAMPLED_METRICS),
            latents=data["latents"], factors=data["factors"], psnr=data["psnr"], mse=data["mse"], sampled=sampled,
            discrete_latents=bool(pl_module.discrete_latents),
            method=getattr(pl_module, "method", type(pl_module).__name__), data=datamodule.name,
            factor_names=tuple(datamodule.factor_names), encode_seconds=time.perf_counter() - start,
            model_device=str(pl_module.device),
            infoe_features="onehot" if _categorical(pl_module) else "standardize",
            interventions=interventions, reconstructions=reconstructions,
            intervention_start=("a fixed prior draw" if getattr(pl_module, "intervene_on", None) == "prior"
                                else "the first evaluation image"),
        )

    def compute(self, job: EvaluationJob) -> EvaluationOutcome:
        """The worker part (no model, no torch): metrics, then for a writing job metrics.json and figures."""
        start = time.perf_counter()
        out = self.metric_fn(
            job.latents, job.factors, discrete_latents=job.discrete_latents, metrics=job.metrics,
            options=resolve_options(self.options, job.model_device, job.infoe_features), psnr=job.psnr, mse=job.mse,
        )
        out = {**job.sampled, **out}
        result = {k: float(out[k]) for k in SUMMARY_KEYS if k in out}
        result["eval_seconds"] = job.encode_seconds + time.perf_counter() - start
        artifacts = self._write(job, result, out) if job.write else {}
        return EvaluationOutcome(job.step, job.final, result, artifacts)

    # -- worker management (training thread) -------------------------------------------------------
    def _submit(self, job: EvaluationJob) -> None:
        if self.background:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disentangle-eval")
            future = self._executor.submit(self.compute, job)
        else:
            try:
                outcome = self.compute(job)
            except Exception as exc:
                raise _failure(job.step, exc) from exc
            future = Future()
            future.set_result(outcome)
        self._pending.append((job.step, future))

    def _collect(self, loggers, *, wait: bool, history: Path | None) -> None:
        """Log and record finished evaluations in the order they were taken; with ``wait``, all of them.
        A failed one raises :class:`EvaluationError` here, on the training thread."""
        while self._pending:
            step, future = self._pending[0]
            if not wait and not future.done():
                return
            self._pending.popleft()
            try:
                outcome = future.result()
            except Exception as exc:
                raise _failure(step, exc, where=" in the background worker" if self.background else "") from exc
            self._record(outcome, loggers, history=history)

    def _collect_all(self, trainer) -> list[EvaluationError]:
        """Wait for and record every pending evaluation, going on past failures; returns the failures."""
        errors = []
        while self._pending:
            try:
                self._collect(trainer.loggers, wait=True, history=self._history_path(trainer))
            except EvaluationError as exc:
                errors.append(exc)
        return errors

    def _record(self, outcome: EvaluationOutcome, loggers: Sequence, history: Path | None) -> None:
        for lg in loggers:
            lg.log_metrics({f"eval/{k}": v for k, v in outcome.result.items()}, step=outcome.step)
            lg.save()  # on disk together with the history entry below (what a resumed run goes by)
        images = {k: p for k, p in outcome.artifacts.items() if p.suffix == ".png"}
        if images:
            _log_images(loggers, images, outcome.step)
        entry = {"step": outcome.step, "final": outcome.final, **outcome.result}
        self.history.append(entry)
        if history is not None:
            history.parent.mkdir(parents=True, exist_ok=True)
            with history.open("a") as f:
                f.write(json.dumps(entry) + "\n")
        self.last = outcome.result
        if outcome.artifacts:
            self.artifacts = outcome.artifacts

    def _shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _history_path(self, trainer) -> Path | None:
        return self.output_dir / HISTORY_FILE if trainer.is_global_zero else None

    # -- figures and files -------------------------------------------------------------------------
    @torch.no_grad()
    def _decode_interventions(self, pl_module, datamodule, z: np.ndarray) -> np.ndarray:
        """Sweep each latent over its [min, max] on the evaluation set from the first evaluation image (spec
        qlae.md §9.1), or from the model's ``intervention_base`` (a GAN's prior draw); a categorical latent (VQ,
        QVAE code indices) steps through the codes it uses on the evaluation set instead, since labels in between
        mean nothing, in the latent module's order (scalar codebooks: by value). (n_interventions, n_z, C, H, W) in
        [0, 1]."""
        images, _ = datamodule.gather(datamodule.eval_indices()[:1].to(pl_module.device))
        # a model may start elsewhere (the GANs: a prior draw, spec qlae.md §9.1 item 6)
        base = pl_module.intervention_base(images) if hasattr(pl_module, "intervention_base") else \
            pl_module.embed(images)[0]
        steps = np.linspace(0.0, 1.0, self.n_interventions)
        n_z = z.shape[1]
        grid = base.float().repeat(self.n_interventions * n_z, 1).reshape(self.n_interventions, n_z, n_z).clone()
        for j in range(n_z):
            if _categorical(pl_module):
                codes = pl_module.latent.order_codes(torch.as_tensor(np.unique(z[:, j]), device=grid.device))
                sweep = codes[torch.as_tensor(np.round(steps * (len(codes) - 1)).astype(int), device=grid.device)]
            else:
                sweep = z[:, j].min() + steps * (z[:, j].max() - z[:, j].min())
            grid[:, j, j] = torch.as_tensor(sweep, dtype=grid.dtype, device=grid.device)
        # in representation space (mu for a Gaussian, code indices for VQ), mapped back by the latent module
        decode = getattr(pl_module, "decode_representation", pl_module.decode)
        to_image = getattr(pl_module, "to_image", torch.sigmoid)
        decoded = to_image(decode(grid.reshape(-1, n_z))).float().cpu().numpy()
        return decoded.reshape(self.n_interventions, n_z, *decoded.shape[1:])

    @torch.no_grad()
    def _reconstructions(self, pl_module, datamodule) -> tuple[np.ndarray, np.ndarray] | None:
        k = min(self.n_reconstructions, self.n_samples or datamodule.eval_size, datamodule.eval_size)
        if k < 1:
            return None
        images, _ = datamodule.gather(datamodule.eval_indices()[:k].to(pl_module.device))
        _, recon = pl_module.embed(images)
        return images.float().cpu().numpy(), recon.float().cpu().numpy()

    def _write(self, job: EvaluationJob, result: dict, out: dict) -> dict[str, Path]:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        record = dict(result)
        record.update(
            step=job.step, method=job.method, data=job.data, n_samples=len(job.latents),
            discrete_latents=job.discrete_latents, factor_names=list(job.factor_names),
            metrics=[*job.metrics, *(m for m in SAMPLED_METRICS if m in job.sampled)],
        )
        for key, value in out.items():  # the arrays behind the scalars: NMI, active mask, importances, ...
            if key not in SUMMARY_KEYS and isinstance(value, np.ndarray):
                record[key] = value.round(4).tolist() if value.dtype.kind == "f" else value.tolist()
        path = self.output_dir / "metrics.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, path)  # readers never see a half-written file
        artifacts = {"metrics": path}
        if self.save_latents:
            artifacts["latents"] = self.output_dir / "latents.npz"
            arrays = {"latents": job.latents, "factors": job.factors}
            arrays.update({k: v for k, v in (("psnr", job.psnr), ("mse", job.mse)) if v is not None})
            np.savez(artifacts["latents"], **arrays)
        if self.figures:
            nmi = np.asarray(out["nmi"]) if "nmi" in out else None
            active = np.asarray(out["active"]).astype(bool) if "active" in out else None
            if nmi is not None:
                artifacts["nmi_heatmap"] = nmi_heatmap(nmi, active, job.factor_names,
                                                       self.output_dir / "nmi_heatmap.png")
            if "dci_importance" in out:
                artifacts["dci_importance"] = dci_importance_heatmap(
                    out["dci_importance"], job.factor_names, self.output_dir / "dci_importance.png")
            if job.interventions is not None:
                labels = _latent_labels(nmi, active, job.factor_names, job.latents.shape[1])
                artifacts["interventions"] = intervention_grid(job.interventions, labels,
                                                               self.output_dir / "interventions.png",
                                                               start=job.intervention_start)
            if job.reconstructions is not None:
                artifacts["reconstructions"] = reconstruction_grid(*job.reconstructions,
                                                                   self.output_dir / "reconstructions.png")
            if job.latents.shape[1] == 2 or "rotation" in out:
                artifacts["latent_scatter"] = _latent_scatter(job, out, self.output_dir / "latent_scatter.png")
            if "mcc_matching" in out:
                artifacts["factor_recovery"] = factor_recovery_scatter(
                    job.latents, job.factors, job.factor_names, self.output_dir / "factor_recovery.png",
                    matching=out["mcc_matching"], title=f"{job.method} on {job.data} (step {job.step}): "
                                                        f"MCC {float(out['mcc']):.3f}")
        return artifacts


def _latent_scatter(job: EvaluationJob, out: dict, path: Path) -> Path:
    """The Circles latent-space figure (spec categorical_vae.md §16): two latent dims coloured by each true factor,
    titled with the model and, when computed, the rotation angle. With more than 2 latents it shows the two with the
    largest regression directions (rotation computed) or the largest variances."""
    directions = out.get("rotation_directions")
    if job.latents.shape[1] == 2:
        dims = (0, 1)
    else:
        weight = np.linalg.norm(directions, axis=1) if directions is not None else job.latents.var(axis=0)
        dims = tuple(sorted(int(j) for j in np.argsort(-weight, kind="stable")[:2]))
    title = f"{job.method} on {job.data} (step {job.step})"
    if "rotation" in out:
        title += f": rotation {float(out['rotation']):.1f} deg"
    if "mig" in out:
        title += f", MIG {float(out['mig']):.3f}"
    return latent_scatter(job.latents, job.factors, job.factor_names, path, dims=dims, title=title,
                          directions=directions)


def resolve_options(options: dict, model_device: str, infoe_features: str = "standardize") -> dict:
    """Resolve the model-dependent ``auto`` options of InfoMEC: ``device: auto`` becomes the model's device when
    that is a GPU and None (numpy/sklearn on the CPU) otherwise, so the discrete MI tables and InfoE's
    regressions run where the model does; ``infoe_features: auto`` becomes the latent module's choice (one-hot
    for VQ-VAE's unordered code indices, standardized values otherwise; spec qlae.md §12 row 9)."""
    infomec = dict(options.get("infomec") or {})
    if infomec.get("device") == "auto":
        infomec["device"] = model_device if not str(model_device).startswith("cpu") else None
    if infomec.get("infoe_features") == "auto":
        infomec["infoe_features"] = infoe_features
    return {**options, "infomec": infomec}


def _categorical(pl_module) -> bool:
    """Whether the model's representation is unordered category labels (VQ code indices)."""
    return bool(getattr(getattr(pl_module, "latent", None), "categorical", False))


def _latent_labels(nmi: np.ndarray | None, active: np.ndarray | None, factor_names: Sequence[str],
                   n_latents: int) -> list[str]:
    """'z3: object_hue' for an active latent (the factor it shares most information with), 'z3 (inactive)'
    for an inactive one; plain 'z3' when InfoMEC was not computed."""
    if nmi is None:
        return [f"z{j}" for j in range(n_latents)]
    labels = []
    for j in range(nmi.shape[1]):
        if active[j]:
            labels.append(f"z{j}: {factor_names[int(nmi[:, j].argmax())]}")
        else:
            labels.append(f"z{j} (inactive)")
    return labels


def _failure(step: int, exc: Exception, where: str = "") -> EvaluationError:
    return EvaluationError(f"evaluation at step {step} failed{where}: {type(exc).__name__}: {exc}")


def _as_list(logger) -> list:
    if logger is None:
        return []
    return list(getattr(logger, "loggers", [logger]))


def _log_images(loggers: Sequence, images: dict[str, Path], step: int) -> None:
    """Send PNGs to loggers that take images (W&B); file-based loggers already have them on disk."""
    for lg in loggers:
        if hasattr(lg, "log_image"):
            for key, path in images.items():
                lg.log_image(key=f"eval/{key}", images=[str(path)], step=step)
