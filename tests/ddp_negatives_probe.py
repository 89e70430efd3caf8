"""A callback for the data-parallel discriminator test (tests/test_ddp_negatives.py): it records what the TC
discriminator trains on at every step (its positives, its negatives and its loss, on this process) and saves them
at the end of training as ``rank<r>.pt`` in ``path``.

With ``noise_free`` the Gaussian latent still draws its noise (every process's random generators advance as in
training) but hands the noise-free mean on as the sample, so the discriminator's inputs depend only on the weights and
on which rows of the global batch they come from: a 2-process and a 1-process run can be compared value by value."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytorch_lightning as pl
import torch

from disentangle.regularizers import tc_discriminator


class DiscriminatorInputs(pl.Callback):
    def __init__(self, path: str, noise_free: bool = True):
        self.path = Path(path)
        self.noise_free = bool(noise_free)
        self.records: list[dict] = []

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.noise_free:
            latent = pl_module.latent
            forward = latent.forward

            def mean_as_sample(pre):
                out = forward(pre)  # draws the noise (the generators advance as in training), then drops it
                mu = out.params["mu"]
                return dataclasses.replace(out, z=mu, z_continuous=mu, sample=mu)

            latent.forward = mean_as_sample
        logits_fn, loss_fn = tc_discriminator.discriminator_logits, tc_discriminator.discriminator_loss
        inputs: list[torch.Tensor] = []

        def logits(net, samples, params=None):
            if params is None:  # the discriminator's own step: joint samples, then negatives
                inputs.append(samples.detach().clone())
            return logits_fn(net, samples, params)

        def loss(joint_logits, permuted_logits):
            value = loss_fn(joint_logits, permuted_logits)
            joint, negatives = inputs[-2:]
            self.records.append({"joint": joint, "negatives": negatives, "loss": value.detach().clone()})
            inputs.clear()
            return value

        self._restore = {"discriminator_logits": logits_fn, "discriminator_loss": loss_fn}
        tc_discriminator.discriminator_logits = logits
        tc_discriminator.discriminator_loss = loss

    def _unpatch(self) -> None:  # a run inside the test process leaves the module as it found it
        for name, fn in getattr(self, "_restore", {}).items():
            setattr(tc_discriminator, name, fn)
        self._restore = {}

    def on_train_end(self, trainer, pl_module) -> None:
        self._unpatch()
        self.path.mkdir(parents=True, exist_ok=True)
        torch.save(self.records, self.path / f"rank{trainer.global_rank}.pt")

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._unpatch()
