"""AnnealedVAE's capacity objective (Burgess et al. 2018, "Understanding disentangling in β-VAE"), as
disentanglement_lib implements it for Locatello et al.'s study.

Mixed precision (:mod:`disentangle.foundation.precision`): the Gaussian KL it holds at the capacity is computed in float32
(``gaussian_kl``, elementwise, from the latent island's float32 ``mu`` and ``sigma``).
"""
from __future__ import annotations

import math

import torch

from ..quantizers.base import check_weight
from ..quantizers.gaussian import gaussian_kl
from .base import Regularizer, StepContext


def annealed_capacity(step: int, *, c_max: float, iteration_threshold: int) -> float:
    """The capacity C(t) = min(c_max, c_max · t / iteration_threshold) in nats at global step t (optimizer updates
    so far): the capacity of Burgess et al. 2018's Eq. 8, raised linearly from 0 to c_max over
    ``iteration_threshold`` steps as in disentanglement_lib's ``anneal``."""
    c_max = check_weight("c_max", c_max)
    threshold = float(iteration_threshold)
    if not (threshold > 0 and math.isfinite(threshold)):
        raise ValueError(f"iteration_threshold must be a number > 0 (got {iteration_threshold})")
    if isinstance(step, bool) or int(step) != step or step < 0:
        raise ValueError(f"step must be an integer >= 0 (got {step})")
    return min(c_max, c_max * int(step) / threshold)


class AnnealedCapacity(Regularizer):
    """γ · |KL − C(t)| (Burgess et al. 2018, Eq. 8), logged as ``capacity_gap`` = |KL − C(t)| with ``weight`` = γ;
    C(t) = :func:`annealed_capacity` at the model's global step (exact after a resume), also logged as ``capacity``
    (weight 0: not part of the loss).

    KL = the Gaussian latent's KL to N(0, I) summed over latents, batch mean, in nats per image (the latent's own
    ``kl``, recomputed from ``mu`` and ``sigma``). The term *replaces* that KL: a model pairs it with a latent whose
    own KL weight is 0 (``model.latent.beta=0``, as ``model=annealed_vae_friede``); both terms are rescaled like a
    KL (``model.density_scale``).
    """

    requires_distribution = "gaussian"
    density_terms = frozenset({"capacity_gap", "capacity"})

    def __init__(self, weight: float = 1000.0, c_max: float = 25.0, iteration_threshold: int = 100_000):
        super().__init__(weight)
        annealed_capacity(0, c_max=c_max, iteration_threshold=iteration_threshold)  # one-line errors now
        self.c_max = float(c_max)
        self.iteration_threshold = iteration_threshold
        self.term_weights = {"capacity": 0.0}

    def bind(self, model) -> None:
        super().bind(model)
        if "kl" in model.latent_spec.weighted_terms:  # the KL would count twice: once plain, once in the gap
            raise ValueError("annealed_capacity replaces the latent's KL, which still counts (model.latent.beta > 0): "
                             "set model.latent.beta=0, as model=annealed_vae_friede does")

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        params = ctx.latent.params
        kl = gaussian_kl(params["mu"], params["sigma"]).mean()
        capacity = annealed_capacity(ctx.step, c_max=self.c_max, iteration_threshold=self.iteration_threshold)
        return {"capacity_gap": (kl - capacity).abs(), "capacity": kl.new_tensor(capacity).detach()}
