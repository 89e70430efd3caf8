"""Latent-reconstructing Wasserstein GANs: InfoWGAN-GP and QLInfoWGAN-GP (Hsu et al. 2023, Alg. 3).

Spec qlae.md §1, §2.2 (critic head), §3.1/§3.4 (latent modules and priors), §4.7 (losses), §5.1/§5.3 (parameter
groups, optimizers, the 5:1 schedule), §8.1 (what the metrics see), §11 (pseudocode).

The second LightningModule family: it reuses the latent modules (:class:`~disentangle.quantizers.LatentQuantizer`
for QLInfoWGAN-GP, :class:`~disentangle.quantizers.ContinuousLatent` for InfoWGAN-GP), the networks (the
configured encoder, whose trunk also feeds a :class:`~disentangle.nn.critic.CriticHead`; the configured decoder is
the generator), the weight-decay parameter groups, element-wise clipping and the evaluation callback; only the
training step differs from :class:`~disentangle.models.Autoencoder`.

One training iteration t (one loader batch of real images):

1. encoder/critic update on L_E (§4.7) with fresh prior samples and interpolation weights;
2. if (t + 1) % n_critic == 0, a generator update on L_G (§4.7) with fresh prior samples; it moves the generator and
   the codebook V, not the encoder or critic.

**Global step.** ``trainer.global_step`` counts encoder/critic updates, i.e. iterations (batches): the authors' 2e5
"steps" are encoder/critic iterations (spec §5.3, §12 row 14), so ``trainer.max_steps=200000`` gives 4e4 generator
updates. The generator's optimizer is stepped unwrapped, so it is not counted; after ``global_step`` iterations the
generator has made ``global_step // n_critic`` updates. The schedule reads the global step, which checkpoints
restore, so a resumed run continues the schedule exactly; both optimizers' states are in every checkpoint.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.core.optimizer import LightningOptimizer
from torch import nn

from ..callbacks.figures import _figure, _save, _tile
from ..errors import ConfigError, NonFiniteLossError
from ..nn.critic import CriticHead, trunk_width
from ..quantizers.base import LatentModule, LatentOutput
from ..quantizers.continuous import ContinuousLatent
from ..quantizers.latent_quantizer import LatentQuantizer
from ..regularizers.weight_decay import decay_groups
from .autoencoder import Autoencoder, _as_list, _optimizer_config

log = logging.getLogger(__name__)

__all__ = ["InfoWGAN", "gradient_penalty", "interpolate", "latent_reconstruction", "penalty_from_gradients",
           "sample_prior"]


INTERVENTION_BASES = ("prior", "data")  # where interventions.png starts (InfoWGAN's intervene_on)


# -- the loss pieces (spec qlae.md §4.7) -----------------------------------------------------------------
def interpolate(x_real: torch.Tensor, x_fake: torch.Tensor, epsilon: torch.Tensor | None = None) -> torch.Tensor:
    """x̃ = ε·x_real + (1 − ε)·x_fake with one ε ~ U[0, 1] per sample, broadcast over C, H, W (spec §4.7;
    Gulrajani et al. 2017 Alg. 1). ``epsilon`` (B,) fixes the weights (tests). Returned with ``requires_grad``."""
    if epsilon is None:
        epsilon = torch.rand(x_real.shape[0], device=x_real.device, dtype=x_real.dtype)
    eps = epsilon.reshape(-1, *([1] * (x_real.dim() - 1)))
    return (eps * x_real.detach() + (1 - eps) * x_fake.detach()).requires_grad_(True)


def penalty_from_gradients(values: torch.Tensor, x_interp: torch.Tensor) -> torch.Tensor:
    """Two-sided gradient penalty mean_i (‖∇_x̃ C(x̃_i)‖₂ − 1)² from the critic's values at the interpolates: the
    norm is taken over each sample's whole C×H×W input gradient (spec §4.7). Differentiable (``create_graph``)."""
    (grad,) = torch.autograd.grad(values.sum(), x_interp, create_graph=True)
    return (grad.flatten(1).norm(dim=1) - 1).pow(2).mean()


def gradient_penalty(critic: Callable[[torch.Tensor], torch.Tensor], x_real: torch.Tensor, x_fake: torch.Tensor,
                     epsilon: torch.Tensor | None = None) -> torch.Tensor:
    """WGAN-GP penalty of ``critic`` (images -> (B,) values) on per-sample interpolates of real and fake images
    (spec §4.7; Gulrajani et al. 2017 eq. 3). The model computes the same quantity inside its one batched trunk
    pass (:func:`interpolate` + :func:`penalty_from_gradients`)."""
    x_interp = interpolate(x_real, x_fake, epsilon)
    return penalty_from_gradients(critic(x_interp), x_interp)


def latent_reconstruction(z_hat: torch.Tensor, z_target: torch.Tensor) -> torch.Tensor:
    """MSE(ẑ(x_fake), z_fake): mean over the n_z dimensions, then over the batch (spec §4.7, authors' code)."""
    return F.mse_loss(z_hat, z_target)


def _prior(latent: LatentModule) -> str:
    """Which prior ``latent`` has: ``"own"`` (it defines ``sample_prior(n, device)``), ``"codebook"``, ``"uniform"``;
    ValueError naming the module when it has none."""
    if callable(getattr(latent, "sample_prior", None)):
        return "own"
    if isinstance(latent, LatentQuantizer):
        return "codebook"
    if type(latent) is ContinuousLatent:
        return "uniform"
    raise ValueError(
        f"{type(latent).__name__} has no prior to sample z_fake from; the GANs take model/latent=latent_quantizer "
        f"(QLInfoWGAN-GP) or continuous (InfoWGAN-GP)"
    )


def sample_prior(latent: LatentModule, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """n draws of z_fake from the latent module's prior (spec §3.1, §3.4):

    * :class:`LatentQuantizer`: each dimension j independently takes a uniformly chosen value of its codebook V_j
      (uniform over the n_v^{n_z} grid); a gather, so V receives gradients through the sample (authors' code);
      drawn on the codebook's device;
    * :class:`ContinuousLatent`: U[0, 1]^{n_z}.

    A latent module may define ``sample_prior(n, device)`` of its own, which is used instead. ValueError for a
    module without a prior."""
    kind = _prior(latent)
    if kind == "own":
        return latent.sample_prior(n, device)
    if kind == "codebook":
        book = latent.codebook()  # (n_z, n_v), differentiable in V
        indices = torch.randint(0, latent.n_values, (n, latent.n_latents), device=book.device)
        return torch.gather(book.unsqueeze(0).expand(n, -1, -1), 2, indices.unsqueeze(-1)).squeeze(-1)
    return torch.rand(n, latent.n_latents, device=device)


def samples_grid(images, path: str | Path, title: str = "generated samples") -> Path:
    """Save (n, C, H, W) images in [0, 1] as a near-square grid (row-major) with ``title``; returns the path."""
    n = len(images)
    cols = max(1, round(n**0.5))
    rows = -(-n // cols)
    padded = np.ones((rows * cols, *images.shape[1:]), dtype=np.float32)  # blank tiles fill the last row
    padded[:n] = images
    fig = _figure(max(3.0, 0.7 * cols + 0.5), max(3.0, 0.7 * rows + 0.8))
    ax = fig.add_subplot()
    ax.imshow(_tile(padded.reshape(rows, cols, *images.shape[1:])), interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)


@contextmanager
def frozen(*modules: nn.Module) -> Iterator[None]:
    """Parameters of ``modules`` take no gradient inside the block (the graph still flows through them)."""
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class InfoWGAN(pl.LightningModule):
    """InfoWGAN-GP / QLInfoWGAN-GP (spec qlae.md §4.7, Alg. 3): a generator whose latent is recovered by an encoder
    sharing its trunk with a Wasserstein critic; which one is decided by the latent module.

    Args:
        arch: {"encoder": factory, "decoder": factory} (Hydra ``_partial_``), as for the autoencoders; the decoder is
            the generator, the encoder needs a ``forward_features`` trunk and a Linear ``head`` (the critic head
            is added on the trunk).
        latent: factory of the latent module; it must have a prior (:func:`sample_prior`).
        n_latents: n_z (2 × the number of factors in the configs).
        in_channels, resolution: image shape, from the data module.
        optimizer: lr, betas, eps, weight_decay, clip_value, clip_undecayed as for the autoencoders (validated by
            the same code); the same values for both optimizers (spec §5.3). No lr schedule.
        batch_size: real images per iteration (64 in the paper); every prior batch has the same size.
        n_critic: n_e:g, encoder/critic updates per generator update (5, authors' code; spec §12 row 13).
        value_weight, gradient_penalty_weight, latent_weight: λ_value = 1, λ_gp = 10, λ_latent = 200 (Table 10);
            λ_latent = 0 is a plain WGAN-GP. The quantize/commit weights are the latent module's (0.01 each).
        tuned: the config's per-dataset table, kept for the record (values are already interpolated).
        dataset_size: accepted for the shared constructor call; unused.
        n_samples_figure: generated images in ``samples.png``, written to the run directory at the end of training
            from fixed prior draws (seed 0, the same for every run); 0 = none.
        intervene_on: where ``interventions.png`` starts its latent sweeps: ``"prior"`` (the authors' code, spec
            qlae.md §9.1 item 6: a fixed prior draw, seed 0) or ``"data"`` (the first evaluation image's encoded
            latent, as for the autoencoders).
    """

    def __init__(
        self,
        arch: Mapping[str, Callable[..., nn.Module]],
        latent: Callable[..., LatentModule],
        n_latents: int,
        in_channels: int = 3,
        resolution: int = 64,
        optimizer: Mapping | None = None,
        batch_size: int = 64,
        name: str = "infowgan_gp",
        tuned: Mapping | None = None,
        dataset_size: int | None = None,
        n_critic: int = 5,
        value_weight: float = 1.0,
        gradient_penalty_weight: float = 10.0,
        latent_weight: float = 200.0,
        n_samples_figure: int = 64,
        intervene_on: str = "prior",
    ):
        super().__init__()
        self.automatic_optimization = False
        if int(n_latents) < 1:
            raise ValueError(f"model.n_latents must be >= 1 (got {n_latents})")
        if int(batch_size) < 1:
            raise ValueError(f"model.batch_size must be >= 1 (got {batch_size})")
        if isinstance(n_critic, bool) or int(n_critic) != n_critic or int(n_critic) < 1:
            raise ValueError(f"model.n_critic must be an integer >= 1 (got {n_critic})")
        self.loss_weights = {}
        for key, value in (("value_weight", value_weight), ("gradient_penalty_weight", gradient_penalty_weight),
                           ("latent_weight", latent_weight)):
            if not float(value) >= 0:  # also rejects NaN
                raise ValueError(f"model.{key} must be a number >= 0 (got {value})")
            self.loss_weights[key.removesuffix("_weight")] = float(value)
        self.method = name
        self.n_latents = int(n_latents)
        self.batch_size = int(batch_size)
        self.n_critic = int(n_critic)
        self.in_channels, self.resolution = int(in_channels), int(resolution)
        self.dataset_size = None if dataset_size is None else int(dataset_size)
        self.reconstruction = "bce"  # the generator outputs logits; image = sigmoid (spec §4.7)
        try:
            self.latent = latent(n_latents=self.n_latents)
            _prior(self.latent)  # fail now for a latent module without a prior
        except ValueError as exc:
            raise ValueError(f"model.latent: {exc}") from exc
        if set(arch) != {"encoder", "decoder"}:
            raise ValueError(f"model.arch must have exactly 'encoder' and 'decoder' (got {sorted(arch)})")
        if arch["decoder"] is None:
            raise ValueError("model.arch.decoder is null: the GANs need one, it is the generator")
        self.encoder = arch["encoder"](in_channels=in_channels, resolution=resolution,
                                       out_features=self.latent.in_features)
        self.decoder = arch["decoder"](in_features=self.latent.out_features, out_channels=in_channels,
                                       resolution=resolution)
        try:
            self.critic = CriticHead(trunk_width(self.encoder))
        except ValueError as exc:
            raise ValueError(f"model.arch.encoder: {exc}") from exc
        self.regularizers = nn.ModuleDict()  # none: code that walks a model's regularizers finds an empty dict
        self.split_batch = False
        self.optim_cfg = _optimizer_config(optimizer or {})
        if self.optim_cfg["schedule"] is not None:
            raise ValueError("model.optimizer.schedule is not supported by the GANs (constant lr, spec qlae.md §5.3)")
        if isinstance(n_samples_figure, bool) or int(n_samples_figure) != n_samples_figure or n_samples_figure < 0:
            raise ValueError(f"model.n_samples_figure must be an integer >= 0 (got {n_samples_figure})")
        self.n_samples_figure = int(n_samples_figure)
        if intervene_on not in INTERVENTION_BASES:
            raise ValueError(f"model.intervene_on must be one of {list(INTERVENTION_BASES)} (got {intervene_on!r})")
        self.intervene_on = intervene_on
        self.run_config: dict | None = None  # the composed Hydra config, stored in checkpoints
        self._plain_iterations = 0  # the schedule's counter when stepped without a Trainer (benchmarks)

    # -- the evaluation interface (the callback's contract, shared with the autoencoders) ------------------
    discrete_latents = Autoencoder.discrete_latents
    encode = Autoencoder.encode
    decode = Autoencoder.decode
    to_image = Autoencoder.to_image
    represent = Autoencoder.represent
    decode_representation = Autoencoder.decode_representation

    @property
    def generator(self) -> nn.Module:
        """The generator G (the configured decoder; spec §2.3)."""
        return self.decoder

    @torch.no_grad()
    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation, "reconstruction") of real images: the representation is the encoder's latent of x
        (quantized for QLInfoWGAN-GP, raw for InfoWGAN-GP; spec §8.1); the reconstruction is sigmoid(G(ẑ(x))),
        the generator applied to the encoder's latent, which is what the paper's GAN PSNR measures (spec §8.7)."""
        out = self.encode(x)
        return self.latent.representation(out), self.to_image(self.decode(out.z))

    @torch.no_grad()
    def prior_draws(self, n: int, seed: int | None = None) -> torch.Tensor:
        """n prior samples z_fake; ``seed`` fixes them without touching the global random state."""
        if seed is None:
            return sample_prior(self.latent, n, self.device)
        cuda = range(torch.cuda.device_count()) if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            return sample_prior(self.latent, n, self.device)

    @torch.no_grad()
    def sample(self, n: int, seed: int | None = None) -> torch.Tensor:
        """n generated images sigmoid(G(z_fake)) from prior samples, in [0, 1]; ``seed`` fixes the draws without
        touching the global random state."""
        return self.to_image(self.decode(self.prior_draws(n, seed)))

    @torch.no_grad()
    def intervention_base(self, x: torch.Tensor) -> torch.Tensor:
        """The representation the intervention figure sweeps from: a fixed prior draw (``intervene_on="prior"``,
        the authors' GAN figures; the GANs' latents are their own representation) or the encoded ``x``."""
        if self.intervene_on == "prior":
            return self.prior_draws(len(x), seed=0)
        return self.embed(x)[0]

    # -- the two objectives (spec §4.7) ---------------------------------------------------------------------
    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass of the shared trunk: (critic values (B,), latent head output (B, in_features))."""
        features = self.encoder.forward_features(x)
        return self.critic(features), self.encoder.head(features)

    def _weights(self, latent: LatentOutput) -> dict[str, float]:
        weights = dict(self.loss_weights)
        weights.update({name: self.latent.weights[name] for name in latent.losses})
        return weights

    def critic_terms(self, x_real: torch.Tensor, z_fake: torch.Tensor | None = None,
                     epsilon: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Unweighted terms of the encoder/critic loss L_E and their weights (spec §4.7):
        ``value`` = mean C(x_fake) − mean C(x_real), ``gradient_penalty``, ``latent`` = MSE(ẑ(x_fake), z_fake) and,
        for a quantized latent, ``quantize``/``commit`` of ẑ(x_fake). x_fake = sigmoid(G(z_fake)) is a constant
        here (the generator is not updated in this step; spec §4.7). Real and fake images go through the trunk in
        one batch (no layer mixes samples). ``z_fake``/``epsilon`` fix the prior draw and the interpolation."""
        n = x_real.shape[0]
        with torch.no_grad():
            if z_fake is None:
                z_fake = sample_prior(self.latent, n, x_real.device)
            x_fake = self.to_image(self.decode(z_fake))
        values, pre = self._heads(torch.cat([x_real, x_fake]))
        v_real, v_fake = values.split(n)
        latent = self.latent(pre[n:])
        # the interpolates apart: the penalty's double backward then runs over n samples, not 3n
        x_interp = interpolate(x_real, x_fake, epsilon)
        terms = {
            "value": v_fake.mean() - v_real.mean(),
            "gradient_penalty": penalty_from_gradients(self.critic(self.encoder.forward_features(x_interp)),
                                                       x_interp),
            "latent": latent_reconstruction(latent.z, z_fake),
            **latent.losses,
        }
        return terms, self._weights(latent)

    def generator_terms(self, n: int, z_fake: torch.Tensor | None = None
                        ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Unweighted terms of the generator loss L_G and their weights (spec §4.7): ``value`` = −mean C(x_fake),
        ``latent`` = MSE(ẑ(x_fake), z_fake) and ``quantize``/``commit`` for a quantized latent. The codebook V gets
        gradients through the sampled z_fake (generator input and MSE target) and ``quantize``, not through ẑ."""
        if z_fake is None:
            z_fake = sample_prior(self.latent, n, self.device)
        values, pre = self._heads(self.to_image(self.decode(z_fake)))
        latent = self.latent(pre)
        terms = {"value": -values.mean(), "latent": latent_reconstruction(latent.z, z_fake), **latent.losses}
        return terms, self._weights(latent)

    # -- one iteration -------------------------------------------------------------------------------------
    def optimization_step(self, x: torch.Tensor, optimizers, iteration: int | None = None
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One iteration of Alg. 3: an encoder/critic update (``optimizers[0]``) on the real batch ``x``, then, when
        (iteration + 1) is a multiple of ``n_critic``, a generator update (``optimizers[1]``, stepped unwrapped so
        that Lightning's global step counts iterations). ``iteration`` defaults to the trainer's global step under
        a Trainer; without one (plain torch optimizers, the benchmark) an internal counter. Returns the
        encoder/critic loss and everything to log."""
        if iteration is None and self._trainer is not None:
            iteration = self.global_step
        elif iteration is None:
            iteration = self._plain_iterations
            self._plain_iterations += 1
        critic_opt, generator_opt = optimizers
        terms, weights = self.critic_terms(x)
        loss = self._total(terms, weights, iteration, "encoder/critic")
        self._update(critic_opt, loss, wrapped=True)
        logs = {name: value.detach() for name, value in terms.items()}
        logs["wasserstein"] = -logs["value"]  # the critic's estimate of W(p_real, p_fake)
        if (iteration + 1) % self.n_critic == 0:
            with frozen(self.encoder, self.critic):
                g_terms, g_weights = self.generator_terms(x.shape[0])
                g_loss = self._total(g_terms, g_weights, iteration, "generator")
                self._update(generator_opt, g_loss, wrapped=False)
            logs["generator/loss"] = g_loss.detach()
            logs.update({f"generator/{name}": value.detach() for name, value in g_terms.items()})
        return loss.detach(), logs

    def _total(self, terms: dict[str, torch.Tensor], weights: dict[str, float], step: int, update: str
               ) -> torch.Tensor:
        loss = sum(weights[name] * value for name, value in terms.items())
        if not torch.isfinite(loss):  # one host sync per update; names the culprit only when needed
            bad = [name for name, value in terms.items() if not torch.isfinite(value)] or ["total"]
            raise NonFiniteLossError(f"non-finite loss at step {step}: term '{bad[0]}' = "
                                     f"{terms.get(bad[0], loss).item()} ({update} update)")
        return loss

    def _update(self, optimizer, loss: torch.Tensor, wrapped: bool) -> None:
        """zero_grad, backward, clip (``on_before_optimizer_step``), step. ``wrapped``: a Lightning optimizer steps
        through Lightning (counted as a global step, clipping inside); otherwise the raw optimizer steps."""
        lightning = isinstance(optimizer, LightningOptimizer)
        raw = optimizer.optimizer if lightning else optimizer
        raw.zero_grad(set_to_none=True)
        if lightning:
            self.manual_backward(loss)
        else:
            loss.backward()
        if lightning and wrapped:
            optimizer.step()  # Lightning calls on_before_optimizer_step (clipping) inside
        else:
            self.on_before_optimizer_step(raw)
            raw.step()

    # -- Lightning hooks -----------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        """Refuse what this step does not support, before any training work."""
        if stage != "fit":
            return
        if self.trainer.world_size > 1:
            raise ConfigError("the GANs' two-optimizer step does not support multi-process training yet: use "
                              "trainer.devices=1")
        if str(self.trainer.precision).startswith("16"):
            raise ConfigError(f"trainer.precision={self.trainer.precision} is not supported by the GANs: the "
                              f"generator update bypasses the loss scaler; use 32-true or bf16-mixed")

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self.latent.schedule(self.global_step)

    def on_train_end(self) -> None:
        """``samples.png`` in the run directory (next to the evaluation's figures), on global rank 0."""
        output_dir = ((self.run_config or {}).get("paths") or {}).get("output_dir")
        if not self.n_samples_figure or not output_dir or not self.trainer.is_global_zero:
            return
        was_training = self.training
        self.eval()
        try:
            images = self.sample(self.n_samples_figure, seed=0).float().cpu().numpy()
        finally:
            self.train(was_training)
        path = samples_grid(images, Path(output_dir) / "samples.png", title=f"{self.method}: generated samples "
                            f"(step {self.global_step})")
        log.info("generated samples: %s", path)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, logs = self.optimization_step(batch[0], _as_list(self.optimizers()), iteration=self.global_step)
        self.log("train/loss", loss, prog_bar=True)
        self.log_dict({f"train/{name}": value for name, value in logs.items()})
        return loss

    def configure_optimizers(self):
        """Two optimizers (spec §5.1, §5.3): encoder trunk + latent head + critic head; generator + latent module
        (the codebook V). Each is AdamW over :func:`decay_groups`: weight decay and clipping on kernels, weight
        matrices, norm scales and the generator's learned constant; none on biases, norm shifts and V."""
        cfg = self.optim_cfg
        kwargs = {"lr": cfg["lr"], "betas": cfg["betas"], "eps": cfg["eps"]}
        critic = decay_groups({"encoder": self.encoder, "critic": self.critic}, cfg["weight_decay"])
        generator = decay_groups({"decoder": self.decoder, "latent": self.latent}, cfg["weight_decay"],
                                 exempt=[self.latent])
        return [torch.optim.AdamW(critic, **kwargs), torch.optim.AdamW(generator, **kwargs)], []

    on_before_optimizer_step = Autoencoder.on_before_optimizer_step  # element-wise clipping of the decayed group
    on_save_checkpoint = Autoencoder.on_save_checkpoint  # the composed config and the image shape
