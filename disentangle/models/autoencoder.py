"""The autoencoders: encoder -> latent module -> decoder, plus regularizers, on :class:`~disentangle.models.base.LatentModel`.

AE, QLAE, Tripod, the VAEs (β-VAE, β-TCVAE, FactorVAE), BioAE, VQ-VAE, the FactorQVAE family (QVAE, dVAE and
their Factor variants) and their ablations are configurations of this one class: they differ only in the latent
module, the regularizers attached, the reconstruction loss and the optimizer settings. A new method overrides a
hook (``reconstruction_loss``, ``extra_terms``) in a small subclass; the training step stays here.

Optimisation is manual (one step of the model's optimizer per batch, then one step of each adversarial
regularizer's own optimizer, then the lr schedulers) so that a regularizer can own a network trained against the
model (FactorVAE's discriminator); Lightning still saves and restores every optimizer and scheduler, and the
global step counts batches.

Mixed precision (:mod:`disentangle.foundation.precision`): encoder and decoder run in the trainer's precision; the latent
module (``run_latent``) is an fp32 island; the reconstruction losses run in float32 because autocast computes
``binary_cross_entropy_with_logits`` and ``mse_loss`` in float32 (the islands they had changed nothing); the
regularizers' islands are listed in docs/precision.md. The weighted total is float32.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, NonFiniteLossError
from ..quantizers.base import LatentModule
from ..regularizers.base import Regularizer, StepContext
from ..regularizers.weight_decay import decay_groups
from ..foundation.schedules import build_scheduler
from .base import RECONSTRUCTIONS, LatentModel, as_list, step_optimizer, unwrap_optimizer

__all__ = ["RECONSTRUCTIONS", "Autoencoder", "NonFiniteLossError", "bce_reconstruction", "mse_reconstruction",
           "summed_bce_reconstruction"]


def bce_reconstruction(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-pixel mean sigmoid BCE against real-valued targets in [0, 1], averaged over the batch
    (QLAE eq. 2 and Tripod Alg. 1 line 6, as the authors' code implements them)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="mean")


def summed_bce_reconstruction(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Bernoulli negative log-likelihood: sigmoid BCE summed over pixels and channels, averaged over the batch
    (Friede et al.'s code; their App. 5, Table 4: a Bernoulli decoder)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]


def mse_reconstruction(output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-element mean squared error of the decoder output against the image centred to [-0.5, 0.5]
    (FactorQVAE authors' code; the paper writes -log p(x|z), Eq. 5)."""
    return F.mse_loss(output, x - 0.5)


RECONSTRUCTION_LOSSES = {"bce": bce_reconstruction, "bce_sum": summed_bce_reconstruction, "mse": mse_reconstruction}


class Autoencoder(LatentModel):
    """Autoencoder with a pluggable (deterministic or stochastic) latent module and regularizers.

    Args (beside :class:`~disentangle.models.base.LatentModel`'s):
        arch: as for the base; ``decoder: None`` (``model.arch.decoder: null``) makes an **encoder-only** model
            (Cliff's synthetic experiment, Cliff §2.4 and App. F.2): no reconstruction term, the loss is the
            latent module's and the regularizers' terms alone (at least one must be active), ``embed`` returns
            no reconstruction and ``decode`` refuses.
        regularizers: name -> Regularizer; those with weight 0 are dropped (not computed).
        batch_size: the method's paper batch size (read by the data config). With a regularizer that draws its
            negatives from a second batch, each loader batch is split in two halves.
        dataset_size: number of training images, for estimators that need it (β-TCVAE's minibatch-weighted
            sampling); ``disentangle.runtime.run`` passes the data module's, and ``fit`` reads it from the data module
            when it was not given.
        density_scale: factor on the weight of every term measured in nats per image (a Gaussian KL,
            β-TCVAE's MI/TC/DWKL): ``"per_pixel"`` = 1/D_x with D_x = channels x resolution^2, which puts them
            on the per-pixel-mean BCE's scale (the QLAE authors' code); a number uses that factor (1 = nats
            per image, for a summed reconstruction or FactorQVAE's calibration).
        reconstruction: ``"bce"`` (decoder outputs logits, image = sigmoid, per-pixel mean; QLAE, Tripod),
            ``"bce_sum"`` (the same summed over pixels: a Bernoulli likelihood per image; Friede et al.) or ``"mse"``
            (decoder outputs the image centred to [-0.5, 0.5], image = output + 0.5; FactorQVAE).
    """

    def __init__(
        self,
        arch: Mapping[str, Callable[..., nn.Module]],
        latent: Callable[..., LatentModule],
        n_latents: int,
        in_channels: int = 3,
        resolution: int = 64,
        regularizers: Mapping[str, Regularizer] | None = None,
        optimizer: Mapping | None = None,
        batch_size: int = 64,
        name: str = "autoencoder",
        tuned: Mapping | None = None,
        dataset_size: int | None = None,
        density_scale: float | str = "per_pixel",
        reconstruction: str = "bce",
        init: str = "pytorch",
    ):
        super().__init__(arch, latent, n_latents, in_channels=in_channels, resolution=resolution,
                         optimizer=optimizer, batch_size=batch_size, name=name, tuned=tuned,
                         dataset_size=dataset_size, reconstruction=reconstruction, init=init)
        self.density_scale = _density_scale(density_scale, self.in_channels * self.resolution**2)
        for key, reg in (regularizers or {}).items():
            if reg is not None and not isinstance(reg, Regularizer):
                raise ValueError(
                    f"model.regularizers.{key} is not a regularizer (no _target_); attach one with +regularizer={key}"
                )
        active = {k: r for k, r in (regularizers or {}).items() if r is not None and r.weight > 0}
        for key, reg in active.items():
            try:
                reg.bind(self)
            except (ValueError, AttributeError) as exc:
                if self.decoder is None:  # e.g. a Hessian penalty looking up the decoder's layers
                    raise ValueError(f"model.regularizers.{key} cannot work on an encoder-only model "
                                     f"(model.arch.decoder is null): {exc}") from exc
                if isinstance(exc, AttributeError):
                    raise
                raise ValueError(f"model.regularizers.{key}: {exc}") from exc
            if self.decoder is None and reg.needs_activations:
                raise ValueError(f"model.regularizers.{key} needs decoder activations, and this model is "
                                 f"encoder-only (model.arch.decoder is null)")
        if self.decoder is None and not active and not any(w > 0 for w in self.latent.weights.values()):
            raise ValueError("model.arch.decoder is null (encoder-only) and no regularizer or latent term gives a "
                             "loss: attach one, e.g. +regularizer=cliff")
        self.regularizers = nn.ModuleDict(active)
        self.split_batch = any(reg.uses_second_batch for reg in active.values())
        if self.split_batch and self.batch_size % 2:
            raise ValueError(
                f"model.batch_size={self.batch_size} must be even: a regularizer takes its negatives from the second "
                f"half of each batch"
            )

    @property
    def batch_parts(self) -> int:
        """Into how many equal parts :meth:`optimization_step` cuts each batch: 2 when a regularizer takes a second
        half-batch. Under data-parallel training the data module then gives every rank its share of each half, so
        the ranks' halves, in rank order, are the global batch's halves (docs/runs.md)."""
        return 2 if self.split_batch else 1

    @property
    def adversaries(self) -> list[Regularizer]:
        """Regularizers that train a network of their own against the model, in optimizer order."""
        return [reg for reg in self.regularizers.values() if reg.adversarial]

    @property
    def updates_per_step(self) -> int:
        """The model's update plus one per adversary (each a backward pass of its own)."""
        return 1 + len(self.adversaries)

    # -- hooks a method may override ---------------------------------------------------------------
    def reconstruction_loss(self, output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return RECONSTRUCTION_LOSSES[self.reconstruction](output, x)

    def extra_terms(self, ctx: StepContext) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Method-specific loss terms and their weights (none for AE/QLAE/Tripod)."""
        return {}, {}

    # -- the training step, written once -----------------------------------------------------------
    def loss_terms(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """All unweighted loss terms of one batch and the weight of each."""
        terms, weights, _ = self.step_terms(x)
        return terms, weights

    def step_terms(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, float], StepContext]:
        """:meth:`loss_terms` plus the step's context (what adversarial regularizers train on)."""
        pre = self.network("encoder")(x)
        latent = self.run_latent(pre)
        decoder = None if self.decoder is None else self.network("decoder")
        needs = {name for reg in self.regularizers.values() for name in reg.needs_activations}
        activations: dict[str, torch.Tensor] = {}
        terms: dict[str, torch.Tensor] = {}
        weights: dict[str, float] = {}
        if self.decoder is None:  # encoder-only: the regularizers' and latent's terms are the whole loss
            logits = None
        else:
            if needs:
                logits, activations = decoder(latent.z, return_activations=True)
            else:
                logits = decoder(latent.z)
            terms["reconstruction"] = self.reconstruction_loss(logits, x)
            weights["reconstruction"] = 1.0
        for name, value in latent.losses.items():
            terms[name] = value
            weights[name] = self.latent.weights[name] * self._scale(name, self.latent.density_terms)
        ctx = StepContext(x=x, pre=pre, latent=latent, logits=logits, activations=activations,
                          decoder=decoder, dataset_size=self.dataset_size, encode=self.training_encode,
                          step=self.global_step)
        for reg in self.regularizers.values():
            for name, value in reg(ctx).items():
                terms[name] = value
                weights[name] = reg.weight * reg.term_weights.get(name, 1.0) * self._scale(name, reg.density_terms)
        extra, extra_weights = self.extra_terms(ctx)
        terms.update(extra)
        weights.update(extra_weights)
        return terms, weights, ctx

    def _scale(self, name: str, density_terms: frozenset[str]) -> float:
        return self.density_scale if name in density_terms else 1.0

    def optimization_step(self, x: torch.Tensor, optimizers) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One update: the model's optimizer (``optimizers[0]``) on the weighted loss of ``x`` (its first half
        when a regularizer takes a second batch), then each adversarial regularizer's own optimizer (the
        following entries, in :attr:`adversaries` order). Works with Lightning's optimizers and with plain torch
        ones (the benchmark). Returns the loss and everything to log."""
        x_aux = None
        if self.split_batch:
            x, x_aux = x.chunk(2)
        terms, weights, ctx = self.step_terms(x)
        loss = self.weighted_total(terms, weights, self.global_step)
        step_optimizer(self, optimizers[0], loss)
        logs = {name: value.detach() for name, value in terms.items()}
        for reg, optimizer in zip(self.adversaries, optimizers[1:]):
            # the raw optimizer: its step must not count as a global step (Lightning counts wrapped steps)
            logs.update(reg.discriminator_step(self, ctx, x_aux, unwrap_optimizer(optimizer)))
        return loss.detach(), logs

    def setup(self, stage: str) -> None:
        """Before fitting: hand the data module to regularizers that draw examples of their own and take the training
        set's size from it when a regularizer needs it."""
        if stage != "fit":
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        self.attach_data(datamodule)
        needs = [key for key, reg in self.regularizers.items()
                 if reg.needs_dataset_size and getattr(reg, "dataset_size", None) is None]
        if not needs or self.dataset_size is not None:
            return
        size = getattr(datamodule, "num_samples", None)
        if not size:
            raise ConfigError(
                f"model.regularizers.{needs[0]} needs the training set's size, and the data module does not say "
                f"it (no num_samples); set model.regularizers.{needs[0]}.dataset_size=N"
            )
        self.dataset_size = int(size)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, logs = self.optimization_step(batch[0], as_list(self.optimizers()))
        for scheduler in as_list(self.lr_schedulers()):
            scheduler.step()
        self.log_terms(loss, logs)
        return loss

    # -- optimisation ------------------------------------------------------------------------------
    def configure_optimizers(self):
        """The model's AdamW (weight decay on network weights only), then each adversary's optimizer; their lr
        schedulers, stepped once per batch by :meth:`training_step`."""
        cfg = self.optim_cfg
        # learned constants of non-adversarial regularizers (e.g. the L2 supervision's scale) train with the model
        own = nn.ModuleList([reg for reg in self.regularizers.values() if not reg.adversarial])
        networks = {"encoder": self.encoder, "decoder": self.decoder, "latent": self.latent, "regularizers": own}
        groups = decay_groups(
            {name: module for name, module in networks.items() if module is not None},
            cfg["weight_decay"],
            exempt=[self.latent, own],
        )
        main = torch.optim.AdamW(groups, lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"])
        optimizers = [main]
        schedulers = [build_scheduler(main, cfg["schedule"], "model.optimizer.schedule")]
        for reg in self.adversaries:
            optimizer, scheduler = reg.configure_optimizer()
            optimizers.append(optimizer)
            schedulers.append(scheduler)
        schedulers = [s for s in schedulers if s is not None]
        if len(optimizers) == 1 and not schedulers:
            return main
        return optimizers, schedulers


def _density_scale(value: float | str, pixels: int) -> float:
    if value == "per_pixel":
        return 1.0 / pixels
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = float("nan")
    if not scale > 0:
        raise ValueError(f"model.density_scale must be 'per_pixel' or a number > 0 (got {value!r})")
    return scale
