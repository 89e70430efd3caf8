"""Total correlation by the density-ratio trick with an adversarial discriminator (FactorVAE, Kim & Mnih 2018;
FactorQVAE: Baykal et al. §4, Eqs. 5–8, Alg. 1, the discriminator from the authors' code; Friede et al.'s
variant: App. 3, Eq. 6).

Mixed precision (:mod:`disentangle.foundation.precision`): the discriminator runs in the run's precision, its
last layer too (an fp32 island there changed the TC term no more than the hidden layers' own bf16 rounding
does, and its gradient not at all: docs/precision.md); autocast computes its cross-entropy in float32.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..nn.init import INITS, initialize
from ..quantizers.base import check_int
from ..foundation.schedules import build_scheduler
from .base import Regularizer, StepContext

NEGATIVES = ("second_batch", "same_batch")


def permute_latents(samples: torch.Tensor, n_latents: int, generator: torch.Generator | None = None,
                    draws: torch.Tensor | None = None) -> torch.Tensor:
    """Samples of prod_j q(z_j): each latent's block of columns (n_latents equal blocks of the last axis, e.g. a
    latent's K one-hot entries) is permuted across the batch independently of the others (Kim & Mnih 2018). The
    permutations sort ``draws`` (n_latents, B), by default ``torch.rand`` from ``generator``."""
    b = samples.shape[0]
    blocks = samples.reshape(b, n_latents, -1)
    if draws is None:
        draws = torch.rand(n_latents, b, device=samples.device, generator=generator)
    order = torch.argsort(draws, dim=1)  # (n, B)
    index = order.t().unsqueeze(-1).expand_as(blocks)  # row i of latent j comes from row order[j, i]
    return torch.gather(blocks, 0, index).reshape(samples.shape)


def permute_across_processes(samples: torch.Tensor, n_latents: int, generator: torch.Generator) -> torch.Tensor:
    """:func:`permute_latents` of the *global* batch under data-parallel training, this process's rows of it.

    Each of N processes holds its slice (rows [r·B/N, (r+1)·B/N)) of the global batch of B samples. The slices are
    gathered in rank order, every process draws the permutations from ``generator`` (a CPU generator, in the same
    state on every process; the draws are then moved to the samples' device, so CPU and GPU runs permute alike) on
    the global (n_latents, B) shape, and keeps its slice of the permuted batch. So N processes form exactly the
    negatives one process forms from the same B samples and the same generator state: a negative row may combine
    latents of samples held by other processes. With one process this is :func:`permute_latents` itself."""
    dist = torch.distributed
    world, rank = 1, 0
    full = samples
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        world, rank = dist.get_world_size(), dist.get_rank()
        parts = [torch.empty_like(samples) for _ in range(world)]
        dist.all_gather(parts, samples.contiguous())
        full = torch.cat(parts)
    draws = torch.rand(n_latents, full.shape[0], generator=generator)
    return permute_latents(full, n_latents, draws=draws.to(full.device)).chunk(world)[rank]


def discriminator_net(in_features: int, hidden: int = 1000, layers: int = 5, negative_slope: float = 0.2,
                      init: str = "normal_0.02") -> nn.Sequential:
    """``layers`` linear layers of ``hidden`` units, each followed by LeakyReLU, then a linear map to 2 logits
    (class 0 = joint sample, class 1 = permuted); initialised by ``init`` (:mod:`disentangle.nn.init`; default
    N(0, 0.02) weights and zero biases: the FactorQVAE authors' ``weights_init``)."""
    modules: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), nn.LeakyReLU(negative_slope)]
        width = hidden
    modules.append(nn.Linear(width, 2))
    return initialize(nn.Sequential(*modules), init)


def discriminator_logits(net: nn.Sequential, samples: torch.Tensor,
                         params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """D's two logits for ``samples``, in the caller's precision (bf16 under mixed precision). ``params`` replaces D's
    parameters (``torch.func.functional_call``)."""
    if params is None:
        return net(samples)
    return torch.func.functional_call(net, dict(params), (samples,))


def tc_estimate(logits: torch.Tensor) -> torch.Tensor:
    """Per-sample log D(z) / (1 - D(z)) = logit_0 - logit_1 with D = softmax(logits)_0 (FactorQVAE Eq. 7)."""
    return logits[:, 0] - logits[:, 1]


def discriminator_loss(joint_logits: torch.Tensor, permuted_logits: torch.Tensor) -> torch.Tensor:
    """0.5 (CE(D(z), 0) + CE(D(z_perm), 1)): the negative of the paper's eq. 8, which is to be maximised."""
    zeros = torch.zeros(joint_logits.shape[0], dtype=torch.long, device=joint_logits.device)
    ones = torch.ones(permuted_logits.shape[0], dtype=torch.long, device=permuted_logits.device)
    return 0.5 * (F.cross_entropy(joint_logits, zeros) + F.cross_entropy(permuted_logits, ones))


class AdversarialTotalCorrelation(Regularizer):
    """gamma · mean_b (D(z)_0 - D(z)_1) on the latent module's samples, with D trained by its own optimizer.

    Reads ``LatentOutput.sample`` (a Gaussian's z for FactorVAE; the relaxed one-hot codes, n_latents·K, for
    FactorQVAE/FactordVAE), so it attaches to any model with a sampled latent. After the model's own step, the
    model calls :meth:`discriminator_step`: D learns to tell the (detached) joint samples from samples whose
    latents were permuted independently across a batch:
      ``negatives="second_batch"`` (FactorQVAE authors' code, Algorithm 1): the permuted samples come from a second
      half-batch encoded with the *updated* encoder; the model splits each loader batch in two for it;
      ``negatives="same_batch"`` (Friede et al., disentanglement_lib): permute the same batch's samples.
    The permutations come from :meth:`permutation_generator`: seeded by the run's seed and the step only, so under
    data-parallel training every process draws those one process would draw at that step (docs/runs.md).
    D: ``layers`` x Linear(hidden) + LeakyReLU(negative_slope), then Linear(2). Its optimizer (Adam, ``optimizer``
    = {lr, betas, eps}) and optional lr ``schedule`` are returned to Lightning with the model's, so checkpoints
    save and restore them. ``init``: D's initialisation (:mod:`disentangle.nn.init`).
    """

    requires_sample = True
    adversarial = True
    term = "adv_tc"

    def __init__(
        self,
        weight: float = 1e-4,
        negatives: str = "second_batch",
        hidden: int = 1000,
        layers: int = 5,
        negative_slope: float = 0.2,
        optimizer: Mapping | None = None,
        schedule: Mapping | None = None,
        init: str = "normal_0.02",
    ):
        super().__init__(weight)
        if init not in INITS:
            raise ValueError(f"init must be one of {list(INITS)} (got {init!r})")
        self.init = init
        if negatives not in NEGATIVES:
            raise ValueError(f"negatives must be one of {list(NEGATIVES)} (got {negatives!r})")
        self.negatives = negatives
        self.uses_second_batch = negatives == "second_batch"
        self.hidden = check_int("hidden", hidden, 1)
        self.layers = check_int("layers", layers, 1)
        self.negative_slope = float(negative_slope)
        opt = dict(optimizer or {})
        self.optimizer_cfg = {"lr": float(opt.get("lr", 1e-3)), "betas": tuple(opt.get("betas", (0.9, 0.999))),
                              "eps": float(opt.get("eps", 1e-8))}
        if not self.optimizer_cfg["lr"] > 0:
            raise ValueError(f"optimizer.lr must be > 0 (got {self.optimizer_cfg['lr']})")
        self.schedule = dict(schedule) if schedule else None
        self.discriminator: nn.Module | None = None
        self.n_latents = 0
        # the run's seed: the regularizer is built after seeding, alike in every process (and again on a resume)
        self.permutation_seed = torch.initial_seed()
        self._drawn_at: tuple[int, int] | None = None  # (step, draws at that step) of the last permutation

    def bind(self, model) -> None:
        super().bind(model)
        spec = model.latent_spec
        self.n_latents = spec.n_latents
        self.discriminator = discriminator_net(spec.sample_features, self.hidden, self.layers,
                                               self.negative_slope, self.init)

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        # D's parameters enter the model's loss as constants: the gradient reaches the samples (and the encoder),
        # and no time is spent on D's own gradients, which only its optimizer's step may set
        frozen = {name: p.detach() for name, p in self.discriminator.named_parameters()}
        logits = discriminator_logits(self.discriminator, ctx.latent.sample, frozen)
        return {self.term: tc_estimate(logits).mean()}

    def compile_networks(self, **options) -> list[str]:
        """D's own update runs compiled (kept outside the module tree); inside the model's loss D runs eager, through
        ``functional_call`` with detached parameters (disentangle.runtime.compilation)."""
        self.__dict__["_compiled_discriminator"] = torch.compile(self.discriminator, **options)
        return ["discriminator"]

    def configure_optimizer(self):
        opt = torch.optim.Adam(self.discriminator.parameters(), **self.optimizer_cfg)
        return opt, build_scheduler(opt, self.schedule, "discriminator schedule")

    def permutation_generator(self, step: int) -> torch.Generator:
        """The CPU generator of the negatives' permutations at global step ``step``, seeded from the run's seed and
        the step alone: every process of a data-parallel run, a single process and a resumed run draw the same
        permutations at the same step. A repeated call at the same step (no trainer counting steps, e.g. the
        benchmark) gets a seed of its own."""
        repeat = self._drawn_at[1] + 1 if self._drawn_at is not None and self._drawn_at[0] == step else 0
        self._drawn_at = (step, repeat)
        seed = np.random.SeedSequence((self.permutation_seed, int(step), repeat)).generate_state(1)[0]
        return torch.Generator().manual_seed(int(seed))  # mt19937 reads 32 bits of its seed: one uint32 word

    def discriminator_step(self, model, ctx: StepContext, x_aux: torch.Tensor | None,
                           optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        """One update of D on detached samples; returns its loss and accuracy for logging."""
        joint = ctx.latent.sample.detach()
        if self.uses_second_batch:
            with torch.no_grad():  # the updated encoder, sampling as in training
                source = model.training_encode(x_aux).sample
        else:
            source = joint
        permuted = permute_across_processes(source, self.n_latents, self.permutation_generator(ctx.step))
        optimizer.zero_grad(set_to_none=True)
        net = self.__dict__.get("_compiled_discriminator", self.discriminator)
        joint_logits = discriminator_logits(net, joint)
        permuted_logits = discriminator_logits(net, permuted)
        loss = discriminator_loss(joint_logits, permuted_logits)
        if model is not None:
            model.backward_update(loss)  # through Lightning: under DDP, D's gradients averaged across processes
        else:  # the discriminator on its own (no model)
            loss.backward()
        optimizer.step()
        accuracy = 0.5 * ((joint_logits.argmax(1) == 0).float().mean() + (permuted_logits.argmax(1) == 1).float().mean())
        return {"disc_loss": loss.detach(), "disc_accuracy": accuracy.detach()}
