"""Accumulate the evaluation set across batches and distributed ranks with torchmetrics.

The disentanglement metrics of spec ``shared/specs/qlae.md`` §8 (InfoMEC §8.2-8.5, nonlinear DCI §8.6) are not
averages of per-batch values: they need the whole (latents, factors) matrix of the evaluation subset (§7.7) at
once. :class:`LatentFactorAccumulator` collects that matrix batch by batch in torchmetrics list states that
are concatenated across ranks (``dist_reduce_fx="cat"``); :class:`DisentanglementMetric` then calls
:func:`disentangle.metrics.infomec` and :func:`disentangle.metrics.dci` on the gathered arrays.

Exactness across process counts: under DDP each rank encodes a disjoint shard of the evaluation subset and the
all-gather returns the rows in rank order, not in evaluation-set order. Every row therefore carries its
position in the evaluation subset, and :meth:`LatentFactorAccumulator.compute` sorts by it, so the gathered
matrix is row for row the single-process one (and InfoMEC/DCI, whose estimators depend on row order through
their seeded splits and jitter, give the same numbers).

The metric computation itself is the plain function :func:`disentanglement_metrics` (numpy in, floats and
arrays out) so that a caller can run it off the training thread; :class:`DisentanglementMetric` is the
torchmetrics wrapper.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from disentangle.metrics import dci as _dci
from disentangle.metrics import infomec as _infomec

__all__ = ["SCALAR_KEYS", "DisentanglementMetric", "LatentFactorAccumulator", "disentanglement_metrics"]

# the scalar results of :func:`disentanglement_metrics`, in report order
SCALAR_KEYS = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


class LatentFactorAccumulator(Metric):
    """Collects latents z (B, n_z) (spec qlae.md §8.1), integer factors s (B, n_s), every row's position in
    the evaluation subset (§7.7) and, optionally, per-image reconstruction PSNR (§8.7), over batches and DDP
    ranks.

    ``compute()`` returns numpy arrays ``{"latents", "factors", "index", "psnr"}`` sorted by ``index``
    (``psnr`` is None when no update passed it), identical whatever the number of processes that encoded the
    shards.

    Distributed use: every rank must call :meth:`update` at least once, with zero rows if its shard is empty,
    so that all ranks gather tensors of the same dtype and trailing shape (torchmetrics substitutes a 1-D
    float tensor for a never-updated list state, which would not concatenate with the others). States live on
    the device of the tensors passed in, which is the device the process group communicates on (gloo: CPU,
    NCCL: the GPU).
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_state("latents", default=[], dist_reduce_fx="cat")
        self.add_state("factors", default=[], dist_reduce_fx="cat")
        self.add_state("index", default=[], dist_reduce_fx="cat")
        self.add_state("psnr", default=[], dist_reduce_fx="cat")

    def update(self, latents: torch.Tensor, factors: torch.Tensor, index: torch.Tensor,
               psnr: torch.Tensor | None = None) -> None:
        """Add one batch: ``latents`` (B, n_z), ``factors`` (B, n_s), ``index`` (B,) positions in the
        evaluation subset, ``psnr`` (B,) per-image PSNR in dB (optional, but pass it on every update or on
        none)."""
        latents, factors, index = torch.as_tensor(latents), torch.as_tensor(factors), torch.as_tensor(index)
        if latents.ndim != 2 or factors.ndim != 2 or index.ndim != 1:
            raise ValueError(
                "expected latents (B, n_z), factors (B, n_s) and index (B,); got shapes "
                f"{tuple(latents.shape)}, {tuple(factors.shape)} and {tuple(index.shape)}"
            )
        n = latents.shape[0]
        if factors.shape[0] != n or index.shape[0] != n:
            raise ValueError(
                f"batch sizes differ: latents {n}, factors {factors.shape[0]}, index {index.shape[0]}")
        self.latents.append(latents.detach())
        self.factors.append(factors.detach().long())
        self.index.append(index.detach().long())
        if psnr is not None:
            psnr = torch.as_tensor(psnr)
            if psnr.shape != (n,):
                raise ValueError(f"psnr must have shape ({n},), got {tuple(psnr.shape)}")
            self.psnr.append(psnr.detach().double())

    def gathered(self) -> dict[str, np.ndarray | None]:
        """The (synced, inside ``compute``) states as numpy arrays sorted by evaluation-set position."""
        # states are lists of per-batch tensors, or single tensors once synced across ranks
        if isinstance(self.index, list) and not self.index:
            raise ValueError("LatentFactorAccumulator: no rows were accumulated")
        index = dim_zero_cat(self.index).cpu()
        latents = dim_zero_cat(self.latents).cpu()
        factors = dim_zero_cat(self.factors).cpu()
        has_psnr = not (isinstance(self.psnr, list) and not self.psnr)
        psnr = dim_zero_cat(self.psnr).cpu() if has_psnr else None
        if psnr is not None and psnr.numel() == 0:
            psnr = None  # no rank passed PSNR
        if index.numel() == 0:
            raise ValueError("LatentFactorAccumulator: no rows were accumulated")
        if psnr is not None and psnr.shape[0] != index.shape[0]:
            raise ValueError(
                f"psnr was given for {psnr.shape[0]} of {index.shape[0]} rows; pass it on every update")
        order = torch.argsort(index, stable=True)
        index = index[order]
        if index.numel() > 1 and bool((index[1:] == index[:-1]).any()):
            raise ValueError("LatentFactorAccumulator: an evaluation-set position was accumulated twice "
                             "(overlapping shards or a batch added twice)")
        return {
            "latents": latents[order].numpy(),
            "factors": factors[order].numpy(),
            "index": index.numpy(),
            "psnr": None if psnr is None else psnr[order].numpy(),
        }

    def compute(self) -> dict[str, np.ndarray | None]:
        return self.gathered()


def disentanglement_metrics(
    latents: np.ndarray,
    factors: np.ndarray,
    *,
    discrete_latents: bool,
    psnr: np.ndarray | None = None,
    infomec_kwargs: Mapping[str, Any] | None = None,
    dci_kwargs: Mapping[str, Any] | None = None,
    run_dci: bool = True,
) -> dict[str, Any]:
    """InfoMEC (spec qlae.md §8.2-8.5) and, with ``run_dci``, nonlinear DCI (§8.6) of ``latents`` with respect
    to ``factors``, plus the mean per-image PSNR (§8.7) when ``psnr`` is given.

    A plain function of numpy arrays (no torch, no model), so it can run in a worker thread or process.
    Returns floats ``infom, infoe, infoc`` (+ ``dci_d, dci_i, dci_c``, ``psnr``) and arrays ``nmi`` (n_s,
    n_z), ``active`` (n_z,) (+ ``dci_importance`` (n_z, n_s)).
    """
    info = _infomec(factors, latents, discrete_latents=discrete_latents, **dict(infomec_kwargs or {}))
    out: dict[str, Any] = {
        "infom": float(info["infom"]), "infoe": float(info["infoe"]), "infoc": float(info["infoc"]),
        "nmi": np.asarray(info["nmi"]), "active": np.asarray(info["active"]).astype(bool),
    }
    if run_dci:
        d = _dci(factors, latents, **dict(dci_kwargs or {}))
        out.update(dci_d=float(d["d"]), dci_i=float(d["i"]), dci_c=float(d["c"]),
                   dci_importance=np.asarray(d["importance"]))
    if psnr is not None:
        out["psnr"] = float(np.mean(psnr))
    return out


class DisentanglementMetric(LatentFactorAccumulator):
    """torchmetrics InfoMEC + DCI (spec qlae.md §8): accumulate like :class:`LatentFactorAccumulator`;
    ``compute()`` gathers every rank's rows, sorts them by evaluation-set position and returns
    :func:`disentanglement_metrics`.

    Args:
        discrete_latents: whether z is discrete (QLAE, VQ-VAE; spec §8.1).
        infomec, dci: keyword options of :func:`disentangle.metrics.infomec` / ``dci``.
        run_dci: compute DCI too (the slow part).
        metric_fn: replacement for :func:`disentanglement_metrics` (same signature).
    """

    def __init__(self, discrete_latents: bool, infomec: Mapping[str, Any] | None = None,
                 dci: Mapping[str, Any] | None = None, run_dci: bool = True,
                 metric_fn: Callable[..., dict] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.discrete_latents = bool(discrete_latents)
        self.infomec_kwargs = dict(infomec or {})
        self.dci_kwargs = dict(dci or {})
        self.run_dci = bool(run_dci)
        self.metric_fn = metric_fn or disentanglement_metrics

    def compute(self) -> dict[str, Any]:
        data = self.gathered()
        return self.metric_fn(
            data["latents"], data["factors"], discrete_latents=self.discrete_latents, psnr=data["psnr"],
            infomec_kwargs=self.infomec_kwargs, dci_kwargs=self.dci_kwargs, run_dci=self.run_dci,
        )
