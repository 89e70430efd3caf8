"""The evaluation's training-thread part: everything that needs the model.

Encode this process's shard of the evaluation subset and all-gather every rank's rows with
:class:`~disentangle.metrics.accumulate.LatentFactorAccumulator` (sorted by evaluation-set position, so 1 and N
processes give the same matrix); run the sampled metrics (FactorVAE, BetaVAE scores: they encode batches of their
own); and, for a final evaluation that writes figures, decode the intervention sweeps, the reconstructions and a
generative model's samples. The model is asked only through its contract
(:class:`~disentangle.models.base.EvaluableModel`).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import EvaluationError
from ..metrics.accumulate import LatentFactorAccumulator
from ..metrics.reconstruction import mse_per_image, psnr_from_mse
from ..metrics.suite import ModelFacts, metric_names, sampled_metrics
from ..models.base import EvaluableModel
from .jobs import EvaluationJob


def failure(step: int, exc: Exception, where: str = "") -> EvaluationError:
    """The one-line error for an evaluation that failed at ``step``."""
    return EvaluationError(f"evaluation at step {step} failed{where}: {type(exc).__name__}: {exc}")


@dataclass
class GatherSettings:
    """The callback's options that the training-thread part reads."""

    n_samples: int | None = None  # evaluation subset size (None = the data module's eval_size)
    batch_size: int = 256
    progress: bool = True
    figures: bool = True
    n_interventions: int = 10
    n_reconstructions: int = 8


def shard_positions(n: int, batch_size: int, rank: int = 0, world_size: int = 1) -> list[torch.Tensor]:
    """This rank's batches of evaluation-set positions ``0..n-1``: the subset is cut into batches of
    ``batch_size`` exactly as a single process would, and whole batches are dealt round-robin to the ranks.
    Every image is thus encoded in the same batch as in a single-process run (batch composition can change a
    network's floating-point output), and the gathered matrix is bitwise the single-process one."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    return list(torch.arange(n).split(int(batch_size)))[rank::world_size]


@torch.no_grad()
def encode_subset(model: EvaluableModel, datamodule, settings: GatherSettings, rank: int = 0,
                  world_size: int = 1, indices: torch.Tensor | None = None) -> dict:
    """Encode this rank's shard of the evaluation subset (or of ``indices``, dataset indices) and all-gather every
    rank's rows.

    Returns numpy ``{"latents", "factors", "index", "psnr", "mse"}`` over the whole subset in evaluation-set
    order (every rank receives them; the collective needs every rank to call this)."""
    device = model.device
    if indices is None:
        indices = evaluation_indices(datamodule, settings)
    n = len(indices)
    shard = shard_positions(n, settings.batch_size, rank, world_size)
    acc = LatentFactorAccumulator()
    for pos in tqdm(shard, desc="evaluate: encode", leave=False, disable=not settings.progress or rank != 0):
        images, factors = datamodule.gather(indices[pos].to(device))
        z, recon = model.embed(images)
        if recon is None:  # encoder-only model: no reconstruction, no PSNR/MSE
            acc.update(z.float(), factors, pos.to(device))
            continue
        mse = mse_per_image(recon, images)
        acc.update(z.float(), factors, pos.to(device), torch.as_tensor(psnr_from_mse(mse), device=device),
                   torch.as_tensor(mse, device=device))
    if not shard:  # more ranks than batches: contribute zero rows of the right dtype and width
        images, factors = datamodule.gather(indices[:1].to(device))
        z, recon = model.embed(images)
        empty = torch.zeros(0, dtype=torch.float64, device=device)
        quality = () if recon is None else (empty, empty)
        acc.update(z[:0].float(), factors[:0], torch.zeros(0, dtype=torch.long, device=device), *quality)
    out = acc.compute()
    acc.reset()
    return out


def evaluation_indices(datamodule, settings: GatherSettings) -> torch.Tensor:
    """The dataset indices of the evaluation subset: the first ``n_samples`` of the data module's fixed subset."""
    return datamodule.eval_indices()[: min(settings.n_samples or datamodule.eval_size, datamodule.eval_size)]


def heldout_subset(heldout_mask: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """The held-out evaluation set of a ``data.split`` run: ``n`` of the combinations training never sees
    (``heldout_mask``, the data module's), drawn without replacement by ``seed`` (the data's ``eval_seed``), so
    that a resumed or re-evaluated run scores the same images."""
    heldout = torch.nonzero(heldout_mask).flatten()
    gen = torch.Generator().manual_seed(int(seed))
    return heldout[torch.randperm(len(heldout), generator=gen)[:n]]


@torch.no_grad()
def encode_heldout(model: EvaluableModel, datamodule, settings: GatherSettings, rank: int = 0,
                   world_size: int = 1) -> dict | None:
    """For a ``data.split`` run: encode the held-out set (as many samples as the evaluation subset, fewer if fewer
    are held out) on every rank, and mark which rows of the evaluation subset training could draw (``inside``,
    the readout's fitting set). None under ``data.split=random`` or when fewer than 2 samples are held out."""
    if getattr(datamodule, "split", "random") == "random":
        return None
    mask = datamodule.heldout_mask()
    eval_indices = evaluation_indices(datamodule, settings)
    indices = heldout_subset(mask, len(eval_indices), datamodule.eval_seed)
    if len(indices) < 2:
        return None
    out = encode_subset(model, datamodule, settings, rank=rank, world_size=world_size, indices=indices)
    out.update(dataset_index=indices.numpy(), inside=(~mask[eval_indices]).numpy(), n_heldout=int(mask.sum()))
    return out


@torch.no_grad()
def decode_interventions(model: EvaluableModel, datamodule, z: np.ndarray, n_interventions: int) -> np.ndarray:
    """Sweep each latent over its [min, max] on the evaluation set from the model's ``intervention_base`` (the
    first evaluation image's representation, as in QLAE paper Fig. 4; a GAN's prior draw); a categorical
    representation (VQ, QVAE code indices) steps through the codes it uses on the evaluation set instead,
    since labels in between mean nothing, in the model's ``order_codes`` (scalar codebooks: by value).
    (n_interventions, n_z, C, H, W) in [0, 1]."""
    images, _ = datamodule.gather(datamodule.eval_indices()[:1].to(model.device))
    base = model.intervention_base(images)
    steps = np.linspace(0.0, 1.0, n_interventions)
    n_z = z.shape[1]
    categorical = model.latent_spec.categorical
    grid = base.float().repeat(n_interventions * n_z, 1).reshape(n_interventions, n_z, n_z).clone()
    for j in range(n_z):
        if categorical:
            codes = model.order_codes(torch.as_tensor(np.unique(z[:, j]), device=grid.device))
            sweep = codes[torch.as_tensor(np.round(steps * (len(codes) - 1)).astype(int), device=grid.device)]
        else:
            sweep = z[:, j].min() + steps * (z[:, j].max() - z[:, j].min())
        grid[:, j, j] = torch.as_tensor(sweep, dtype=grid.dtype, device=grid.device)
    # in representation space (mu for a Gaussian, code indices for VQ), mapped back by the model
    decoded = model.decode_intervention(grid.reshape(-1, n_z)).float().cpu().numpy()
    return decoded.reshape(n_interventions, n_z, *decoded.shape[1:])


@torch.no_grad()
def reconstruction_pairs(model: EvaluableModel, datamodule, k: int, indices: torch.Tensor | None = None
                         ) -> tuple[np.ndarray, np.ndarray] | None:
    """The first ``k`` evaluation images (or of ``indices``) and their reconstructions (None for k < 1)."""
    if indices is None:
        indices = datamodule.eval_indices()
    k = min(k, len(indices))
    if k < 1:
        return None
    images, _ = datamodule.gather(indices[:k].to(model.device))
    _, recon = model.embed(images)
    return images.float().cpu().numpy(), recon.float().cpu().numpy()


@torch.no_grad()
def gather_job(model: EvaluableModel, datamodule, settings: GatherSettings, options: dict, *, step: int,
               final: bool, write: bool, metrics: Sequence[str], rank: int = 0,
               world_size: int = 1, figures_dir: Path | None = None) -> EvaluationJob | None:
    """The training-thread part: encode and gather (all ranks), then on rank 0 run the sampled metrics among
    ``metrics`` (they need the model) and decode what the figures show (a writing job's, or a periodic one's with
    ``figures_dir``). Returns the job for the worker on rank 0, None on the other ranks."""
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    sampled_names = metric_names(sampled=True)
    try:
        data = encode_subset(model, datamodule, settings, rank=rank, world_size=world_size)
        # the held-out combinations of a data.split run, scored at the end only (a readout is fitted on them)
        heldout = encode_heldout(model, datamodule, settings, rank=rank, world_size=world_size) if final else None
        if rank != 0:
            return None
        sampled = {}
        if any(m in sampled_names for m in metrics):
            try:
                sampled = sampled_metrics(datamodule, model.represent, metrics=metrics, options=options,
                                          device=model.device, progress=settings.progress)
            except Exception as exc:
                raise failure(step, exc) from exc
        interventions = reconstructions = samples = None
        draw = (write or figures_dir is not None) and settings.figures
        if draw and model.can_reconstruct:  # encoder-only: nothing to decode
            interventions = decode_interventions(model, datamodule, data["latents"], settings.n_interventions)
            k = min(settings.n_reconstructions, settings.n_samples or datamodule.eval_size, datamodule.eval_size)
            reconstructions = reconstruction_pairs(model, datamodule, k)
            if heldout is not None:
                heldout["reconstructions"] = reconstruction_pairs(model, datamodule, k,
                                                                  torch.as_tensor(heldout["dataset_index"]))
        if draw and model.can_sample and model.n_samples_figure:
            samples = model.sample(model.n_samples_figure, seed=0).float().cpu().numpy()
    finally:
        model.train(was_training)
    spec = model.latent_spec
    return EvaluationJob(
        step=int(step), final=final, write=write,
        metrics=tuple(m for m in metrics if m not in sampled_names),
        sampled_metrics=tuple(m for m in sampled_names if m in metrics) if sampled else (),
        latents=data["latents"], factors=data["factors"], psnr=data["psnr"], mse=data["mse"], sampled=sampled,
        method=model.method, data=datamodule.name,
        factor_names=tuple(datamodule.factor_names), encode_seconds=time.perf_counter() - start,
        model=ModelFacts(device=str(model.device), discrete=spec.discrete, categorical=spec.categorical),
        interventions=interventions, reconstructions=reconstructions, samples=samples,
        runtime=dict(model.runtime),
        intervention_start=model.intervention_start, figures_dir=figures_dir if draw else None,
        heldout=heldout, factor_sizes=tuple(int(n) for n in datamodule.factor_sizes),
        split=getattr(datamodule, "split", "random"),
    )
