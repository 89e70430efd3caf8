"""The regularizer contract: see what you need from a training step, return named loss terms."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from ..quantizers.base import LatentOutput, LatentSpec, check_weight


class RegularizedModel(Protocol):
    """What a regularizer may ask of the model it is attached to (``bind``, ``discriminator_step``,
    ``validation_score``): no other member, so any :class:`~disentangle.models.base.LatentModel` works."""

    n_latents: int
    decoder: nn.Module | None  # the decoder network (finite-difference penalties look up its layers)

    @property
    def latent_spec(self) -> LatentSpec: ...
    def encode(self, x: torch.Tensor) -> LatentOutput: ...
    def represent(self, x: torch.Tensor) -> torch.Tensor: ...


@dataclass
class StepContext:
    """Everything a regularizer may look at in one training step."""

    x: torch.Tensor                      # images in [0, 1]
    pre: torch.Tensor                    # raw encoder output
    latent: LatentOutput                 # what the latent module returned (distribution parameters included)
    logits: torch.Tensor                 # decoder output at latent.z
    activations: dict[str, torch.Tensor] = field(default_factory=dict)  # decoder activations at latent.z
    decoder: Callable | None = None      # the decoder module (for finite-difference penalties)
    dataset_size: int | None = None      # number of training images (minibatch-weighted estimators)
    encode: Callable | None = None       # the model's encoder + latent module (for a second, labelled batch)
    step: int = 0                        # the global step (optimizer updates so far; exact after a resume)


class Regularizer(nn.Module):
    """Base class. ``weight`` scales every term it returns (a weight of 0 switches it off entirely);
    ``term_weights`` scales single terms relative to it (missing names count 1).

    Class attributes a regularizer sets:
        needs_activations: decoder activations it needs from the main forward pass.
        requires_distribution: the latent family it needs (``"gaussian"``), or None for any latent.
        requires_sample: it reads ``LatentOutput.sample``, so the latent must be stochastic.
        needs_dataset_size: it reads ``StepContext.dataset_size`` (the model supplies the data module's size).
        adversarial: it trains a network of its own after each model step: it implements
            ``configure_optimizer() -> (optimizer, scheduler or None)`` and
            ``discriminator_step(model, ctx, x_aux, optimizer) -> logs``.
        uses_second_batch: its ``discriminator_step`` wants a second half-batch (``x_aux``).
        needs_data: it draws examples of its own from the training data: it implements ``attach_data(datamodule)``,
            which the model calls before training (and which raises ValueError in one line on bad settings).
        density_terms: names of its terms measured in nats per image (rescaled like a KL, see
            ``Autoencoder(density_scale=...)``).
        exact_float32: its backward pass, not only its forward, needs float32 products (finite differences divided
            by eps^2): on CUDA the run then keeps TF32 off (``tf32: auto``).
        validates_on_labels: it holds labelled examples back and implements ``validation_score(model) -> float``
            (the ``labels`` model-selection rule).
    """

    needs_activations: tuple[str, ...] = ()
    requires_distribution: str | None = None
    requires_sample: bool = False
    needs_dataset_size: bool = False
    density_terms: frozenset[str] = frozenset()
    adversarial: bool = False
    uses_second_batch: bool = False
    needs_data: bool = False
    validates_on_labels: bool = False
    exact_float32: bool = False  # its gradients too need full float32 products: no TF32 on CUDA (``tf32: auto``)

    def __init__(self, weight: float):
        super().__init__()
        self.weight = check_weight(f"{type(self).__name__}.weight", weight)
        self.term_weights: dict[str, float] = {}

    def bind(self, model: RegularizedModel) -> None:
        """Check the model before training (raise ValueError in one line if this regularizer cannot work on it)
        and resolve model-dependent settings."""
        spec = model.latent_spec
        wanted = self.requires_distribution
        if wanted is not None and spec.distribution != wanted:
            raise ValueError(
                f"{type(self).__name__} needs a {wanted} latent distribution, but the latent module is "
                f"{spec.module} ({spec.distribution or 'deterministic'}); use a model "
                f"with one or swap the latent with model/latent={wanted}"
            )
        if self.requires_sample and spec.sample_features is None:
            raise ValueError(
                f"{type(self).__name__} needs a sampled latent, but {spec.module} is deterministic; "
                f"use a stochastic latent (model/latent=gaussian or model/latent=gumbel_quantizer)"
            )

    def compile_networks(self, **options) -> list[str]:
        """Compile the networks this regularizer trains on its own (trainer.compile); their names. None by default."""
        return []

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:  # pragma: no cover - interface
        raise NotImplementedError


def batch_std(z: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Population std over the batch plus eps, with gradients (Tripod authors' code)."""
    return z.std(0, unbiased=False) + eps
