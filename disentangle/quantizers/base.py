"""What every latent module returns, so the model's training step is written once.

The contract covers deterministic latents (AE, QLAE, Tripod) and stochastic ones (Gaussian VAEs; later the
Gumbel-softmax and categorical latents of FactorQVAE and Friede et al.): a stochastic module samples while
``self.training`` and returns its deterministic value otherwise (the evaluation callback puts the model in
eval mode), and exposes its distribution's parameters to regularizers through ``LatentOutput.params``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

# check_int is re-exported: the latent modules and regularizers import it (and check_weight) from here.
from ..checks import check_int, check_nonnegative  # noqa: F401


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


@dataclass(frozen=True)
class LatentSpec:
    """What a latent module is, in the terms the rest of the package asks about (regularizers when they are
    attached, the evaluation when it chooses estimators and draws figures). A model hands this out instead of
    its latent module, so nobody needs to probe the module's attributes.

    module:          the latent module's class name (for messages).
    n_latents:       width of the evaluation representation.
    in_features:     how many numbers the encoder outputs for it.
    out_features:    how many numbers the decoder receives.
    distribution:    the family of q(z|x) (``"gaussian"``, ``"categorical"``), None for a deterministic latent.
    sample_features: width of ``LatentOutput.sample``, None when nothing is sampled.
    discrete:        the metrics treat the representation as discrete (plug-in MI) rather than continuous (KSG).
    categorical:     its values are unordered category labels (VQ code indices): InfoE uses one-hot features,
                     interventions step through the codes in use.
    n_categories:    categories per latent of a categorical distribution, else None.
    loss_terms:      names of the module's own loss terms (e.g. ``("kl",)``).
    weighted_terms:  those of them that count in the loss (weight > 0).
    has_prior:       :meth:`LatentModule.sample_prior` draws from a prior (what a generator is fed).
    straight_through: :meth:`LatentModule.relaxation` can switch the module to noise-free soft or hard codes
                     (the straight-through-gap model selection).
    """

    module: str
    n_latents: int
    in_features: int
    out_features: int
    distribution: str | None
    sample_features: int | None
    discrete: bool
    categorical: bool
    n_categories: int | None
    loss_terms: tuple[str, ...]
    has_prior: bool
    straight_through: bool
    weighted_terms: tuple[str, ...] = ()


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

        has_prior: it implements :meth:`sample_prior` (the GANs' z_fake).
        straight_through: it implements :meth:`relaxation`.

    ``weights`` maps each auxiliary loss name to its weight.
    """

    discrete: bool = False
    distribution: str | None = None
    density_terms: frozenset[str] = frozenset()
    categorical: bool = False
    has_prior: bool = False
    straight_through: bool = False

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

    def spec(self) -> LatentSpec:
        """This module described as a :class:`LatentSpec`."""
        return LatentSpec(
            module=type(self).__name__, n_latents=self.n_latents, in_features=self.in_features, out_features=self.out_features,
            distribution=self.distribution, sample_features=self.sample_features, discrete=bool(self.discrete),
            categorical=bool(self.categorical), n_categories=getattr(self, "n_categories", None),
            loss_terms=tuple(self.weights), has_prior=self.has_prior, straight_through=self.straight_through,
            weighted_terms=tuple(name for name, weight in self.weights.items() if weight > 0),
        )

    def sample_prior(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """n draws from the latent's prior, (n, out_features): what a generator is fed. Only modules with
        ``has_prior``; the others raise one ValueError line."""
        raise ValueError(
            f"{type(self).__name__} has no prior to sample z_fake from; the GANs take model/latent=latent_quantizer "
            f"(QLInfoWGAN-GP) or continuous (InfoWGAN-GP)"
        )

    @contextmanager
    def relaxation(self, hard: bool) -> Iterator[None]:
        """Inside the block the module's training-mode forward is noise-free and soft (``hard=False``) or
        straight-through one-hot (``hard=True``); only modules with ``straight_through``."""
        raise ValueError(f"{type(self).__name__} has no straight-through relaxation (a categorical latent has)")
        yield  # pragma: no cover


def straight_through(continuous: torch.Tensor, quantized: torch.Tensor) -> torch.Tensor:
    """Forward value exactly ``quantized``, gradient copied unchanged to ``continuous`` (Bengio et al. 2013;
    QLAE Alg. 1 line 6). Written as q.detach() + (c - c.detach()) so the value is bit-exact, which
    c + (q - c).detach() is not in floating point; ``quantized`` gets no gradient this way."""
    return quantized.detach() + (continuous - continuous.detach())


# The latent modules' (and regularizers') argument checks, under their historical names here.
check_weight = check_nonnegative
