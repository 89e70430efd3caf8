"""The categorical latent of Friede et al.'s D-VAE: Gumbel-softmax over m ordered categories embedded on a fixed grid
(Friede et al. §2.0.1, Eqs. 2–3, and App. 5; the values from the authors' code).

Mixed precision (:mod:`disentangle.foundation.precision`): the whole module runs in float32
(``LatentModel.run_latent``): the Gumbel-softmax over the categories and its KL.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .base import LatentModule, LatentOutput, check_int, check_weight
from .gumbel import categorical_kl_uniform, relaxed_one_hot

# a logit outside the active set: exp underflows to exactly 0 in softmax, and 0 · log_softmax stays finite in the KL,
# where a true −inf would give NaN (Friede et al. App. 3: α_i = 0, i.e. ℓ_i = −∞, for i ∉ A_j)
MASKED_LOGIT = -1e9


def factor_bins(n_values: int, n_categories: int) -> torch.Tensor:
    """Category of each of a factor's ``n_values`` values: value t → round(t·(m−1)/(k−1)), k equidistant
    categories from the first to the last (our choice: Friede et al. App. 3 gives neither the bins nor
    A_j). Used as Eq. 7's bins and as the masked-attention active set A_j. With k > m several values share a
    category; k = 1 → category 0."""
    if n_values < 1:
        raise ValueError(f"a factor needs at least one value (got {n_values})")
    if n_values == 1:
        return torch.zeros(1, dtype=torch.long)
    t = torch.arange(n_values, dtype=torch.float64)
    return torch.round(t * (n_categories - 1) / (n_values - 1)).long()


def gumbel_scale(step: int, initial: float = 0.5, final: float = 2.0, steps: int = 300_000) -> float:
    """Friede et al.'s cosine annealing of the Gumbel noise scale: 0.5 at step 0, 1.25 at 150k, 2.0 from 300k on
    (Friede et al. App. 5; the values are the authors' code's)."""
    t = min(step, steps)
    return 0.5 * (initial - final) * math.cos(math.pi * t / steps) + 0.5 * (initial + final)


class CategoricalLatent(LatentModule):
    """n latents, each a categorical over m categories with the fixed embedding v = linspace(low, high, m).

    * the encoder outputs n·m logits; training: y = softmax((l + s_t·g) / temperature) with Gumbel noise g scaled by
      s_t (:func:`gumbel_scale` of the global step) and temperature 1; evaluation: s = 0. The decoder receives
      z_j = <y_j, v> (n numbers).
    * loss ``kl`` = sum over latents of KL(softmax(l_j) || U(m)) (analytic, not a relaxed-density KL), mean over the
      batch; in nats per image (a density term), weight ``beta`` (1 in the paper).
    * representation for the metrics: <softmax(l_j), v> in [low, high], deterministic and continuous
      (Friede et al. §2.0.1).
    * ``sample`` (for a TC discriminator): z itself (Friede et al.'s code feeds the discriminator the n-dim z;
      App. 3).
    * ``hard = True`` replaces y by its straight-through one-hot (forward value exactly one-hot); only the
      straight-through-gap model selection uses it (Friede et al. §3.4).
    * ``active_counts`` (masked attention "(M)", Friede et al. App. 3): the number of values k_j of the factor
      that latent j is supervised with, for the first len(active_counts) latents; their logits outside
      A_j = :func:`factor_bins` are masked before sampling, KL and representation. Factors with k_j > m or
      k_j < 2 keep every category (the mask could not be one-to-one; our choice). The KL keeps the uniform
      prior over all m categories, which differs from a uniform prior over A_j by the constant log(m/k_j)
      (same gradients).
    """

    discrete = False
    distribution = "categorical"
    density_terms = frozenset({"kl"})
    straight_through = True

    def __init__(self, n_latents: int, n_categories: int = 64, beta: float = 1.0, low: float = -1.0,
                 high: float = 1.0, temperature: float = 1.0, initial_scale: float = 0.5, final_scale: float = 2.0,
                 scale_steps: int = 300_000, active_counts=None):
        super().__init__(n_latents)
        self.n_categories = check_int("n_categories", n_categories, 2)
        if not low < high:
            raise ValueError(f"low must be < high (got {low}, {high})")
        if not float(temperature) > 0:
            raise ValueError(f"temperature must be > 0 (got {temperature})")
        self.temperature = float(temperature)
        self.initial_scale = check_weight("initial_scale", initial_scale)
        self.final_scale = check_weight("final_scale", final_scale)
        self.scale_steps = check_int("scale_steps", scale_steps, 1)
        self.noise_scale = self.initial_scale
        self.hard = False
        self.weights = {"kl": check_weight("beta", beta)}
        self.register_buffer("values", torch.linspace(float(low), float(high), self.n_categories))
        counts = [int(k) for k in (active_counts or [])]
        if len(counts) > self.n_latents:
            raise ValueError(f"active_counts has {len(counts)} factors but there are only {self.n_latents} latents")
        active = torch.ones(self.n_latents, self.n_categories, dtype=torch.bool)
        for j, k in enumerate(counts):
            if 2 <= k <= self.n_categories:
                active[j] = False
                active[j, factor_bins(k, self.n_categories)] = True
        self.masked = bool(counts) and not bool(active.all())
        self.register_buffer("active", active, persistent=False)

    @property
    def in_features(self) -> int:
        return self.n_latents * self.n_categories

    def schedule(self, step: int) -> None:
        self.noise_scale = gumbel_scale(step, self.initial_scale, self.final_scale, self.scale_steps)

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        logits = pre.reshape(pre.shape[0], self.n_latents, self.n_categories)
        if self.masked:
            logits = logits.masked_fill(~self.active, MASKED_LOGIT)
        y = relaxed_one_hot(logits, self.temperature, noise_scale=self.noise_scale if self.training else 0.0)
        if self.hard:
            y = F.one_hot(y.argmax(-1), self.n_categories).to(y.dtype) - y.detach() + y
        z = y @ self.values
        kl = categorical_kl_uniform(logits).sum(-1).mean()
        return LatentOutput(z=z, z_continuous=z, indices=y.detach().argmax(-1), losses={"kl": kl},
                            params={"logits": logits}, sample=z if self.training else None)

    def representation(self, out: LatentOutput) -> torch.Tensor:
        return torch.softmax(out.params["logits"], dim=-1) @ self.values

    @contextmanager
    def relaxation(self, hard: bool) -> Iterator[None]:
        """Noise scale 0 and soft (y = softmax(l)) or straight-through one-hot codes inside the block
        (Friede et al. §3.4)."""
        saved = (self.noise_scale, self.hard)
        self.noise_scale, self.hard = 0.0, bool(hard)
        try:
            yield
        finally:
            self.noise_scale, self.hard = saved
