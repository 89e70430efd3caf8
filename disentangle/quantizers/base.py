"""What every latent module returns, so the model's training step is written once.

The contract covers deterministic latents (AE, QLAE, Tripod) and stochastic ones (Gaussian VAEs; later the
Gumbel-softmax and categorical latents of FactorQVAE and Friede et al.): a stochastic module samples while
``self.training`` and returns its deterministic value otherwise (the evaluation callback puts the model in
eval mode), and exposes its distribution's parameters to regularizers through ``LatentOutput.params``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class LatentOutput:
    """Result of a latent module.

    z:             the latent fed to the decoder (quantized value for quantizers, straight-through; the
                   reparameterised sample of a stochastic latent in training, its deterministic value in eval).
    z_continuous:  the continuous latent before rounding (raw encoder output for QLAE, tanh output for
                   Tripod, z itself for continuous latents); regularizers that need a bandwidth take its batch
                   std from here.
    indices:       integer code per latent (dimension or vector), or None for continuous latents.
    losses:        unweighted auxiliary loss terms by name; the module's ``weights`` say how they count.
    params:        the distribution's parameters for regularizers, by name (Gaussian: ``mu``, ``sigma``);
                   empty for deterministic latents.
    sample:        what was drawn from the distribution in training, in the module's own space (Gaussian: z;
                   a Gumbel-softmax latent: its relaxed one-hot codes), None when nothing was sampled. A
                   regularizer that needs samples (an adversarial TC discriminator) reads it from here.
    """

    z: torch.Tensor
    z_continuous: torch.Tensor
    indices: torch.Tensor | None = None
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    sample: torch.Tensor | None = None


class LatentModule(nn.Module):
    """Base class: maps the encoder's pre-latent (B, in_features) to a :class:`LatentOutput`.

    Class attributes a module sets:
        discrete: whether the metrics treat the representation as discrete (plug-in mutual information) or
            continuous (KSG).
        distribution: the family of q(z|x) for regularizers that need one (``"gaussian"``, ``"categorical"``),
            None when the latent is deterministic.
        density_terms: names among ``losses`` measured in nats per image (a KL); the model rescales their
            weight to the reconstruction's reduction (``Autoencoder(density_scale=...)``).
        categorical: the representation's values are unordered category labels (VQ code indices): InfoE's
            ``auto`` features are one-hot for it, and interventions step through the codes in use instead of
            interpolating between labels.

    ``weights`` maps each auxiliary loss name to its weight.
    """

    discrete: bool = False
    distribution: str | None = None
    density_terms: frozenset[str] = frozenset()
    categorical: bool = False

    def __init__(self, n_latents: int):
        super().__init__()
        if int(n_latents) < 1:
            raise ValueError(f"n_latents must be >= 1 (got {n_latents})")
        self.n_latents = int(n_latents)
        self.weights: dict[str, float] = {}

    @property
    def in_features(self) -> int:
        """How many numbers the encoder must output for this latent module."""
        return self.n_latents

    @property
    def out_features(self) -> int:
        """How many numbers the decoder receives (``LatentOutput.z``'s width)."""
        return self.n_latents

    @property
    def sample_features(self) -> int | None:
        """Width of ``LatentOutput.sample`` (n_latents groups of equal size), None for deterministic latents."""
        return None if self.distribution is None else self.n_latents

    def schedule(self, step: int) -> None:
        """Called with the global step before every training step; a module whose behaviour follows a
        schedule (a Gumbel-softmax temperature) derives it from ``step`` here, so a resumed run is exact."""

    def representation(self, out: LatentOutput) -> torch.Tensor:
        """The latent used for evaluation (metrics, interventions): (B, n_latents)."""
        return out.z

    def decoder_input(self, representation: torch.Tensor) -> torch.Tensor:
        """Map (possibly edited) representations back to decoder inputs: decoded latent interventions."""
        return representation

    def order_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """A categorical latent's codes in the order an intervention steps through them (as given by default)."""
        return codes


def straight_through(continuous: torch.Tensor, quantized: torch.Tensor) -> torch.Tensor:
    """Forward value exactly ``quantized``, gradient copied unchanged to ``continuous`` (Bengio et al. 2013;
    QLAE Alg. 1 line 6). Written as q.detach() + (c - c.detach()) so the value is bit-exact, which
    c + (q - c).detach() is not in floating point; ``quantized`` gets no gradient this way."""
    return quantized.detach() + (continuous - continuous.detach())


def check_weight(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be a non-negative number (got {value})")
    return value


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (got {value})")
    return int(value)
