"""Accumulate the evaluation set across batches and distributed ranks with torchmetrics.

The disentanglement metrics (InfoMEC, QLAE paper §4; nonlinear DCI, its App. C.5) are not averages of
per-batch values: they need the whole (latents, factors) matrix of the evaluation subset (the paper's §5:
10,000 i.i.d. samples) at once. :class:`LatentFactorAccumulator` collects that matrix batch by batch in
torchmetrics list states that are concatenated across ranks (``dist_reduce_fx="cat"``);
:class:`DisentanglementMetric` then runs the array metrics (:mod:`disentangle.metrics.suite`) on the gathered
arrays.

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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from disentangle.metrics.suite import array_metrics, check_metric_names

__all__ = ["DisentanglementMetric", "LatentFactorAccumulator", "disentanglement_metrics"]

_OPTIONAL = ("psnr", "mse")  # per-image reconstruction quality, passed on every update or on none


class LatentFactorAccumulator(Metric):
    """Collects latents z (B, n_z) (what the QLAE authors' code evaluates), integer factors s (B, n_s), every
    row's position in the evaluation subset and, optionally, per-image reconstruction PSNR (QLAE paper App. E)
    and MSE, over batches and DDP ranks.

    ``compute()`` returns numpy arrays ``{"latents", "factors", "index", "psnr", "mse"}`` sorted by ``index``
    (``psnr``/``mse`` are None when no update passed them), identical whatever the number of processes that
    encoded the shards.

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
        for name in _OPTIONAL:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, latents: torch.Tensor, factors: torch.Tensor, index: torch.Tensor,
               psnr: torch.Tensor | None = None, mse: torch.Tensor | None = None) -> None:
        """Add one batch: ``latents`` (B, n_z), ``factors`` (B, n_s), ``index`` (B,) positions in the
        evaluation subset, ``psnr`` (B,) per-image PSNR in dB and ``mse`` (B,) per-image MSE (both optional,
        but pass each on every update or on none)."""
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
        for name, value in zip(_OPTIONAL, (psnr, mse)):
            if value is not None:
                value = torch.as_tensor(value)
                if value.shape != (n,):
                    raise ValueError(f"{name} must have shape ({n},), got {tuple(value.shape)}")
                getattr(self, name).append(value.detach().double())

    def gathered(self) -> dict[str, np.ndarray | None]:
        """The (synced, inside ``compute``) states as numpy arrays sorted by evaluation-set position."""
        # states are lists of per-batch tensors, or single tensors once synced across ranks
        if isinstance(self.index, list) and not self.index:
            raise ValueError("LatentFactorAccumulator: no rows were accumulated")
        index = dim_zero_cat(self.index).cpu()
        latents = dim_zero_cat(self.latents).cpu()
        factors = dim_zero_cat(self.factors).cpu()
        if index.numel() == 0:
            raise ValueError("LatentFactorAccumulator: no rows were accumulated")
        optional = {}
        for name in _OPTIONAL:
            state = getattr(self, name)
            value = None if isinstance(state, list) and not state else dim_zero_cat(state).cpu()
            if value is not None and value.numel() == 0:
                value = None  # no rank passed it
            if value is not None and value.shape[0] != index.shape[0]:
                raise ValueError(
                    f"{name} was given for {value.shape[0]} of {index.shape[0]} rows; pass it on every update")
            optional[name] = value
        order = torch.argsort(index, stable=True)
        index = index[order]
        if index.numel() > 1 and bool((index[1:] == index[:-1]).any()):
            raise ValueError("LatentFactorAccumulator: an evaluation-set position was accumulated twice "
                             "(overlapping shards or a batch added twice)")
        return {
            "latents": latents[order].numpy(),
            "factors": factors[order].numpy(),
            "index": index.numpy(),
            **{k: None if v is None else v[order].numpy() for k, v in optional.items()},
        }

    def compute(self) -> dict[str, np.ndarray | None]:
        return self.gathered()


def disentanglement_metrics(
    latents: np.ndarray,
    factors: np.ndarray,
    *,
    discrete_latents: bool,
    metrics: Iterable[str] = ("infomec", "dci"),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    psnr: np.ndarray | None = None,
    mse: np.ndarray | None = None,
) -> dict[str, Any]:
    """The array metrics among ``metrics`` (:func:`disentangle.metrics.suite.array_metrics`: InfoMEC and DCI by
    default: QLAE paper §4 and App. C.5) of ``latents`` with respect to ``factors``, plus the mean per-image
    PSNR (QLAE paper App. E) and MSE (FactorQVAE paper Table 1) when given.

    A plain function of numpy arrays (no torch, no model), so it can run in a worker thread or process.
    ``options[name]`` are that metric's keyword arguments. Returns the flattened results: floats (``infom``,
    ``dci_d``, ``mig``, ..., ``psnr``, ``mse``) and arrays (``nmi``, ``active``, ``dci_importance``, ...).
    """
    out = array_metrics(latents, factors, discrete_latents=discrete_latents, metrics=metrics, options=options)
    if psnr is not None:
        out["psnr"] = float(np.mean(psnr))
    if mse is not None:
        out["mse"] = float(np.mean(mse))
    return out


class DisentanglementMetric(LatentFactorAccumulator):
    """torchmetrics wrapper of the array metrics (QLAE paper §4, App. C.5): accumulate like
    :class:`LatentFactorAccumulator`; ``compute()`` gathers every rank's rows, sorts them by evaluation-set
    position and returns :func:`disentanglement_metrics` of them.

    Args:
        discrete_latents: whether z is discrete (QLAE, VQ-VAE; as in the authors' code).
        metrics: names of array metrics (:data:`disentangle.metrics.suite.ARRAY_METRICS`).
        options: ``{name: keyword options}`` of those metrics.
        metric_fn: replacement for :func:`disentanglement_metrics` (same signature).
    """

    def __init__(self, discrete_latents: bool, metrics: Iterable[str] = ("infomec", "dci"),
                 options: Mapping[str, Mapping[str, Any]] | None = None,
                 metric_fn: Callable[..., dict] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.discrete_latents = bool(discrete_latents)
        self.metrics = check_metric_names(metrics)
        self.options = {k: dict(v or {}) for k, v in (options or {}).items()}
        self.metric_fn = metric_fn or disentanglement_metrics

    def compute(self) -> dict[str, Any]:
        data = self.gathered()
        return self.metric_fn(
            data["latents"], data["factors"], discrete_latents=self.discrete_latents, metrics=self.metrics,
            options=self.options, psnr=data["psnr"], mse=data["mse"],
        )
