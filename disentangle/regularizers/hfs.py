"""HFS, the Hausdorff factorized-support regularizer (Roth et al. 2023), the Cliff paper's Shapes3D baseline
on a β-VAE (Cliff §3.2, App. F.4; the hard Hausdorff estimator over latent pairs of Roth et al.'s reused
code).

Mixed precision (:mod:`disentangle.foundation.precision`): ``hausdorff_factorized_support`` runs in float32
(minimum distances between recombined pairs) without an island: it is elementwise on the latent island's
float32 output.
"""
from __future__ import annotations

import itertools

import torch

from ..quantizers.base import check_int
from .base import Regularizer, StepContext
from .cliff import bind_representation, check_representation, select_representation


def hausdorff_factorized_support(z: torch.Tensor, *, n_pairs: int = 25,
                                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Σ over latent pairs (a, b) of max_{k, l} min_r ‖(z_ka, z_lb) - (z_ra, z_rb)‖², a scalar (Roth et al.'s
    code).

    For each pair the factorized support is estimated by all n² recombinations of the batch's values of z_a
    and z_b (Roth et al.'s ``full`` estimation); the term is the squared one-sided Hausdorff distance from
    that set to the batch (``hausdorff_hard``). Zero when the batch is the product of its marginal values;
    positive when a recombination is far from every latent. ``n_pairs`` distinct unordered pairs are drawn
    each call (capped at d(d-1)/2, then every pair counts once); draws use ``generator``. Time
    O(n³ · pairs), memory O(n² · pairs) (chunked; only the selected distances enter the graph).
    """
    n_pairs = check_int("n_pairs", n_pairs, 1)
    if z.dim() != 2:
        raise ValueError(f"z must have shape (n, d) (got {tuple(z.shape)})")
    d = z.shape[1]
    if d < 2:
        raise ValueError(f"HFS needs at least 2 latent dimensions (got d={d})")
    all_pairs = torch.tensor(list(itertools.combinations(range(d), 2)))
    if n_pairs < len(all_pairs):
        all_pairs = all_pairs[torch.randperm(len(all_pairs), generator=generator)[:n_pairs]]
    pairs = all_pairs.to(z.device)
    sub = z[:, pairs]                                                       # (n, P, 2)
    first, second, nearest = _farthest_recombinations(sub.detach())
    # the max-min value is the distance of the selected triple, and so is its gradient (as autograd would
    # route it through max and min), without keeping the (n, n, n, P) distance tensor for the backward pass
    columns = torch.arange(sub.shape[1], device=z.device)
    a, b = sub[..., 0], sub[..., 1]
    gap_a = a[first, columns] - a[nearest, columns]
    gap_b = b[second, columns] - b[nearest, columns]
    return (gap_a**2 + gap_b**2).sum()


def _farthest_recombinations(sub: torch.Tensor, chunk_elements: int = 1 << 22):
    """Per pair p, the recombination (k, l) farthest from the batch and the latent r nearest to it:
    argmax_{k, l} min_r (a_k - a_r)² + (b_l - b_r)² with a, b = sub[..., 0], sub[..., 1] of shape (n, P).
    Chunked over k to bound memory."""
    n, n_pairs, _ = sub.shape
    gap_a = (sub[:, None, :, 0] - sub[None, :, :, 0]) ** 2                  # [k, r, p]
    gap_b = (sub[:, None, :, 1] - sub[None, :, :, 1]) ** 2                  # [l, r, p]
    best = torch.full((n_pairs,), -1.0, dtype=sub.dtype, device=sub.device)
    best_k, best_l, best_r = (torch.zeros(n_pairs, dtype=torch.long, device=sub.device) for _ in range(3))
    step = max(1, chunk_elements // (n * n * n_pairs))
    for start in range(0, n, step):
        dists = gap_a[start:start + step, None] + gap_b[None]               # [k, l, r, p]
        nearest, nearest_r = dists.min(2)                                   # [k, l, p]
        value, flat = nearest.flatten(0, 1).max(0)                          # [p]
        better = value > best
        k_local, l_idx = flat // n, flat % n
        r_idx = nearest_r.flatten(0, 1).gather(0, flat[None])[0]
        best = torch.where(better, value, best)
        best_k = torch.where(better, k_local + start, best_k)
        best_l = torch.where(better, l_idx, best_l)
        best_r = torch.where(better, r_idx, best_r)
    return best_k, best_l, best_r


class HausdorffFactorizedSupport(Regularizer):
    """γ · L_HFS on a model's latents (Roth et al.'s loss rec + β KL + γ L_HFS; scale regularizer δ = 0 as
    in their defaults). ``weight`` is γ (Roth et al.'s default 1; the Cliff paper's Shapes3D optimum is γ =
    100 with β = 1, grid {1, 10, 100}, App. F.4). ``on``: ``mean`` = posterior means, as Roth et al.
    (``stats_qzx[0]``); see :class:`~disentangle.regularizers.Cliff`. ``per_image``: γ sits beside Roth et
    al.'s summed BCE, so the model rescales it like a KL (``model.density_scale``); false applies it as
    given.
    """

    def __init__(self, weight: float = 1.0, n_pairs: int = 25, on: str = "mean", per_image: bool = True):
        super().__init__(weight)
        self.n_pairs = check_int("n_pairs", n_pairs, 1)
        self.on = check_representation("HausdorffFactorizedSupport", on)
        self.density_terms = frozenset({"hfs"}) if per_image else frozenset()

    def bind(self, model) -> None:
        super().bind(model)
        bind_representation(self, model, self.on, 2, "it compares pairs of latents")

    def forward(self, ctx: StepContext) -> dict[str, torch.Tensor]:
        z = select_representation(ctx, self.on)
        return {"hfs": hausdorff_factorized_support(z, n_pairs=self.n_pairs)}
