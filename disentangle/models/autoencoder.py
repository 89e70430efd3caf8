"""The shared autoencoder LightningModule: encoder -> latent module -> decoder, plus regularizers.

AE, QLAE, Tripod, the VAEs (β-VAE, β-TCVAE, FactorVAE), BioAE, VQ-VAE, the FactorQVAE family (QVAE, dVAE and
their Factor variants) and their ablations are configurations of this one class: they differ only in the latent
module, the regularizers attached, the reconstruction loss and the optimizer settings. A new method overrides a
hook (``reconstruction_loss``, ``extra_terms``) in a small subclass; the training step stays here.

Optimisation is manual (one step of the model's optimizer per batch, then one step of each adversarial
regularizer's own optimizer, then the lr schedulers) so that a regularizer can own a network trained against the
model (FactorVAE's discriminator); Lightning still saves and restores every optimizer and scheduler, and the
global step counts batches.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.core.optimizer import LightningOptimizer
from torch import nn

from ..errors import ConfigError, NonFiniteLossError
from ..quantizers.base import LatentModule, LatentOutput
from ..regularizers.base import Regularizer, StepContext
from ..regularizers.weight_decay import decay_groups
from ..schedules import build_scheduler

RECONSTRUCTIONS = ("bce", "bce_sum", "mse")


def bce_reconstruction(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-pixel mean sigmoid BCE against real-valued targets in [0, 1], averaged over the batch
    (QLAE eq. 2 and Tripod Alg. 1 as implemented by the authors; spec qlae.md §4)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="mean")


def summed_bce_reconstruction(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Bernoulli negative log-likelihood: sigmoid BCE summed over pixels and channels, averaged over the batch
    (Friede et al.'s code; categorical_vae.md §3.5)."""
    return F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]


def mse_reconstruction(output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-element mean squared error of the decoder output against the image centred to [-0.5, 0.5]
    (FactorQVAE authors' code; spec factorqvae.md §5, A4)."""
    return F.mse_loss(output, x - 0.5)


_RECONSTRUCTION_LOSSES = {"bce": bce_reconstruction, "bce_sum": summed_bce_reconstruction, "mse": mse_reconstruction}


class Autoencoder(pl.LightningModule):
    """Autoencoder with a pluggable (deterministic or stochastic) latent module and regularizers.

    Args:
        arch: {"encoder": factory, "decoder": factory} (Hydra ``_partial_``), completed here with the
            data's shape; ``latent``: factory of the latent module. ``decoder: None`` (``model.arch.decoder: null``)
            makes an **encoder-only** model (Cliff's synthetic experiment, spec cliff.md §2.1): no reconstruction
            term, the loss is the latent module's and the regularizers' terms alone (at least one must be
            active), ``embed`` returns no reconstruction and ``decode`` refuses.
        n_latents: number of latent dimensions (default in configs: 2 x number of factors).
        in_channels, resolution: image shape, taken from the data module.
        regularizers: name -> Regularizer; those with weight 0 are dropped (not computed).
        optimizer: lr, betas, eps, weight_decay (AdamW on network weights only), clip_value
            (element-wise gradient clipping; None/0 disables), clip_undecayed (also clip biases and
            codebooks; the QLAE authors clip only the decayed group, Tripod's clip everything) and schedule
            (None = constant lr; {kind: cosine, steps, final_lr, after: hold|periodic}, per step).
        batch_size: the method's paper batch size (read by the data config). With a regularizer that draws its
            negatives from a second batch, each loader batch is split in two halves.
        tuned: the config's per-dataset value table; the values for the chosen dataset have already
            been interpolated into the arguments above, so it is only kept for the record.
        dataset_size: number of training images, for estimators that need it (β-TCVAE's minibatch-weighted
            sampling); ``disentangle.run`` passes the data module's, and ``fit`` reads it from the data module
            when it was not given.
        density_scale: factor on the weight of every term measured in nats per image (a Gaussian KL,
            β-TCVAE's MI/TC/DWKL): ``"per_pixel"`` = 1/D_x with D_x = channels x resolution^2, which puts them
            on the per-pixel-mean BCE's scale (spec qlae.md §4.3-4.4); a number uses that factor (1 = nats
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
    ):
        super().__init__()
        self.automatic_optimization = False
        if int(n_latents) < 1:
            raise ValueError(f"model.n_latents must be >= 1 (got {n_latents})")
        if int(batch_size) < 1:
            raise ValueError(f"model.batch_size must be >= 1 (got {batch_size})")
        if reconstruction not in RECONSTRUCTIONS:
            raise ValueError(f"model.reconstruction must be one of {list(RECONSTRUCTIONS)} (got {reconstruction!r})")
        self.method = name
        self.n_latents = int(n_latents)
        self.batch_size = int(batch_size)
        self.reconstruction = reconstruction
        self.in_channels, self.resolution = int(in_channels), int(resolution)
        try:
            self.latent = latent(n_latents=self.n_latents)
        except ValueError as exc:
            raise ValueError(f"model.latent: {exc}") from exc
        if set(arch) != {"encoder", "decoder"}:
            raise ValueError(f"model.arch must have exactly 'encoder' and 'decoder' (got {sorted(arch)})")
        self.encoder = arch["encoder"](in_channels=in_channels, resolution=resolution, out_features=self.latent.in_features)
        self.decoder = None if arch["decoder"] is None else arch["decoder"](
            in_features=self.latent.out_features, out_channels=in_channels, resolution=resolution
        )
        self.dataset_size = None if dataset_size is None else int(dataset_size)
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
        self.optim_cfg = _optimizer_config(optimizer or {})
        self.run_config: dict | None = None  # the composed Hydra config, stored in checkpoints

    # -- forward pieces ----------------------------------------------------------------------------
    @property
    def discrete_latents(self) -> bool:
        return bool(self.latent.discrete)

    @property
    def has_decoder(self) -> bool:
        """False for an encoder-only model (``model.arch.decoder: null``)."""
        return self.decoder is not None

    @property
    def adversaries(self) -> list[Regularizer]:
        """Regularizers that train a network of their own against the model, in optimizer order."""
        return [reg for reg in self.regularizers.values() if reg.adversarial]

    def encode(self, x: torch.Tensor) -> LatentOutput:
        return self.latent(self.encoder(x))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """The decoder's output: logits (``reconstruction="bce"``) or the centred image (``"mse"``)."""
        if self.decoder is None:
            raise ValueError("this model is encoder-only (model.arch.decoder is null): there is nothing to decode")
        return self.decoder(z)

    def to_image(self, output: torch.Tensor) -> torch.Tensor:
        """Decoder output -> image (in [0, 1] up to an MSE model's overshoot)."""
        return output + 0.5 if self.reconstruction == "mse" else torch.sigmoid(output)

    @torch.no_grad()
    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(evaluation representation, reconstructed image); the image is None for an encoder-only model."""
        out = self.encode(x)
        if self.decoder is None:
            return self.latent.representation(out), None
        return self.latent.representation(out), self.to_image(self.decode(out.z))

    @torch.no_grad()
    def represent(self, x: torch.Tensor) -> torch.Tensor:
        """The evaluation representation alone (no decoder pass): what the sampled metrics encode."""
        return self.latent.representation(self.encode(x))

    def decode_representation(self, representation: torch.Tensor) -> torch.Tensor:
        """Decoder output for (edited) evaluation representations: mu for a Gaussian, code indices for VQ."""
        return self.decode(self.latent.decoder_input(representation))

    # -- hooks a method may override ---------------------------------------------------------------
    def reconstruction_loss(self, output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return _RECONSTRUCTION_LOSSES[self.reconstruction](output, x)

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
        pre = self.encoder(x)
        latent = self.latent(pre)
        needs = {name for reg in self.regularizers.values() for name in reg.needs_activations}
        activations: dict[str, torch.Tensor] = {}
        terms: dict[str, torch.Tensor] = {}
        weights: dict[str, float] = {}
        if self.decoder is None:  # encoder-only: the regularizers' and latent's terms are the whole loss
            logits = None
        else:
            if needs:
                logits, activations = self.decoder(latent.z, return_activations=True)
            else:
                logits = self.decoder(latent.z)
            terms["reconstruction"] = self.reconstruction_loss(logits, x)
            weights["reconstruction"] = 1.0
        for name, value in latent.losses.items():
            terms[name] = value
            weights[name] = self.latent.weights[name] * self._scale(name, self.latent.density_terms)
        ctx = StepContext(x=x, pre=pre, latent=latent, logits=logits, activations=activations,
                          decoder=self.decoder, dataset_size=self.dataset_size, encode=self.encode)
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
        loss = sum(weights[name] * value for name, value in terms.items())
        if not torch.isfinite(loss):  # one host sync per step; names the culprit only when needed
            bad = [name for name, value in terms.items() if not torch.isfinite(value)] or ["total"]
            raise NonFiniteLossError(
                f"non-finite loss at step {self.global_step}: term '{bad[0]}' = {terms.get(bad[0], loss).item()}"
            )
        main = optimizers[0]
        main.zero_grad(set_to_none=True)
        if isinstance(main, LightningOptimizer):
            self.manual_backward(loss)
            main.step()  # Lightning calls on_before_optimizer_step (clipping) inside
        else:
            loss.backward()
            self.on_before_optimizer_step(main)
            main.step()
        logs = {name: value.detach() for name, value in terms.items()}
        for reg, optimizer in zip(self.adversaries, optimizers[1:]):
            # the raw optimizer: its step must not count as a global step (Lightning counts wrapped steps)
            raw = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
            logs.update(reg.discriminator_step(self, ctx, x_aux, raw))
        return loss.detach(), logs

    def setup(self, stage: str) -> None:
        """Before fitting: take the training set's size from the data module when a regularizer needs it, and
        refuse what is not supported yet."""
        if stage != "fit":
            return
        if self.adversaries and self.trainer.world_size > 1:
            raise ConfigError(
                "an adversarial regularizer (its own optimizer) is not supported under multi-process training yet: "
                "its discriminator's gradients would not be averaged across processes; use trainer.devices=1"
            )
        datamodule = getattr(self.trainer, "datamodule", None)
        for key, reg in self.regularizers.items():
            if reg.needs_data:
                if datamodule is None:
                    raise ConfigError(f"model.regularizers.{key} draws labelled examples from the data module, and "
                                      f"the trainer has none")
                try:
                    reg.attach_data(datamodule)
                except ValueError as exc:
                    raise ConfigError(f"model.regularizers.{key}: {exc}") from exc
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

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self.latent.schedule(self.global_step)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, logs = self.optimization_step(batch[0], _as_list(self.optimizers()))
        for scheduler in _as_list(self.lr_schedulers()):
            scheduler.step()
        self.log("train/loss", loss, prog_bar=True)
        self.log_dict({f"train/{name}": value for name, value in logs.items()})
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

    def on_before_optimizer_step(self, optimizer) -> None:
        clip = self.optim_cfg["clip_value"]
        if not clip:
            return
        for group in optimizer.param_groups:
            if group.get("name") == "decayed" or self.optim_cfg["clip_undecayed"]:
                torch.nn.utils.clip_grad_value_(group["params"], clip)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.run_config is not None:
            checkpoint["disentangle_config"] = self.run_config
        checkpoint["disentangle_shape"] = {"in_channels": self.in_channels, "resolution": self.resolution}


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


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


def _optimizer_config(cfg: Mapping) -> dict:
    out = {
        "lr": float(cfg.get("lr", 1e-3)),
        "betas": tuple(float(b) for b in cfg.get("betas", (0.9, 0.99))),
        "eps": float(cfg.get("eps", 1e-8)),
        "weight_decay": float(cfg.get("weight_decay", 0.0)),
        "clip_value": float(cfg.get("clip_value") or 0.0),
        "clip_undecayed": bool(cfg.get("clip_undecayed", False)),
        "schedule": dict(cfg["schedule"]) if cfg.get("schedule") else None,
    }
    if not out["lr"] > 0:
        raise ValueError(f"model.optimizer.lr must be > 0 (got {out['lr']})")
    if not out["weight_decay"] >= 0:
        raise ValueError(f"model.optimizer.weight_decay must be >= 0 (got {out['weight_decay']})")
    if not out["clip_value"] >= 0:
        raise ValueError(f"model.optimizer.clip_value must be >= 0 (got {out['clip_value']})")
    if len(out["betas"]) != 2 or not all(0 <= b < 1 for b in out["betas"]):
        raise ValueError(f"model.optimizer.betas must be two numbers in [0, 1) (got {list(out['betas'])})")
    if out["schedule"] is not None:  # fail before training, not at configure_optimizers
        build_scheduler(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=out["lr"]), out["schedule"],
                        "model.optimizer.schedule")
    return out
