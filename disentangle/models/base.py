"""The base of every method: :class:`LatentModel`, an encoder -> latent module -> decoder LightningModule, and the
small interface through which the rest of the package talks to a model.

What lives here is what the autoencoders (:class:`~disentangle.models.Autoencoder`) and the GANs
(:class:`~disentangle.models.InfoWGAN`) share: building and checking the wiring, encode / represent / decode,
AdamW's weight-decay groups and element-wise clipping, the checkpoint hooks, term logging and the non-finite-loss
stop. A subclass writes its training step (``optimization_step``) and ``configure_optimizers``.

**The model contract.** The evaluation callback, ``python -m disentangle.evaluate``, ``python -m
disentangle.select``, the benchmark and the regularizers use only these members (:class:`EvaluableModel` spells
them out as a typed protocol):

==============================  ==========================================================================
``method``                      the model's config name (``model.name``)
``latent_spec``                 a :class:`~disentangle.quantizers.LatentSpec`: what the representation is
                                (width, discrete or continuous, categorical labels, distribution, prior)
``can_reconstruct``             False for an encoder-only model (``model.arch.decoder: null``)
``represent(x)``                the evaluation representation of images x, (B, n_z)
``embed(x)``                    (representation, reconstructed image in [0, 1] or None) in one pass
``intervention_start``          what the intervention figure's sweeps start from, in words
``intervention_base(x)``        the representation those sweeps start from
``order_codes(codes)``          a categorical representation's codes in the order a sweep steps through them
``decode_intervention(r)``      images in [0, 1] decoded from (edited) representations
``can_sample``                  it generates images from its prior (the GANs)
``sample(n, seed)``             n generated images in [0, 1]; ``n_samples_figure`` of them go in samples.png
``runtime``                     what ran (trainer precision, device): recorded in metrics.json
``loss_terms(x)``               an autoencoder's unweighted training terms of a batch and their weights
``straight_through_mode(hard)`` Δ_ST's noise-free soft/hard forward (categorical latents)
``attach_data(datamodule)``     hand the data module to regularizers that draw examples of their own
``label_validation_score()``    a semi-supervised model's MIG on its held-out labelled examples
``encode(x)``, ``decoder``      what regularizers read: the latent module's output, the decoder network
==============================  ==========================================================================
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import pytorch_lightning as pl
import torch
from pytorch_lightning.core.optimizer import LightningOptimizer
from torch import nn

from ..checks import check_one_of
from ..errors import ConfigError, NonFiniteLossError
from ..nn.init import initialize
from ..quantizers.base import LatentModule, LatentOutput, LatentSpec
from ..foundation.precision import autocast_active, full_precision, island_on, register_island, tf32_active
from ..foundation.schedules import build_scheduler

RECONSTRUCTIONS = ("bce", "bce_sum", "mse")
LATENT_ISLAND = register_island("models.base.LatentModel.run_latent", "the latent module on the encoder's output")


@runtime_checkable
class EvaluableModel(Protocol):
    """What the evaluation callback, ``evaluate`` and ``select`` may ask a model (see the module docstring)."""

    method: str
    n_samples_figure: int
    runtime: dict  # what ran (trainer precision, device), recorded in metrics.json

    @property
    def device(self) -> torch.device: ...
    @property
    def latent_spec(self) -> LatentSpec: ...
    @property
    def can_reconstruct(self) -> bool: ...
    @property
    def can_sample(self) -> bool: ...
    @property
    def intervention_start(self) -> str: ...
    def represent(self, x: torch.Tensor) -> torch.Tensor: ...
    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]: ...
    def intervention_base(self, x: torch.Tensor) -> torch.Tensor: ...
    def order_codes(self, codes: torch.Tensor) -> torch.Tensor: ...
    def decode_intervention(self, representation: torch.Tensor) -> torch.Tensor: ...
    def sample(self, n: int, seed: int | None = None) -> torch.Tensor: ...


class LatentModel(pl.LightningModule):
    """Encoder -> latent module -> decoder, with everything every method shares (see the module docstring).

    Args:
        arch: {"encoder": factory, "decoder": factory} (Hydra ``_partial_``), completed here with the data's shape;
            ``decoder: None`` makes an encoder-only model where the subclass allows it (``requires_decoder``).
        latent: factory of the latent module (called with ``n_latents``).
        n_latents: number of latent dimensions.
        in_channels, resolution: image shape, taken from the data module.
        optimizer: lr, betas, eps, weight_decay (AdamW on network weights only), clip_value (element-wise gradient
            clipping; None/0 disables), clip_undecayed (also clip biases and codebooks; the QLAE authors clip only
            the decayed group, Tripod's clip everything) and schedule (None = constant lr; {kind: cosine, steps,
            final_lr, after: hold|periodic}, per step).
        batch_size: the method's paper batch size (read by the data config).
        name: the config's name (``method``).
        tuned: the config's per-dataset value table, kept for the record (its values are already interpolated).
        dataset_size: number of training images, for estimators that need it.
        reconstruction: what the decoder outputs: ``"bce"``/``"bce_sum"`` logits (image = sigmoid) or ``"mse"`` the
            image centred to [-0.5, 0.5] (image = output + 0.5).
        init: the encoder's and decoder's weight initialisation (:mod:`disentangle.nn.init`): ``pytorch`` (as
            built), ``haiku`` (Friede et al.'s JAX code), ``glorot`` (disentanglement_lib) or ``normal_0.02``.
    """

    requires_decoder = False  # True: ``model.arch.decoder: null`` is refused (the GANs' generator)
    compiled_names = ("encoder", "decoder")  # the networks trainer.compile compiles (disentangle.runtime.compilation)
    n_samples_figure = 0  # generated images in samples.png at the end (models that can sample)

    def __init__(
        self,
        arch: Mapping[str, Callable[..., nn.Module]],
        latent: Callable[..., LatentModule],
        n_latents: int,
        in_channels: int = 3,
        resolution: int = 64,
        optimizer: Mapping | None = None,
        batch_size: int = 64,
        name: str = "model",
        tuned: Mapping | None = None,
        dataset_size: int | None = None,
        reconstruction: str = "bce",
        init: str = "pytorch",
    ):
        super().__init__()
        self.automatic_optimization = False  # every method steps its optimizers itself
        if int(n_latents) < 1:
            raise ValueError(f"model.n_latents must be >= 1 (got {n_latents})")
        if int(batch_size) < 1:
            raise ValueError(f"model.batch_size must be >= 1 (got {batch_size})")
        check_one_of("model.reconstruction", reconstruction, RECONSTRUCTIONS)
        self.n_latents, self.batch_size = int(n_latents), int(batch_size)
        self.method = name
        self.reconstruction = reconstruction
        self.in_channels, self.resolution = int(in_channels), int(resolution)
        self.dataset_size = None if dataset_size is None else int(dataset_size)
        try:
            self.latent = latent(n_latents=self.n_latents)
            self.check_latent(self.latent)
        except ValueError as exc:
            raise ValueError(f"model.latent: {exc}") from exc
        if set(arch) != {"encoder", "decoder"}:
            raise ValueError(f"model.arch must have exactly 'encoder' and 'decoder' (got {sorted(arch)})")
        if self.requires_decoder and arch["decoder"] is None:
            raise ValueError(f"model.arch.decoder is null: {type(self).__name__} needs one, it is the generator")
        self.encoder = arch["encoder"](in_channels=in_channels, resolution=resolution,
                                       out_features=self.latent.in_features)
        self.decoder = None if arch["decoder"] is None else arch["decoder"](
            in_features=self.latent.out_features, out_channels=in_channels, resolution=resolution
        )
        try:
            for net in (self.encoder, self.decoder):
                if net is not None:
                    initialize(net, init)
        except ValueError as exc:
            raise ValueError(f"model.{exc}") from exc
        self.optim_cfg = optimizer_config(optimizer or {})
        self.regularizers = nn.ModuleDict()  # a subclass may fill it; code that walks it finds an empty dict
        self.split_batch = False  # True: each loader batch is two halves, the second for an adversary's negatives
        self.run_config: dict | None = None  # the composed Hydra config, stored in checkpoints
        # what ran (precision, device; set by disentangle.runtime.run), recorded in metrics.json
        self.runtime: dict = {}

    def check_latent(self, latent: LatentModule) -> None:
        """Refuse a latent module this method cannot use (one ValueError line); any module by default."""

    # -- the model contract --------------------------------------------------------------------------------
    @property
    def latent_spec(self) -> LatentSpec:
        return self.latent.spec()

    @property
    def can_reconstruct(self) -> bool:
        """False for an encoder-only model (``model.arch.decoder: null``)."""
        return self.decoder is not None

    has_decoder = can_reconstruct

    @property
    def can_sample(self) -> bool:
        """Whether :meth:`sample` generates images (a generator fed by the latent's prior)."""
        return False

    def encode(self, x: torch.Tensor) -> LatentOutput:
        return self.run_latent(self.encoder(x))

    def run_latent(self, pre: torch.Tensor) -> LatentOutput:
        """The latent module on the encoder's output, as an fp32 island under mixed precision
        (:mod:`disentangle.foundation.precision`): quantizer distances and commitment terms, Gaussian sampling and
        KL, Gumbel and categorical softmaxes and their KLs are all computed in float32, from the encoder output cast
        to float32 (a grid value or a codebook row rounded to bf16 would no longer be a code)."""
        if not (autocast_active() or tf32_active()) or not island_on(LATENT_ISLAND):
            return self.latent(pre)
        with full_precision():  # not in_float32(self.latent): wrapping a module per call would copy its __dict__
            return self.latent(pre.float())

    # -- compiled networks (trainer.compile; disentangle.runtime.compilation) --------------------------------
    def compile_networks(self, **options) -> list[str]:
        """``torch.compile`` each of :attr:`compiled_names` and every regularizer's own networks; returns their names.
        The compiled wrappers are kept outside the module tree (state-dict keys unchanged) and used by the training
        step only, through :meth:`network`; evaluation keeps the eager modules, which share their weights."""
        compiled = {name: torch.compile(net, **options) for name, net in self._compilable_networks().items()}
        self.__dict__["_compiled"] = compiled  # a plain attribute: not a submodule, not in the state dict
        names = list(compiled)
        for key, reg in self.regularizers.items():
            names += [f"regularizers.{key}.{name}" for name in reg.compile_networks(**options)]
        return names

    @property
    def compiled(self) -> list[str]:
        """The names of the networks :meth:`compile_networks` compiled (empty for an eager model)."""
        return list(self.__dict__.get("_compiled", {}))

    def _compilable_networks(self) -> dict[str, nn.Module]:
        """The networks among :attr:`compiled_names` this model has (an encoder-only model has no decoder)."""
        return {name: getattr(self, name) for name in self.compiled_names if getattr(self, name, None) is not None}

    def compilable_network_classes(self) -> list[str]:
        """The class names of the networks :meth:`compile_networks` would compile (``auto`` looks up their measured
        speed-up: disentangle.runtime.compilation.MEASURED_SPEEDUP)."""
        return [type(net).__name__ for net in self._compilable_networks().values()]

    def network(self, name: str) -> nn.Module:
        """The network ``name`` as a training step runs it: compiled after :meth:`compile_networks`, else the module."""
        compiled = self.__dict__.get("_compiled")
        return compiled[name] if compiled and name in compiled else getattr(self, name)

    def network_examples(self, batch: int, generator: torch.Generator) -> list[tuple[nn.Module, torch.Tensor]]:
        """The encoder and decoder among :attr:`compiled_names`, each with a random CPU input of a training batch's
        shape drawn from ``generator`` (what trainer.compile=auto times before deciding)."""
        shapes = {"encoder": (self.in_channels, self.resolution, self.resolution),
                  "decoder": (self.latent.out_features,)}
        nets = self._compilable_networks()
        return [(nets[name], torch.rand(batch, *shape, generator=generator)) for name, shape in shapes.items()
                if name in nets]

    def training_encode(self, x: torch.Tensor) -> LatentOutput:
        """:meth:`encode` through the training step's (possibly compiled) encoder."""
        return self.run_latent(self.network("encoder")(x))

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

    @torch.no_grad()
    def decode_intervention(self, representation: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] decoded from (edited) evaluation representations (the intervention figure)."""
        return self.to_image(self.decode_representation(representation))

    def order_codes(self, codes: torch.Tensor) -> torch.Tensor:
        return self.latent.order_codes(codes)

    @property
    def intervention_start(self) -> str:
        return "the first evaluation image"

    @torch.no_grad()
    def intervention_base(self, x: torch.Tensor) -> torch.Tensor:
        """The representation the intervention figure sweeps from: the encoded ``x`` (QLAE paper Fig. 4,
        App. D)."""
        return self.embed(x)[0]

    @torch.no_grad()
    def sample(self, n: int, seed: int | None = None) -> torch.Tensor:
        raise ValueError(f"{type(self).__name__} ({self.method}) does not generate images")

    @contextmanager
    def straight_through_mode(self, hard: bool) -> Iterator[None]:
        """The training-mode forward (so adversarial terms see the latent sample) with the latent's noise-free soft
        (``hard=False``) or straight-through one-hot (``hard=True``) codes, for the straight-through gap
        (Friede et al. §3.4). Counters of regularizers that draw batches of their own (labelled supervision)
        are put back afterwards, so both modes see the same batches."""
        if not self.latent_spec.straight_through:
            raise ValueError(f"Δ_ST needs a categorical latent (model/latent=categorical); this model's is "
                             f"{self.latent_spec.distribution or type(self.latent).__name__}")
        was_training = self.training
        counters = {name: buf.clone() for name, buf in self.named_buffers() if name.endswith(".steps")}
        self.train()
        try:
            with self.latent.relaxation(hard):
                yield
        finally:
            self.train(was_training)
            for name, value in counters.items():
                self.get_buffer(name).copy_(value)

    @property
    def updates_per_step(self) -> int:
        """Backward passes (optimizer updates) per training step: more than one (an adversary, the GANs) makes
        data-parallel training detect the parameters each pass leaves unused (``disentangle.runtime.run.build``)."""
        return 1

    @property
    def batch_parts(self) -> int:
        """Into how many equal parts a training step cuts each batch: 1 (a model that takes a second half-batch
        says 2; under data-parallel training the data module then gives each rank its share of each part)."""
        return 1

    @property
    def steps_per_period(self) -> int:
        """Training steps after which the step's pattern of updates repeats (1; the GANs: n_critic, one generator
        update each): a benchmark times whole periods."""
        return 1

    def backward_update(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, through Lightning under a Trainer: under DDP, Lightning prepares the reducer for
        each backward pass, so the gradients of every network the pass reaches are averaged across processes."""
        if self._trainer is not None:
            self.manual_backward(loss)
        else:
            loss.backward()

    def attach_data(self, datamodule) -> None:
        """Hand ``datamodule`` to every regularizer that draws examples of its own (one ConfigError line when it
        cannot); called before training and by ``select`` on a loaded checkpoint."""
        for key, reg in self.regularizers.items():
            if reg.needs_data:
                if datamodule is None:
                    raise ConfigError(f"model.regularizers.{key} draws labelled examples from the data module, and "
                                      f"the trainer has none")
                try:
                    reg.attach_data(datamodule)
                except ValueError as exc:
                    raise ConfigError(f"model.regularizers.{key}: {exc}") from exc

    def label_validation_score(self) -> float:
        """MIG on a semi-supervised run's held-out labelled examples (the ``labels`` selection rule)."""
        scorers = [reg for reg in self.regularizers.values() if reg.validates_on_labels]
        if not scorers:
            raise ValueError("not a semi-supervised run (no +regularizer=supervision): no held-out labels")
        return scorers[0].validation_score(self)

    # -- shared pieces of a training step ------------------------------------------------------------------
    def weighted_total(self, terms: Mapping[str, torch.Tensor], weights: Mapping[str, float], step: int,
                       update: str | None = None) -> torch.Tensor:
        """Σ weight · term; a non-finite total stops the run with :class:`NonFiniteLossError` naming the first
        non-finite term and the step (one host sync per call; the culprit is looked for only when needed)."""
        loss = sum(weights[name] * value for name, value in terms.items())
        if not torch.isfinite(loss):
            bad = [name for name, value in terms.items() if not torch.isfinite(value)] or ["total"]
            where = f" ({update} update)" if update else ""
            raise NonFiniteLossError(
                f"non-finite loss at step {step}: term '{bad[0]}' = {terms.get(bad[0], loss).item()}{where}"
            )
        return loss

    def log_terms(self, loss: torch.Tensor, logs: Mapping[str, torch.Tensor]) -> None:
        """``train/loss`` on the progress bar, every term as ``train/<name>``."""
        self.log("train/loss", loss, prog_bar=True)
        self.log_dict({f"train/{name}": value for name, value in logs.items()})

    # -- Lightning hooks -----------------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        """Under data-parallel training every process was seeded alike; each rank r > 0 gets a stream of its own
        (Gaussian and Gumbel noise, prior draws, Hessian directions), so N processes do not draw the same noise
        for different images (rank 0 keeps the seed's stream; a resumed run then restores every rank's saved
        states)."""
        if self.trainer.world_size > 1 and self.trainer.global_rank > 0:
            torch.manual_seed(torch.initial_seed() + 1_000_003 * self.trainer.global_rank)

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self.latent.schedule(self.global_step)  # step-dependent schedules (Gumbel temperature, noise scale)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Element-wise gradient clipping of the decayed group (all groups with ``clip_undecayed``)."""
        clip = self.optim_cfg["clip_value"]
        if not clip:
            return
        for group in optimizer.param_groups:
            if group.get("name") == "decayed" or self.optim_cfg["clip_undecayed"]:
                torch.nn.utils.clip_grad_value_(group["params"], clip)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The composed config and the image shape go with the weights (what ``evaluate`` rebuilds from)."""
        if self.run_config is not None:
            checkpoint["disentangle_config"] = self.run_config
        checkpoint["disentangle_shape"] = {"in_channels": self.in_channels, "resolution": self.resolution}


def step_optimizer(model: pl.LightningModule, optimizer, loss: torch.Tensor, *, counted: bool = True) -> None:
    """zero_grad, backward, clip (``on_before_optimizer_step``), step. Under a Trainer (a ``LightningOptimizer``)
    a ``counted`` step goes through Lightning, which counts it as a global step and clips inside; otherwise the raw
    optimizer steps (plain torch optimizers in the benchmark, or a second optimizer that must not count)."""
    lightning = isinstance(optimizer, LightningOptimizer)
    raw = optimizer.optimizer if lightning else optimizer
    raw.zero_grad(set_to_none=True)
    model.backward_update(loss) if lightning else loss.backward()
    if lightning and counted:
        optimizer.step()
    else:
        model.on_before_optimizer_step(raw)
        raw.step()


def unwrap_optimizer(optimizer):
    """The torch optimizer behind a Lightning wrapper (its step is not counted as a global step)."""
    return optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer


def as_list(value) -> list:
    """None -> [], a list/tuple -> a list, one object -> [it] (what ``optimizers()`` and ``lr_schedulers()``
    return)."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def optimizer_config(cfg: Mapping) -> dict:
    """``model.optimizer`` with defaults filled in and every value checked (one ValueError line naming the key)."""
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
