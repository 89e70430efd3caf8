"""Semi-supervised disentanglement: a few labelled examples supervise the first latents (Friede et al.
§6.4 and App. 3, following Locatello et al. 2020 as disentanglement_lib implements it).

Mixed precision (:mod:`disentangle.foundation.precision`): the supervised losses run in float32 without an island
of their own (log-likelihoods of the labels from the latent island's float32 ``mu`` or logits; autocast keeps
the cross-entropies in float32); the labelled batch's encoder pass is the network's own, in the run's
precision.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..quantizers.categorical import factor_bins
from .base import Regularizer, StepContext

LOSSES = ("auto", "bce", "l2", "binned_ce")


def supervised_bce(mu: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Gaussian models, R_s = BCE (Friede et al. App. 3): sigmoid cross-entropy of the first d posterior means
    (as logits) against the labels scaled to [0, 1], summed over the batch and the factors."""
    return F.binary_cross_entropy_with_logits(mu, targets, reduction="sum")


def supervised_l2(mu: torch.Tensor, targets: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Gaussian models, R_s = L2 (Friede et al. App. 3): Σ (b·μ_j − y_j)² with a learned scalar b
    (disentanglement_lib's ``2·l2_loss`` with ``learn_scale=True``), summed over the batch and the factors."""
    return ((scale * mu - targets) ** 2).sum()


def binned_cross_entropy(logits: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """Categorical models, Eq. 7: Σ_batch Σ_j CE(onehot(bin of y_j), softmax(ℓ_j)); ``logits`` (B, d, m), ``bins``
    (B, d) category indices."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), bins.reshape(-1), reduction="sum")


class LabelSupervision(Regularizer):
    """ω · R_s(r(x_ℓ), y_ℓ) on a labelled batch drawn beside every unlabelled one (Friede et al. App. 3).

    ``n_labels`` examples are drawn once (seed ``label_seed``) from the training data, split ``train_fraction`` /
    rest into supervision and held-out validation labels (90/10 as in disentanglement_lib); every step encodes a
    batch of ``batch_size`` supervision examples, cycled in a reshuffled order, and supervises latent j with
    factor j for the first d = n_factors latents. ``loss``: ``bce`` or ``l2`` (Gaussian latents, labels scaled by
    1/k_j as disentanglement_lib does), ``binned_ce`` (Eq. 7, categorical latents, bins of
    :func:`~disentangle.quantizers.factor_bins`), ``auto`` = ``binned_ce`` for a categorical latent, else ``bce``.
    The held-out labels give :meth:`validation_score` for model selection. The term is a sum over the batch (not
    a mean), as in the reference implementation.
    """

    needs_data = True
    validates_on_labels = True  # validation_score: MIG on the held-out labelled examples

    def __init__(self, weight: float, n_labels: int = 1000, train_fraction: float = 0.9, loss: str = "auto",
                 batch_size: int = 64, label_seed: int = 0):
        super().__init__(weight)
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {list(LOSSES)} (got {loss!r})")
        if int(n_labels) < 2:
            raise ValueError(f"n_labels must be >= 2 (got {n_labels})")
        if not 0 < float(train_fraction) < 1:
            raise ValueError(f"train_fraction must be in (0, 1) (got {train_fraction})")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        self.n_labels, self.train_fraction = int(n_labels), float(train_fraction)
        self.loss_kind, self.batch_size, self.label_seed = loss, int(batch_size), int(label_seed)
        self.scale = nn.Parameter(torch.ones(())) if loss == "l2" else None  # b of the L2 loss
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))  # labelled batches drawn (checkpointed)
        self.images: dict[str, torch.Tensor] = {}
        self.labels: dict[str, torch.Tensor] = {}

    def bind(self, model) -> None:
        super().bind(model)
        spec = model.latent_spec
        categorical = spec.distribution == "categorical"
        if self.loss_kind == "auto":
            self.loss_kind = "binned_ce" if categorical else "bce"
        wanted = "categorical" if self.loss_kind == "binned_ce" else "gaussian"
        have = spec.distribution
        if have != wanted:
            raise ValueError(f"loss={self.loss_kind} supervises a {wanted} latent, but the model's latent is "
                             f"{have or 'deterministic'}; use loss=auto")
        if self.loss_kind == "binned_ce" and spec.n_categories is None:  # Eq. 7 bins factors into ordered categories
            raise ValueError(f"loss=binned_ce needs ordered categories per latent (model/latent=categorical); "
                             f"{spec.module}'s codes are unordered")
        self.n_latents = model.n_latents
        self.n_categories = spec.n_categories

    def attach_data(self, datamodule) -> None:
        """Draw the labelled examples from ``datamodule`` (one-line ValueError when they cannot be)."""
        n, sizes = int(datamodule.num_samples), [int(k) for k in datamodule.factor_sizes]
        if self.n_labels > n:
            raise ValueError(f"n_labels={self.n_labels} exceeds the {n} images of {datamodule.name}")
        if len(sizes) > self.n_latents:
            raise ValueError(f"{len(sizes)} factors need {len(sizes)} supervised latents, the model has "
                             f"{self.n_latents}")
        # under data.split, labels come only from the combinations training may see (held-out ones stay unseen)
        pool = None if getattr(datamodule, "split", "random") == "random" else torch.nonzero(
            ~datamodule.heldout_mask()).flatten()
        if pool is not None and self.n_labels > len(pool):
            raise ValueError(f"n_labels={self.n_labels} exceeds the {len(pool)} images data.split leaves for training")
        generator = torch.Generator().manual_seed(self.label_seed)
        chosen = torch.randperm(n if pool is None else len(pool), generator=generator)[: self.n_labels]
        if pool is not None:
            chosen = pool[chosen]
        n_train = max(1, min(self.n_labels - 1, round(self.train_fraction * self.n_labels)))
        for split, idx in (("train", chosen[:n_train]), ("validation", chosen[n_train:])):
            images, factors = datamodule.gather(idx.sort().values)
            self.images[split], self.labels[split] = images.float().cpu(), factors.long().cpu()
        self.factor_sizes = torch.tensor(sizes)
        if self.loss_kind == "binned_ce":
            self.bins = [factor_bins(k, self.n_categories) for k in sizes]

    def _batch(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        n_train = len(self.labels["train"])
        per_pass = max(1, n_train // min(self.batch_size, n_train))
        step = int(self.steps)
        order = torch.randperm(n_train, generator=torch.Generator().manual_seed(self.label_seed + 1 + step // per_pass))
        k = min(self.batch_size, n_train)
        idx = order[(step % per_pass) * k: (step % per_pass + 1) * k]
        self.steps += 1
        return self.images["train"][idx].to(device), self.labels["train"][idx].to(device)

    def supervised_loss(self, out, labels: torch.Tensor) -> torch.Tensor:
        """R_s of one labelled batch (the encoder's output ``out`` for its images, ``labels`` (B, d))."""
        d = labels.shape[1]
        if self.loss_kind == "binned_ce":
            bins = torch.stack([self.bins[j].to(labels.device)[labels[:, j]] for j in range(d)], 1)
            return binned_cross_entropy(out.params["logits"][:, :d], bins)
        targets = labels.float() / self.factor_sizes.to(labels.device).float()
        mu = out.params["mu"][:, :d]
        return supervised_bce(mu, targets) if self.loss_kind == "bce" else supervised_l2(mu, targets, self.scale)

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        if not self.labels:
            raise RuntimeError("LabelSupervision has no labelled examples: the model calls attach_data before training")
        if ctx.encode is None:
            raise RuntimeError("LabelSupervision needs the model's encoder in the step context")
        images, labels = self._batch(ctx.x.device)
        return {"supervised": self.supervised_loss(ctx.encode(images), labels)}

    @torch.no_grad()
    def validation_score(self, model) -> float:
        """MIG (×1, 20 bins) of the model's representation on the held-out labelled examples: the validation
        criterion of semi-supervised model selection (Locatello et al. 2020; Friede et al. §6.4)."""
        from ..metrics.mig import mig

        images = self.images["validation"].to(next(model.parameters()).device)
        was_training = model.training
        model.eval()
        try:
            rep = model.represent(images).cpu().numpy()
        finally:
            model.train(was_training)
        score = mig(self.labels["validation"].numpy(), rep)["mig"]
        return float(score) if math.isfinite(score) else math.nan
