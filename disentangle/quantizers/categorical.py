"""The categorical latent of Friede et al.'s D-VAE: Gumbel-softmax over m ordered categories embedded on a fixed grid
(categorical_vae.md §3.2–3.8)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import LatentModule, LatentOutput, check_int, check_weight
from .gumbel import categorical_kl_uniform, relaxed_one_hot


def gumbel_scale(step: int, initial: float = 0.5, final: float = 2.0, steps: int = 300_000) -> float:
    """Friede et al.'s cosine annealing of the Gumbel noise scale: 0.5 at step 0, 1.25 at 150k, 2.0 from 300k on
    (categorical_vae.md §3.7)."""
    t = min(step, steps)
    return 0.5 * (initial - final) * math.cos(math.pi * t / steps) + 0.5 * (initial + final)


class CategoricalLatent(LatentModule):
    """n latents, each a categorical over m categories with the fixed embedding v = linspace(low, high, m).

    * the encoder outputs n·m logits; training: y = softmax((l + s_t·g) / temperature) with Gumbel noise g scaled by
      s_t (:func:`gumbel_scale` of the global step) and temperature 1; evaluation: s = 0. The decoder receives
      z_j = <y_j, v> (n numbers).
    * loss ``kl`` = sum over latents of KL(softmax(l_j) || U(m)) (analytic, not a relaxed-density KL), mean over the
      batch; in nats per image (a density term), weight ``beta`` (1 in the paper).
    * representation for the metrics: <softmax(l_j), v> in [low, high], deterministic and continuous (§3.8).
    * ``sample`` (for a TC discriminator): z itself (Friede et al. feed the discriminator the n-dim z, §5).
    * ``hard = True`` replaces y by its straight-through one-hot (forward value exactly one-hot); only the
      straight-through-gap model selection uses it (§7).
    """

    discrete = False
    distribution = "categorical"
    density_terms = frozenset({"kl"})

    def __init__(self, n_latents: int, n_categories: int = 64, beta: float = 1.0, low: float = -1.0,
                 high: float = 1.0, temperature: float = 1.0, initial_scale: float = 0.5, final_scale: float = 2.0,
                 scale_steps: int = 300_000):
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

    @property
    def in_features(self) -> int:
        return self.n_latents * self.n_categories

    def schedule(self, step: int) -> None:
        self.noise_scale = gumbel_scale(step, self.initial_scale, self.final_scale, self.scale_steps)

    def forward(self, pre: torch.Tensor) -> LatentOutput:
        logits = pre.reshape(pre.shape[0], self.n_latents, self.n_categories)
        y = relaxed_one_hot(logits, self.temperature, noise_scale=self.noise_scale if self.training else 0.0)
        if self.hard:
            y = F.one_hot(y.argmax(-1), self.n_categories).to(y.dtype) - y.detach() + y
        z = y @ self.values
        kl = categorical_kl_uniform(logits).sum(-1).mean()
        return LatentOutput(z=z, z_continuous=z, indices=y.detach().argmax(-1), losses={"kl": kl},
                            params={"logits": logits}, sample=z if self.training else None)

    def representation(self, out: LatentOutput) -> torch.Tensor:
        return torch.softmax(out.params["logits"], dim=-1) @ self.values
