"""The model families: what a training run can differ in, and one configuration that selects each.

A family is the model class x the latent module x several updates per step (an adversary, or the GANs'
critic/generator: two optimizers, two backward passes) x a labelled stream of batches (a semi-supervised
regularizer) x encoder-only (no decoder). Two configurations of one family take the same code paths through a
training step, a checkpoint and an evaluation, so one representative per family covers them all: the kill-and-resume
test (``tests/test_resume_families.py``, which also checks that every model and experiment in ``conf/`` falls into
a family listed here) and ``python -m disentangle.doctor`` train each of :data:`FAMILIES`.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["FAMILIES", "Family", "family_label", "family_of"]


class Family(NamedTuple):
    """One model family (see the module docstring)."""

    model_class: str
    latent: str
    several_updates: bool  # an adversary or the GANs' critic/generator: two optimizers, two backward passes
    labelled_stream: bool  # a regularizer draws labelled batches of its own (semi-supervised)
    encoder_only: bool


def family_of(model) -> Family:
    """The family of an instantiated model."""
    return Family(type(model).__name__, model.latent_spec.module, model.updates_per_step > 1,
                  any(reg.needs_data for reg in model.regularizers.values()), not model.can_reconstruct)


def family_label(family: Family) -> str:
    """A short name for tables and test ids: ``Autoencoder/GaussianLatent+adversary+labels``."""
    flags = [name for name, on in (("several-updates", family.several_updates), ("labelled", family.labelled_stream),
                                   ("encoder-only", family.encoder_only)) if on]
    return f"{family.model_class}/{family.latent}" + "".join(f"+{flag}" for flag in flags)


# Semi-supervised: Friede et al.'s protocol with the supervision regularizer (a labelled stream of its own).
_SEMI = "experiment=friede_semisupervised"

# The Hydra overrides that select each family's representative (the model, or an experiment that brings its model);
# a run adds its own data, size and evaluation settings. Encoder-only is Cliff's 2-D experiment (an MLP encoder on
# 2-D points), so it takes no image options.
FAMILIES: dict[Family, list[str]] = {
    Family("Autoencoder", "ContinuousLatent", False, False, False): ["model=ae"],
    Family("Autoencoder", "ContinuousLatent", False, False, True): ["experiment=cliff2d"],
    Family("Autoencoder", "LatentQuantizer", False, False, False): ["model=qlae"],
    Family("Autoencoder", "FixedGridQuantizer", False, False, False): ["model=tripod"],
    Family("Autoencoder", "GaussianLatent", False, False, False): ["model=betavae"],
    Family("Autoencoder", "GaussianLatent", True, False, False): ["model=factorvae"],
    Family("Autoencoder", "VectorQuantizer", False, False, False): ["model=vqvae"],
    Family("Autoencoder", "GumbelQuantizer", False, False, False): ["model=qvae"],
    Family("Autoencoder", "GumbelQuantizer", True, False, False): ["model=factorqvae"],
    Family("Autoencoder", "CategoricalLatent", False, False, False): ["model=dvae_friede"],
    Family("Autoencoder", "CategoricalLatent", True, False, False): ["model=factordvae_friede"],
    Family("Autoencoder", "CategoricalLatent", False, True, False): [_SEMI, "model=dvae_friede_masked"],
    Family("Autoencoder", "CategoricalLatent", True, True, False): [_SEMI, "model=factordvae_friede_masked"],
    Family("Autoencoder", "GaussianLatent", False, True, False): [_SEMI, "model=vae_friede"],
    Family("Autoencoder", "GaussianLatent", True, True, False): [_SEMI, "model=factorvae_friede"],
    Family("InfoWGAN", "ContinuousLatent", True, False, False): ["model=infowgan_gp"],
    Family("InfoWGAN", "LatentQuantizer", True, False, False): ["model=qlinfowgan_gp"],
}
