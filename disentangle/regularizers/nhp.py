"""Normalized Hessian penalty (Tripod §3.3–3.4, eqs. 16–17 and Alg. 1 lines 15–24), and
the vanilla Hessian penalty of naive Tripod (Tripod §4.1; Peebles et al. 2020 as in Tripod §2.2, eqs. 8–9).

Under mixed precision the whole penalty is an fp32 island (:mod:`disentangle.foundation.precision`): the second differences
are divided by ε² = 0.01, so from bf16 activations (8 significant bits) they measure rounding noise (NHP then sits
near its noise value, the number of layers). The perturbed decoder passes *and* the unperturbed one they are
differenced against run in float32: the main pass's bf16 activations are not used, z goes through the fp32 pass
with its perturbations (one decoder call on (1 + 4 n_p) B latents instead of 4 n_p B). Likewise under TF32 on CUDA
(``tf32=true`` forced on a Hessian-penalty model: its forward passes are then all float32; its backward pass is
not, ``tf32: auto`` keeps TF32 off for these models).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..foundation.precision import autocast_active, island, island_on, register_island, tf32_active
from .base import Regularizer, StepContext, batch_std

AGGREGATES = ("per_layer", "pooled")
NHP_ISLAND = register_island("regularizers.nhp.NormalizedHessianPenalty.forward", "the perturbed and unperturbed "
                             "decoder passes and the second differences")


def normalized_hessian_penalty(
    activations_at: Callable[[torch.Tensor], dict[str, torch.Tensor]],
    z: torch.Tensor,
    sigma: torch.Tensor | None,
    base: dict[str, torch.Tensor] | None,
    layers: Sequence[str],
    *,
    n_perturbations: int = 2,
    eps: float = 0.1,
    aggregate: str = "per_layer",
    normalized: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Per-sample ratio Var_v[v'Hv] / Var_w[w'Hw] by central finite differences; returns shape (B,).

    v = sigma * Rademacher, w = sigma * Gaussian (Prop. 3.2), one direction per (sample, perturbation)
    shared by every activation dimension and layer (authors' code; Alg. 1 draws one per k). All perturbed
    latents go through the decoder in one call; ``base`` (the activations at z, from the main forward pass)
    None puts z itself in that call too (what mixed precision does: every activation differenced in float32).
    Variances across perturbations are population variances.
    aggregate="per_layer": sum over layers of mean_k numer / (mean_k denom + 1e-10) (authors' code; the
    per-dataset lambdas were tuned with it). aggregate="pooled": one ratio of sums over all regularized
    dimensions (paper Alg. 1 line 24).

    normalized=False is the vanilla Hessian penalty: v = plain Rademacher (no sigma, which may be None), the
    numerator alone (no Gaussian directions, no denominator): per_layer = sum over layers of mean_k numer,
    pooled = mean of numer over all regularized dimensions.
    """
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {list(AGGREGATES)} (got {aggregate!r})")
    b, n_z = z.shape
    shape = (n_perturbations, b, n_z)
    directions = torch.randint(0, 2, shape, device=z.device, generator=generator).to(z.dtype) * 2 - 1
    if normalized:
        gauss = torch.randn(shape, device=z.device, dtype=z.dtype, generator=generator)
        directions = torch.cat([directions, gauss], 0) * sigma  # (2 n_p, B, n_z)
    n_dirs = directions.shape[0]
    steps = torch.cat([z + eps * directions, z - eps * directions], 0).reshape(-1, n_z)
    if base is None:
        perturbed = activations_at(torch.cat([z, steps]))
        base = {name: perturbed[name][:b] for name in layers}
        perturbed = {name: perturbed[name][b:] for name in layers}
    else:
        perturbed = activations_at(steps)

    numer_total = denom_total = ratio_total = 0.0
    n_dims = 0
    for name in layers:
        out = perturbed[name].reshape(2, n_dirs, b, -1)
        second = (out[0] - 2 * base[name].reshape(1, b, -1) + out[1]) / eps**2  # (n_dirs, B, D_k)
        numer = second[:n_perturbations].var(0, unbiased=False)  # (B, D_k)
        if not normalized:
            ratio_total = ratio_total + (numer.mean(-1) if aggregate == "per_layer" else numer.sum(-1))
            n_dims += numer.shape[-1]
            continue
        denom = second[n_perturbations:].var(0, unbiased=False)
        if aggregate == "per_layer":
            ratio_total = ratio_total + numer.mean(-1) / (denom.mean(-1) + 1e-10)
        else:
            numer_total = numer_total + numer.sum(-1)
            denom_total = denom_total + denom.sum(-1)
    if not normalized:
        return ratio_total if aggregate == "per_layer" else ratio_total / n_dims
    if aggregate == "per_layer":
        return ratio_total
    return numer_total / (denom_total + 1e-10)


class NormalizedHessianPenalty(Regularizer):
    """Tripod's NHP on chosen decoder activations (default: the decoder's ``hessian_layers``);
    ``normalized=False`` gives naive Tripod's vanilla Hessian penalty (term ``hp`` instead of ``nhp``)."""

    exact_float32 = True  # the backward pass differences the same nearly equal activations: no TF32 on CUDA

    def __init__(
        self,
        weight: float = 1e-2,
        layers: Sequence[str] | None = None,
        n_perturbations: int = 2,
        eps: float = 0.1,
        aggregate: str = "per_layer",
        normalized: bool = True,
    ):
        super().__init__(weight)
        if int(n_perturbations) < 2:
            raise ValueError(f"n_perturbations must be >= 2 to estimate a variance (got {n_perturbations})")
        if not eps > 0:
            raise ValueError(f"eps must be > 0 (got {eps})")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {list(AGGREGATES)} (got {aggregate!r})")
        self.layers = tuple(layers) if layers else None
        self.n_perturbations = int(n_perturbations)
        self.eps = float(eps)
        self.aggregate = aggregate
        self.normalized = bool(normalized)

    def bind(self, model) -> None:
        """Resolve the layer list against the model's decoder; unknown names fail before training starts."""
        super().bind(model)
        decoder = model.decoder
        available = tuple(getattr(decoder, "activation_names", ()))
        if self.layers is None:
            self.layers = tuple(decoder.hessian_layers)
        unknown = [name for name in self.layers if name not in available]
        if unknown:
            raise ValueError(f"NHP layers {unknown} are not decoder activations; choose from {list(available)}")
        self.needs_activations = self.layers

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        def activations_at(z: torch.Tensor) -> dict[str, torch.Tensor]:
            return ctx.decoder(z, return_activations=True, until=self.layers)[1]

        # under autocast or TF32 the main pass's activations are rounded: differenced, they would measure rounding
        exact_base = (autocast_active() or tf32_active()) and island_on(NHP_ISLAND)
        with island(NHP_ISLAND):  # a no-op outside autocast
            penalty = normalized_hessian_penalty(
                activations_at,
                ctx.latent.z.float(),
                batch_std(ctx.latent.z_continuous) if self.normalized else None,
                None if exact_base else ctx.activations,  # else z's activations are recomputed in the island
                self.layers,
                n_perturbations=self.n_perturbations,
                eps=self.eps,
                aggregate=self.aggregate,
                normalized=self.normalized,
            )
        return {"nhp" if self.normalized else "hp": penalty.mean()}
