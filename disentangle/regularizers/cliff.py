"""Cliff: cliff-alignment criterion for quantized disentanglement (Barin-Pacela et al. 2025, §2, Eqs. 1-8, and
App. B). Kernel density estimates of the standardised batch latents; a univariate term that wants few sharp
cliffs in each marginal, a bivariate term that wants the cliffs along z_i not to move with z_j, and an
anti-collapse term that wants each marginal to look like a standardised uniform.

Mixed precision (:mod:`disentangle.foundation.precision`): ``cliff_terms`` reads the latent island's float32 output; under
autocast its bivariate einsum (and what follows it) runs in bf16, the rest in float32. It is no fp32 island: one
changed no term beyond what the encoder's own bf16 rounding does (docs/precision.md).
"""
from __future__ import annotations

import math

import torch

from ..quantizers.base import check_int, check_weight
from .base import Regularizer, StepContext

REPRESENTATIONS = ("mean", "sample", "z")
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_STD_EPS = 1e-6  # added to the batch std (TINY in Barin-Pacela et al. 2024's code; not in the paper)


def check_grid(grid) -> tuple[float, float, int]:
    """(lo, hi, K) of the integration grid I(lo, hi, K) (Cliff App. B, Eq. 15), or a one-line ValueError."""
    try:
        lo, hi, k = grid
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise ValueError(f"grid must be [lo, hi, n_points] (got {grid!r})") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"grid must have lo < hi (got lo={lo}, hi={hi})")
    if isinstance(k, bool) or int(k) != k or int(k) < 2:
        raise ValueError(f"grid's n_points must be an integer >= 2 (got {k})")
    return lo, hi, int(k)


def check_sigma(sigma) -> float:
    sigma = float(sigma)
    if not sigma > 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a number > 0 (got {sigma})")
    return sigma


def standardize(z: torch.Tensor) -> torch.Tensor:
    """Per-batch standardisation (Cliff App. B): (z - mean) / (unbiased std + 1e-6), gradients through
    both."""
    return (z - z.mean(0)) / (z.std(0) + _STD_EPS)


def _entropy(q: torch.Tensor, step: float) -> torch.Tensor:
    """Riemann-sum differential entropy -Δ Σ_a q_a log q_a of densities on the grid (last axis; Eq. 2, 15).
    Empty bins count 0 (q log q -> 0) and give finite gradients."""
    tiny = torch.finfo(q.dtype).tiny
    return -step * (q * torch.log(q.clamp_min(tiny))).sum(-1)


def _normalize(u: torch.Tensor, step: float) -> torch.Tensor:
    """u / ∫u along the grid (last axis): Eq. 1's s_i and Eq. 5's normalised conditional."""
    return u / (step * u.sum(-1, keepdim=True)).clamp_min(torch.finfo(u.dtype).tiny)


def _gaussian(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """φ_σ(x), the 1-D Gaussian kernel (Eq. 10-12)."""
    return torch.exp(-0.5 * (x / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))


def cliff_terms(z: torch.Tensor, *, sigma: float = 0.1, grid=(-5.0, 5.0, 100), n_conditioning: int = 20,
                n_uniform: int = 100, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Unweighted Cliff terms of a batch z (n, d): scalars ``uni`` (Σ_i H(s_i), paper §2.1), ``biv`` (Σ_{i≠j}
    JSD over M conditioning values of z_j, §2.2) and ``kl_uni`` (Σ_i KL(U(-√3, √3) || p(z_i)), Eq. 7, §2.3).

    z is standardised per dimension (App. B); densities are Gaussian KDEs of bandwidth ``sigma`` on the
    standardised batch (Eqs. 10-14); integrals are Riemann sums on ``grid`` = I(lo, hi, K) = linspace(lo,
    hi, K) with weight Δ = (hi - lo) / K (Eq. 15). The M = min(``n_conditioning``, n) conditioning values
    are batch points drawn without replacement (one index set per call, shared by every ordered pair; all n
    points in batch order when M = n); the KL expectation averages ``n_uniform`` fresh U(-√3, √3) draws per
    dimension. Both draws use ``generator``. The conditional's 1/p(ζ_m) factor (Eq. 3) cancels in Eq. 5's
    normalisation, so it is left out. Memory: O(d² M K) for the bivariate term.
    """
    sigma = check_sigma(sigma)
    lo, hi, n_grid = check_grid(grid)
    n_conditioning = check_int("n_conditioning", n_conditioning, 1)
    n_uniform = check_int("n_uniform", n_uniform, 1)
    if z.dim() != 2:
        raise ValueError(f"z must have shape (n, d) (got {tuple(z.shape)})")
    n, d = z.shape
    if n < 2:
        raise ValueError(f"z needs at least 2 rows to standardise (got n={n})")
    if d < 2:
        raise ValueError(f"the bivariate Cliff term needs at least 2 latent dimensions (got d={d})")
    step = (hi - lo) / n_grid
    zs = standardize(z)
    t = torch.linspace(lo, hi, n_grid, dtype=z.dtype, device=z.device)

    # kernel derivative at the grid: [i, a, k] = φ'_σ(t_a - z̃_ki), φ'_σ(x) = -(x / σ²) φ_σ(x)
    diff = t.view(1, n_grid, 1) - zs.t().unsqueeze(1)                  # (d, K, n)
    kernel_grad = -diff / sigma**2 * _gaussian(diff, sigma)

    # univariate (paper §2.1): s_i = |p_i'| / ∫|p_i'|, l_uni = Σ_i H(s_i)
    density_grad = kernel_grad.mean(-1)                                 # (d, K) = dp(z_i)/dz_i at t
    uni = _entropy(_normalize(density_grad.abs(), step), step).sum()

    # bivariate (paper §2.2): G[i, j, m, a] = (1/n) Σ_k φ'(t_a - z̃_ki) φ(ζ_mj - z̃_kj)
    m = min(n_conditioning, n)
    if m == n:
        idx = torch.arange(n, device=z.device)
    else:
        idx = torch.randperm(n, generator=generator, device="cpu")[:m].to(z.device)
    zeta = zs[idx]                                                      # (M, d)
    cond = _gaussian(zeta.t().unsqueeze(-1) - zs.t().unsqueeze(1), sigma)  # [j, m, k] = φ_σ(ζ_mj - z̃_kj)
    joint_grad = torch.einsum("iak,jmk->ijma", kernel_grad, cond) / n  # (d, d, M, K)
    conditionals = _normalize(joint_grad.abs(), step)                  # p̃_ij(· | ζ_m), Eq. 5
    mixture = conditionals.mean(2)                                      # m̃_ij, (d, d, K)
    jsd = _entropy(mixture, step) - _entropy(conditionals, step).mean(-1)  # (d, d), Eq. 6
    off_diagonal = ~torch.eye(d, dtype=torch.bool, device=z.device)
    biv = jsd[off_diagonal].sum()

    # anti-collapse (paper §2.3, Eq. 7): -log(2√3) - E_{u ~ U(-√3, √3)} log p(z_i = u), log p by logsumexp
    root3 = math.sqrt(3.0)
    u = torch.rand(d, n_uniform, generator=generator, dtype=z.dtype, device="cpu").to(z.device)
    u = (2 * u - 1) * root3
    gap = (u.unsqueeze(-1) - zs.t().unsqueeze(1)) / sigma             # (d, n_uniform, n)
    log_kernel = -0.5 * gap**2 - math.log(sigma) - _HALF_LOG_2PI
    log_density = torch.logsumexp(log_kernel, dim=-1) - math.log(n)     # (d, n_uniform)
    kl_uni = (-math.log(2 * root3) - log_density.mean(-1)).sum()
    return {"uni": uni, "biv": biv, "kl_uni": kl_uni}


def representation_width(model, on: str) -> int:
    """Width of the latent that :func:`select_representation` reads from ``model`` (checked at bind time)."""
    spec = model.latent_spec
    if on == "mean" and spec.distribution == "gaussian":
        return int(model.n_latents)
    return int(spec.out_features)


def select_representation(ctx: StepContext, on: str) -> torch.Tensor:
    """``mean``: the posterior mean μ of a Gaussian latent (``params["mu"]``), else the latent z itself;
    ``sample`` / ``z``: ``ctx.latent.z`` (a stochastic latent's reparameterised sample in training)."""
    if on == "mean" and "mu" in ctx.latent.params:
        return ctx.latent.params["mu"]
    return ctx.latent.z


def check_representation(owner: str, on: str) -> str:
    if on not in REPRESENTATIONS:
        raise ValueError(f"{owner}.on must be one of {list(REPRESENTATIONS)} (got {on!r})")
    return on


def bind_representation(reg: Regularizer, model, on: str, minimum_width: int, why: str) -> int:
    """Bind-time checks shared by the support regularizers: a sampled latent for ``on=sample``, and enough
    latent dimensions. Returns the width."""
    name = type(reg).__name__
    if on == "sample" and model.latent_spec.distribution is None:
        raise ValueError(f"{name} on=sample needs a stochastic latent, but {model.latent_spec.module} is "
                         f"deterministic; use on=mean or on=z")
    width = representation_width(model, on)
    if width < minimum_width:
        raise ValueError(f"{name} needs at least {minimum_width} latent dimensions ({why}), the model has "
                         f"{width}")
    return width


class Cliff(Regularizer):
    """λ_a · (λ_uni l_uni + λ_biv l_biv + λ_KL-uni l_KL-uni) (Eq. 8; on a β-VAE Eq. 9, on an AE Eq. 17).

    ``weight`` is λ_a; ``uni``, ``biv``, ``kl_uni`` are the term weights (the paper's Shapes3D optimum 0.5 /
    1.0 / 0.7 with σ = 0.1, App. F.4). ``on``: which latent the criterion sees (our choice; the paper does not
    say): ``mean`` = the posterior mean μ of a Gaussian latent (the evaluated representation; Roth et al.'s
    HFS also regularises μ), otherwise z; ``sample`` = the reparameterised sample; ``z`` = whatever the
    decoder receives. ``per_image``: the paper's λ's sit beside a per-image likelihood (Eq. 9 with Roth et
    al.'s summed BCE, Eq. 17's (1/n)‖x - x̂‖²), so the model rescales them like a KL (``model.density_scale``:
    1/D_x beside a per-pixel-mean BCE, 1 beside a summed one); false applies them as given.
    """

    def __init__(self, weight: float = 1.0, uni: float = 0.5, biv: float = 1.0, kl_uni: float = 0.7,
                 sigma: float = 0.1, grid=(-5.0, 5.0, 100), n_conditioning: int = 20, n_uniform: int = 100,
                 on: str = "mean", per_image: bool = True):
        super().__init__(weight)
        self.term_weights = {"uni": check_weight("uni", uni), "biv": check_weight("biv", biv),
                             "kl_uni": check_weight("kl_uni", kl_uni)}
        self.sigma = check_sigma(sigma)
        self.grid = check_grid(grid)
        self.n_conditioning = check_int("n_conditioning", n_conditioning, 1)
        self.n_uniform = check_int("n_uniform", n_uniform, 1)
        self.on = check_representation("Cliff", on)
        self.density_terms = frozenset(self.term_weights) if per_image else frozenset()

    def bind(self, model) -> None:
        super().bind(model)
        bind_representation(self, model, self.on, 2, "its bivariate term compares pairs of latents")

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        return cliff_terms(select_representation(ctx, self.on), sigma=self.sigma, grid=self.grid,
                           n_conditioning=self.n_conditioning, n_uniform=self.n_uniform)
