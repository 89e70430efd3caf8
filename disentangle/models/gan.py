"""Latent-reconstructing Wasserstein GANs: InfoWGAN-GP and QLInfoWGAN-GP (Hsu et al. 2023, Alg. 3).

QLAE paper §2.2 and App. A, Alg. 3 (losses, the encoder/critic and generator updates), App. C.2, Tables 8 and
10 (hyperparameters); the critic head on the encoder's trunk, the parameter groups and n_e:g = 5 are the
authors' code's.

The second LightningModule family: it reuses the latent modules (:class:`~disentangle.quantizers.LatentQuantizer`
for QLInfoWGAN-GP, :class:`~disentangle.quantizers.ContinuousLatent` for InfoWGAN-GP), the networks (the
configured encoder, whose trunk also feeds a :class:`~disentangle.nn.critic.CriticHead`; the configured decoder is
the generator), the weight-decay parameter groups, element-wise clipping and the evaluation callback; only the
training step differs from :class:`~disentangle.models.Autoencoder`.

One training iteration t (one loader batch of real images):

1. encoder/critic update on L_E (Alg. 3, lines 4–14) with fresh prior samples and interpolation weights;
2. if (t + 1) % n_critic == 0, a generator update on L_G (Alg. 3, lines 15–23) with fresh prior samples; it
   moves the generator and the codebook V, not the encoder or critic.

**Global step.** ``trainer.global_step`` counts encoder/critic updates, i.e. iterations (batches): the authors' 2e5
"steps" are encoder/critic iterations (authors' code), so ``trainer.max_steps=200000`` gives 4e4 generator
updates. The generator's optimizer is stepped unwrapped, so it is not counted; after ``global_step`` iterations the
generator has made ``global_step // n_critic`` updates. The schedule reads the global step, which checkpoints
restore, so a resumed run continues the schedule exactly; both optimizers' states are in every checkpoint.

**Mixed precision** (:mod:`disentangle.foundation.precision`): trunk, critic head and generator run in the
trainer's precision; the latent module and the whole gradient penalty (its critic pass on the interpolates,
the input gradient and its norm, pinned to 1) are fp32 islands; the value terms' batch means (a small
difference of two means) are taken of float32 casts, and the latent reconstruction is float32 (an MSE of the
latent island's float32 output). ``16-mixed`` is refused: the generator's optimizer steps outside Lightning's
gradient scaler.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..nn.critic import CriticHead, trunk_width
from ..quantizers.base import LatentModule, LatentOutput
from ..regularizers.weight_decay import decay_groups
from ..foundation.precision import island, register_island
from .base import LatentModel, as_list, step_optimizer

__all__ = ["INTERVENTION_BASES", "InfoWGAN", "frozen", "gradient_penalty", "interpolate", "latent_reconstruction",
           "penalty_from_gradients", "sample_prior"]


PENALTY_ISLAND = register_island("models.gan.InfoWGAN.gradient_penalty_at", "the critic pass, input gradient and norm "
                                 "of the gradient penalty")
INTERVENTION_BASES = ("prior", "data")  # where interventions.png starts (InfoWGAN's intervene_on)


# -- the loss pieces (QLAE Alg. 3) -----------------------------------------------------------------------
def interpolate(x_real: torch.Tensor, x_fake: torch.Tensor, epsilon: torch.Tensor | None = None) -> torch.Tensor:
    """x̃ = ε·x_real + (1 − ε)·x_fake with one ε ~ U[0, 1] per sample, broadcast over C, H, W (QLAE Alg. 3
    line 9; Gulrajani et al. 2017 Alg. 1). ``epsilon`` (B,) fixes the weights (tests). Returned with
    ``requires_grad``."""
    if epsilon is None:
        epsilon = torch.rand(x_real.shape[0], device=x_real.device, dtype=x_real.dtype)
    eps = epsilon.reshape(-1, *([1] * (x_real.dim() - 1)))
    return (eps * x_real.detach() + (1 - eps) * x_fake.detach()).requires_grad_(True)


def penalty_from_gradients(values: torch.Tensor, x_interp: torch.Tensor) -> torch.Tensor:
    """Two-sided gradient penalty mean_i (‖∇_x̃ C(x̃_i)‖₂ − 1)² from the critic's values at the interpolates:
    the norm is taken over each sample's whole C×H×W input gradient (authors' code). Differentiable
    (``create_graph``)."""
    (grad,) = torch.autograd.grad(values.sum(), x_interp, create_graph=True)
    return (grad.flatten(1).norm(dim=1) - 1).pow(2).mean()


def gradient_penalty(critic: Callable[[torch.Tensor], torch.Tensor], x_real: torch.Tensor, x_fake: torch.Tensor,
                     epsilon: torch.Tensor | None = None) -> torch.Tensor:
    """WGAN-GP penalty of ``critic`` (images -> (B,) values) on per-sample interpolates of real and fake
    images (QLAE Alg. 3 line 10; Gulrajani et al. 2017 eq. 3). The model computes the same quantity inside its
    one batched trunk pass (:func:`interpolate` + :func:`penalty_from_gradients`)."""
    x_interp = interpolate(x_real, x_fake, epsilon)
    return penalty_from_gradients(critic(x_interp), x_interp)


def latent_reconstruction(z_hat: torch.Tensor, z_target: torch.Tensor) -> torch.Tensor:
    """MSE(ẑ(x_fake), z_fake): mean over the n_z dimensions, then over the batch (QLAE Alg. 3; authors'
    code)."""
    return F.mse_loss(z_hat, z_target)


def sample_prior(latent: LatentModule, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """n draws of z_fake from the latent module's prior (QLAE Alg. 3, z_fake ~ Z):
    :meth:`LatentModule.sample_prior`, i.e. for :class:`~disentangle.quantizers.LatentQuantizer` each
    dimension j independently takes a uniformly chosen value of its codebook V_j (uniform over the n_v^{n_z}
    grid; a gather, so V receives gradients through the sample, as in the authors' code), for
    :class:`~disentangle.quantizers.ContinuousLatent` U[0, 1]^{n_z}. ValueError (one line) for a module
    without a prior."""
    return latent.sample_prior(n, device)


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


class InfoWGAN(LatentModel):
    """InfoWGAN-GP / QLInfoWGAN-GP (QLAE paper §2.2, Alg. 3): a generator whose latent is recovered by an
    encoder sharing its trunk with a Wasserstein critic; which one is decided by the latent module.

    Args:
        arch: {"encoder": factory, "decoder": factory} (Hydra ``_partial_``), as for the autoencoders; the decoder is
            the generator, the encoder needs a ``forward_features`` trunk and a Linear ``head`` (the critic head
            is added on the trunk).
        latent: factory of the latent module; it must have a prior (:func:`sample_prior`).
        n_latents: n_z (2 × the number of factors in the configs).
        in_channels, resolution: image shape, from the data module.
        optimizer: lr, betas, eps, weight_decay, clip_value, clip_undecayed as for the autoencoders (validated by
            the same code); the same values for both optimizers (Table 10). No lr schedule.
        batch_size: real images per iteration (64 in the paper); every prior batch has the same size.
        n_critic: n_e:g, encoder/critic updates per generator update (5, authors' code; the paper gives no
            value).
        value_weight, gradient_penalty_weight, latent_weight: λ_value = 1, λ_gp = 10, λ_latent = 200 (Table 10);
            λ_latent = 0 is a plain WGAN-GP. The quantize/commit weights are the latent module's (0.01 each).
        tuned: the config's per-dataset table, kept for the record (values are already interpolated).
        dataset_size: accepted for the shared constructor call; unused.
        n_samples_figure: generated images in ``samples.png``, which the evaluation callback writes with the final
            evaluation from fixed prior draws (seed 0, the same for every run); 0 = none.
        intervene_on: where ``interventions.png`` starts its latent sweeps: ``"prior"`` (the authors' code: a
            fixed prior draw, seed 0) or ``"data"`` (the first evaluation image's encoded
            latent, as for the autoencoders).
    """

    requires_decoder = True  # the decoder is the generator
    # compiled: the generator; the encoder/critic trunk runs eager (the gradient penalty's double backward)
    compiled_names = ("decoder",)

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
        init: str = "pytorch",
    ):
        if isinstance(n_critic, bool) or int(n_critic) != n_critic or int(n_critic) < 1:
            raise ValueError(f"model.n_critic must be an integer >= 1 (got {n_critic})")
        loss_weights = {}
        for key, value in (("value_weight", value_weight), ("gradient_penalty_weight", gradient_penalty_weight),
                           ("latent_weight", latent_weight)):
            if not float(value) >= 0:  # also rejects NaN
                raise ValueError(f"model.{key} must be a number >= 0 (got {value})")
            loss_weights[key.removesuffix("_weight")] = float(value)
        # the generator outputs logits; image = sigmoid (authors' code)
        super().__init__(arch, latent, n_latents, in_channels=in_channels, resolution=resolution,
                         optimizer=optimizer, batch_size=batch_size, name=name, tuned=tuned,
                         dataset_size=dataset_size, reconstruction="bce", init=init)
        self.loss_weights = loss_weights
        self.n_critic = int(n_critic)
        try:
            self.critic = CriticHead(trunk_width(self.encoder))
        except ValueError as exc:
            raise ValueError(f"model.arch.encoder: {exc}") from exc
        if self.optim_cfg["schedule"] is not None:
            raise ValueError("model.optimizer.schedule is not supported by the GANs (the authors' constant lr)")
        if isinstance(n_samples_figure, bool) or int(n_samples_figure) != n_samples_figure or n_samples_figure < 0:
            raise ValueError(f"model.n_samples_figure must be an integer >= 0 (got {n_samples_figure})")
        self.n_samples_figure = int(n_samples_figure)
        if intervene_on not in INTERVENTION_BASES:
            raise ValueError(f"model.intervene_on must be one of {list(INTERVENTION_BASES)} (got {intervene_on!r})")
        self.intervene_on = intervene_on
        self._plain_iterations = 0  # the schedule's counter when stepped without a Trainer (benchmarks)

    def check_latent(self, latent: LatentModule) -> None:
        if not latent.has_prior:  # fail now for a latent module without a prior
            latent.sample_prior(1)

    # -- the model contract (what differs from the autoencoders) -------------------------------------------
    @property
    def generator(self) -> nn.Module:
        """The generator G (the configured decoder; QLAE App. C.3)."""
        return self.decoder

    @property
    def can_sample(self) -> bool:
        return True

    @property
    def updates_per_step(self) -> int:
        """An encoder/critic update and, every n_critic-th iteration, a generator update: two backward passes."""
        return 2

    @property
    def steps_per_period(self) -> int:
        """n_critic encoder/critic iterations, the last with the generator's update."""
        return self.n_critic

    @torch.no_grad()
    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation, "reconstruction") of real images: the representation is the encoder's latent of x
        (quantized for QLInfoWGAN-GP, raw for InfoWGAN-GP; authors' code); the reconstruction is
        sigmoid(G(ẑ(x))), the generator applied to the encoder's latent, which is what the paper's GAN PSNR
        measures (Tables 12–15)."""
        return super().embed(x)

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

    @property
    def intervention_start(self) -> str:
        return "a fixed prior draw" if self.intervene_on == "prior" else "the first evaluation image"

    @torch.no_grad()
    def intervention_base(self, x: torch.Tensor) -> torch.Tensor:
        """The representation the intervention figure sweeps from: a fixed prior draw (``intervene_on="prior"``,
        the authors' GAN figures; the GANs' latents are their own representation) or the encoded ``x``."""
        if self.intervene_on == "prior":
            return self.prior_draws(len(x), seed=0)
        return self.embed(x)[0]

    # -- the two objectives (QLAE Alg. 3) --------------------------------------------------------------------
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
        """Unweighted terms of the encoder/critic loss L_E and their weights (QLAE Alg. 3, lines 8–13):
        ``value`` = mean C(x_fake) − mean C(x_real), ``gradient_penalty``, ``latent`` = MSE(ẑ(x_fake), z_fake)
        and, for a quantized latent, ``quantize``/``commit`` of ẑ(x_fake). x_fake = sigmoid(G(z_fake)) is a
        constant here (the generator is not updated in this step; Alg. 3 line 14). Real and fake images go
        through the trunk in one batch (no layer mixes samples). ``z_fake``/``epsilon`` fix the prior draw and
        the interpolation."""
        n = x_real.shape[0]
        with torch.no_grad():
            if z_fake is None:
                z_fake = sample_prior(self.latent, n, x_real.device)
            x_fake = self.to_image(self.network("decoder")(z_fake))
        values, pre = self._heads(torch.cat([x_real, x_fake]))
        v_real, v_fake = values.split(n)
        latent = self.run_latent(pre[n:])
        # the interpolates apart: the penalty's double backward then runs over n samples, not 3n
        x_interp = interpolate(x_real.float(), x_fake.float(), epsilon)
        terms = {
            "value": v_fake.float().mean() - v_real.float().mean(),
            "gradient_penalty": self.gradient_penalty_at(x_interp),
            "latent": latent_reconstruction(latent.z, z_fake),
            **latent.losses,
        }
        return terms, self._weights(latent)

    def gradient_penalty_at(self, x_interp: torch.Tensor) -> torch.Tensor:
        """The gradient penalty at the interpolates: an fp32 island under mixed precision (the critic's pass, its input
        gradient and the norm in float32; a bf16 input gradient would put a rounding error of about 0.4% on a norm
        that the penalty pins to 1)."""
        with island(PENALTY_ISLAND):
            return penalty_from_gradients(self.critic(self.encoder.forward_features(x_interp)), x_interp)

    def generator_terms(self, n: int, z_fake: torch.Tensor | None = None
                        ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Unweighted terms of the generator loss L_G and their weights (QLAE Alg. 3, lines 18–21):
        ``value`` = −mean C(x_fake), ``latent`` = MSE(ẑ(x_fake), z_fake) and ``quantize``/``commit`` for a
        quantized latent. The codebook V gets gradients through the sampled z_fake (generator input and MSE
        target) and ``quantize``, not through ẑ."""
        if z_fake is None:
            z_fake = sample_prior(self.latent, n, self.device)
        values, pre = self._heads(self.to_image(self.network("decoder")(z_fake)))
        latent = self.run_latent(pre)
        terms = {"value": -values.float().mean(), "latent": latent_reconstruction(latent.z, z_fake), **latent.losses}
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
        loss = self.weighted_total(terms, weights, iteration, "encoder/critic")
        step_optimizer(self, critic_opt, loss)
        logs = {name: value.detach() for name, value in terms.items()}
        logs["wasserstein"] = -logs["value"]  # the critic's estimate of W(p_real, p_fake)
        if (iteration + 1) % self.n_critic == 0:
            with frozen(self.encoder, self.critic):
                g_terms, g_weights = self.generator_terms(x.shape[0])
                g_loss = self.weighted_total(g_terms, g_weights, iteration, "generator")
                step_optimizer(self, generator_opt, g_loss, counted=False)
            logs["generator/loss"] = g_loss.detach()
            logs.update({f"generator/{name}": value.detach() for name, value in g_terms.items()})
        return loss.detach(), logs

    # -- Lightning hooks -----------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        """Refuse what this step does not support, before any training work."""
        if stage != "fit":
            return
        if str(self.trainer.precision).startswith("16"):
            raise ConfigError(f"trainer.precision={self.trainer.precision} is not supported by the GANs: the "
                              f"generator update bypasses the loss scaler; use 32-true or bf16-mixed")

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, logs = self.optimization_step(batch[0], as_list(self.optimizers()), iteration=self.global_step)
        self.log_terms(loss, logs)
        return loss

    def configure_optimizers(self):
        """Two optimizers (QLAE Alg. 3, lines 14 and 22–23; groups as in the authors' code): encoder trunk +
        latent head + critic head; generator + latent module (the codebook V). Each is AdamW over
        :func:`decay_groups`: weight decay and clipping on kernels, weight matrices, norm scales and the
        generator's learned constant; none on biases, norm shifts and V."""
        cfg = self.optim_cfg
        kwargs = {"lr": cfg["lr"], "betas": cfg["betas"], "eps": cfg["eps"]}
        critic = decay_groups({"encoder": self.encoder, "critic": self.critic}, cfg["weight_decay"])
        generator = decay_groups({"decoder": self.decoder, "latent": self.latent}, cfg["weight_decay"],
                                 exempt=[self.latent])
        return [torch.optim.AdamW(critic, **kwargs), torch.optim.AdamW(generator, **kwargs)], []
