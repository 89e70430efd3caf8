"""What the evaluation's units hand each other: an :class:`EvaluationJob` (gathered on the training thread, numpy
only, no model) and its :class:`EvaluationOutcome` (the metrics computed from it, and the files written)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..metrics.suite import ModelFacts


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
    method: str
    data: str
    factor_names: tuple[str, ...]
    encode_seconds: float
    model: ModelFacts = field(default_factory=ModelFacts)  # the representation's kind and where the model ran
    sampled: dict = field(default_factory=dict)  # FactorVAE/BetaVAE results, computed on the training thread
    sampled_metrics: tuple[str, ...] = ()  # the names of the metrics behind ``sampled``
    interventions: np.ndarray | None = None  # (T, n_z, C, H, W) decoded latent sweeps, in [0, 1]
    intervention_start: str = "the first evaluation image"  # what the sweeps start from (the figure's title)
    reconstructions: tuple[np.ndarray, np.ndarray] | None = None  # originals, reconstructions (k, C, H, W)
    samples: np.ndarray | None = None  # (n, C, H, W) generated images in [0, 1] (a model that can sample)
    runtime: dict = field(default_factory=dict)  # what ran (precision, device): recorded in metrics.json
    figures_dir: Path | None = None  # a periodic evaluation's figures go here (for loggers that take images)
    # a data.split run's final evaluation: the held-out set's arrays (gather.encode_heldout), scored as ``ood``
    heldout: dict | None = None
    factor_sizes: tuple[int, ...] = ()
    split: str = "random"


@dataclass
class EvaluationOutcome:
    step: int
    final: bool
    result: dict[str, float]
    artifacts: dict[str, Path] = field(default_factory=dict)
