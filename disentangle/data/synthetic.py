"""Data with axis-aligned density discontinuities for Cliff (Cliff paper §3.1, App. E, F.2, F.3, G.1).

**The grid density** (Barin-Pacela et al. 2024's ``ManhattanUniform``, ``testdistr.py`` of their code,
``facebookresearch/quantized_identifiability``, which Cliff paper §3.1 reuses): a piecewise-uniform density on
an axis-aligned grid of cells. Along axis i there are ``grid_dims[i]`` cells; its ``grid_dims[i] + 1``
separators start at ``corner`` and are spaced by i.i.d. U(min_spacing, max_spacing) gaps (the two outer ones
are the support's edges).
Each cell has a probability (``priors``: ``"random"`` = softmax of standard normals, the generator's default;
``"diagonal"`` = the 2024 "factorized support" builder, which favours the diagonal cells; ``"uniform"``) and is
uniform inside. The factors are thus dependent, but every discontinuity of the density lies on an axis-aligned
hyperplane through a separator: exactly the assumption of the identifiability theory (paper App. C).
:func:`make_grid_density` draws one (separators, then priors, from one seeded generator);
:func:`grid_density_sample` samples it.

**The nonlinear mixing** (Cliff paper App. G.1): ``x = B tanh(A (0.5 u))`` with tanh elementwise, where u is z
mapped affinely from the support box onto ``[-input_range, input_range]`` per axis (``input_range=None``:
u = z, the formula as printed). The paper states neither A, B nor the scaling, so these are our choice: A and
B are square matrices with i.i.d. U(-1/sqrt(d), 1/sqrt(d)) entries (the distribution of a bias-free
``nn.Linear(d, d)``'s default initialisation, which the 2024 code uses for its linear mixing), drawn from a
generator seeded by ``mix_seed`` (A first, then B), each redrawn until its 2-norm condition number is at most
``max_condition`` (a near-singular draw would make the map numerically non-injective). Rescaling z first keeps
tanh out of saturation: the raw z of the 2024 generator reaches ~10, where tanh(A(0.5 z)) is flat to float32
precision. With the default ``input_range=3`` the argument of tanh stays within ±2.1 (|u| <= 3,
entries <= 1/sqrt(2)): a visibly bent but well-conditioned warp.

**Factors for the metrics.** The true z are continuous; the evaluation pipeline stores factors as int64
(:class:`~disentangle.metrics.accumulate.LatentFactorAccumulator`), so the data modules hand out z in fixed point:
each coordinate is snapped to a lattice of :data:`FACTOR_LEVELS` values spanning its support,
``k = round((z - lo) / (hi - lo) * (FACTOR_LEVELS - 1))``, and the observations are made from the snapped values
(:meth:`GridDensity.snap`). The factor index is an affine function of the true coordinate, so MCC (Pearson or
Spearman) on the indices is MCC on the continuous z; the snapping moves z by at most 5e-7 of its range.
``factor_sizes`` is then ``FACTOR_LEVELS`` per factor: the lattice, not a set of classes (metrics that treat
factors as classes, DCI, MIG, InfoMEC, are not meaningful on these data; use ``mcc``).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .base import FactorDataModule

__all__ = [
    "COUPLINGS",
    "FACTOR_LEVELS",
    "PRIORS",
    "BallsDataModule",
    "Cliff2dDataModule",
    "GridDensity",
    "grid_density_sample",
    "make_grid_density",
    "mix",
    "mixing_matrices",
]

FACTOR_LEVELS = 1 << 20   # fixed-point lattice per factor (see the module doc)
PRIORS = ("random", "diagonal", "non_factorized", "uniform")
# Barin-Pacela et al.'s CLeaR 2024 builder of 2-D data with non-factorized support
# (build_2D_dataset_non_factorized_support in testdistr.py of facebookresearch/quantized_identifiability): a 4 x 4 grid whose cell probabilities are
# softmax(randn(16)) from a generator seeded 67280421310721, the diagonal cells then set to these values and the
# listed cells zeroed (flat indices, the first axis fastest), all renormalised
NON_FACTORIZED_SEED = 67280421310721
NON_FACTORIZED_DIAGONAL = {0: 0.26, 5: 0.24, 10: 0.27, 15: 0.23}
NON_FACTORIZED_EMPTY = (2, 3, 8, 12, 13)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer (got {value!r})")
    return int(value)


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class GridDensity:
    """A piecewise-uniform density on an axis-aligned grid (Barin-Pacela et al. 2024; Cliff paper §3.1).

    ``separators[i]``: float64 (grid_dims[i] + 1,) increasing positions along axis i (outer two = support edges).
    ``priors``: float64 (prod(grid_dims),) cell probabilities; flat cell k has coordinates
    ``c_i = (k // prod(grid_dims[:i])) % grid_dims[i]`` (the first axis varies fastest, as in the 2024 code).
    """

    separators: tuple[torch.Tensor, ...]
    priors: torch.Tensor

    @property
    def grid_dims(self) -> tuple[int, ...]:
        return tuple(len(s) - 1 for s in self.separators)

    @property
    def dim(self) -> int:
        return len(self.separators)

    @property
    def low(self) -> torch.Tensor:
        """(d,) lower edge of the support box."""
        return torch.stack([s[0] for s in self.separators])

    @property
    def high(self) -> torch.Tensor:
        """(d,) upper edge of the support box."""
        return torch.stack([s[-1] for s in self.separators])

    def cell_coordinates(self, cells: torch.Tensor) -> torch.Tensor:
        """Flat cell indices (n,) -> (n, d) per-axis cell coordinates (first axis fastest)."""
        coords, rest = [], cells
        for size in self.grid_dims:
            coords.append(rest % size)
            rest = torch.div(rest, size, rounding_mode="floor")
        return torch.stack(coords, dim=1)

    def to_lattice(self, z: torch.Tensor) -> torch.Tensor:
        """(n, d) coordinates -> int64 indices on the :data:`FACTOR_LEVELS` lattice of the support box."""
        low, high = self.low.to(z), self.high.to(z)
        k = torch.round((z - low) / (high - low) * (FACTOR_LEVELS - 1))
        return k.clamp_(0, FACTOR_LEVELS - 1).long()

    def from_lattice(self, k: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_lattice`: int64 lattice indices -> float64 coordinates."""
        low, high = self.low.to(k.device), self.high.to(k.device)
        return low + (high - low) * k.double() / (FACTOR_LEVELS - 1)

    def snap(self, z: torch.Tensor) -> torch.Tensor:
        """z moved to the nearest lattice point (at most half a lattice step per coordinate)."""
        return self.from_lattice(self.to_lattice(z))


def make_grid_density(grid_dims: Sequence[int], *, min_spacing: float = 0.3, max_spacing: float = 2.5,
                      corner: float = 0.0, priors: str = "random", prior_seed: int = NON_FACTORIZED_SEED,
                      generator: torch.Generator | None = None) -> GridDensity:
    """Draw a grid density (the 2024 generator's procedure and defaults).

    Separators: along each axis in turn, ``corner`` then cumulative U(min_spacing, max_spacing) gaps. Priors:
    ``"random"`` softmax(randn(n_cells)); ``"diagonal"`` (square grids only) the 2024 "factorized support"
    builder: p = softmax(randn) / 5, the diagonal cells set to 0.25, then softmax(10 p); ``"non_factorized"``
    (4 x 4 only) the 2024 non-factorized-support builder: softmax(randn(16)) from its own generator seeded
    ``prior_seed`` (theirs: :data:`NON_FACTORIZED_SEED`), the diagonal set to 0.26, 0.24, 0.27, 0.23, cells
    2, 3, 8, 12 and 13 zeroed (their support is not a product of intervals), renormalised; ``"uniform"``.
    Everything else is drawn from ``generator`` (float64), so a seed fixes the density.
    """
    if isinstance(grid_dims, (str, bytes)) or not isinstance(grid_dims, Sequence) or len(grid_dims) < 1:
        raise ValueError(f"grid_dims must be a non-empty list of positive integers (got {grid_dims!r})")
    dims = [_positive_int(f"grid_dims[{i}]", n) for i, n in enumerate(grid_dims)]
    lo, hi = _finite("min_spacing", min_spacing), _finite("max_spacing", max_spacing)
    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < min_spacing <= max_spacing (got {min_spacing}, {max_spacing})")
    corner = _finite("corner", corner)
    if priors not in PRIORS:
        raise ValueError(f"priors must be one of {list(PRIORS)} (got {priors!r})")
    if priors == "diagonal" and len(set(dims)) != 1:
        raise ValueError(f"priors='diagonal' needs the same number of cells on every axis (got grid_dims={dims})")
    if priors == "non_factorized" and dims != [4, 4]:
        raise ValueError(f"priors='non_factorized' is the 2024 builder's 4 x 4 grid (got grid_dims={dims})")
    separators = []
    for n in dims:
        gaps = lo + (hi - lo) * torch.rand(n, generator=generator, dtype=torch.float64)
        separators.append(corner + torch.cat([torch.zeros(1, dtype=torch.float64), gaps.cumsum(0)]))
    n_cells = math.prod(dims)
    if priors == "uniform":
        probs = torch.full((n_cells,), 1.0 / n_cells, dtype=torch.float64)
    elif priors == "non_factorized":
        own = torch.Generator().manual_seed(int(prior_seed))
        probs = torch.randn(n_cells, generator=own, dtype=torch.float64).softmax(0)
        for cell, value in NON_FACTORIZED_DIAGONAL.items():
            probs[cell] = value
        probs[list(NON_FACTORIZED_EMPTY)] = 0.0
        probs = probs / probs.sum()
    else:
        probs = torch.randn(n_cells, generator=generator, dtype=torch.float64).softmax(0)
        if priors == "diagonal":
            stride = sum(math.prod(dims[:i]) for i in range(len(dims)))   # flat index of cell (k, k, ..., k) = k * stride
            probs = probs / 5
            probs[torch.arange(dims[0]) * stride] = 0.25
            probs = (10 * probs).softmax(0)
    return GridDensity(tuple(separators), probs)


def grid_density_sample(n: int, density: GridDensity, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """n i.i.d. draws of ``density`` (as the 2024 generator samples): a cell from the priors, then a uniform
    point in it. A pure function of (n, density, generator state); returns float64 (n, d)."""
    n = _positive_int("n", n)
    if not isinstance(density, GridDensity):
        raise ValueError(f"density must be a GridDensity (got {type(density).__name__})")  # noqa: TRY004
    cells = torch.multinomial(density.priors, n, replacement=True, generator=generator)
    coords = density.cell_coordinates(cells)
    u = torch.rand(n, density.dim, generator=generator, dtype=torch.float64)
    columns = []
    for i, sep in enumerate(density.separators):
        left, right = sep[coords[:, i]], sep[coords[:, i] + 1]
        columns.append(left + u[:, i] * (right - left))
    return torch.stack(columns, dim=1)


def mixing_matrices(dim: int, *, seed: int, max_condition: float = 10.0,
                    max_draws: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of the mixing ``x = B tanh(A (0.5 u))`` (Cliff paper App. G.1; our draw, see the module doc):
    float64 (d, d) with i.i.d. U(-1/sqrt(d), 1/sqrt(d)) entries from a generator seeded by ``seed``, A first,
    each redrawn until its condition number is <= ``max_condition``."""
    dim = _positive_int("dim", dim)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be an integer (got {seed!r})")  # noqa: TRY004 (one error type)
    if not _finite("max_condition", max_condition) >= 1:
        raise ValueError(f"max_condition must be >= 1 (got {max_condition})")
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / math.sqrt(dim)
    out = []
    for _ in range(2):
        for _ in range(max_draws):
            m = (2 * torch.rand(dim, dim, generator=gen, dtype=torch.float64) - 1) * bound
            if torch.linalg.cond(m) <= max_condition:
                out.append(m)
                break
        else:
            raise ValueError(f"no {dim}x{dim} draw with condition number <= {max_condition} in {max_draws} tries; "
                             f"raise max_condition")
    return out[0], out[1]


def mix(z: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, low: torch.Tensor | None = None,
        high: torch.Tensor | None = None, input_range: float | None = 3.0) -> torch.Tensor:
    """The ground-truth decoder ``x = B tanh(A (0.5 u))`` (Cliff paper App. G.1) of (n, d) z, computed in z's
    dtype. u = z mapped affinely from the box [low, high] onto [-input_range, input_range] per axis;
    ``input_range=None`` uses u = z (the printed formula)."""
    if z.dim() != 2 or a.shape != (z.shape[1], z.shape[1]) or b.shape[1] != z.shape[1]:
        raise ValueError(f"z must be (n, d) with A (d, d) and B (D, d); got {tuple(z.shape)}, {tuple(a.shape)}, "
                         f"{tuple(b.shape)}")
    if input_range is None:
        u = z
    else:
        if low is None or high is None:
            raise ValueError("mix: input_range needs the support box (low, high)")
        u = (2 * (z - low.to(z)) / (high.to(z) - low.to(z)) - 1) * float(input_range)
    return torch.tanh(0.5 * u @ a.to(z).T) @ b.to(z).T


# ---------------------------------------------------------------------------------------------------------- data
def _check_name(given: object, expected: str) -> None:
    """``data.name`` (what the model configs look their per-dataset values up by) must be the module's own."""
    if given != expected:
        raise ValueError(f"data.name must be {expected!r} for this data module (got {given!r})")


class Cliff2dDataModule(FactorDataModule):
    """Cliff's synthetic experiment (Cliff paper §3.1, App. F.2): ``num_samples`` draws z of a grid
    density, observed through the nonlinear mixing x = B tanh(A(0.5 u)) (module doc). Full-batch training
    (``batch_size = num_samples``) is the paper's protocol.

    Differences from the image data contract (:class:`~disentangle.data.base.FactorDataModule`):

    * an observation is a vector: ``gather`` returns x as float32 (B, D), not (B, C, R, R) images in [0, 1];
      ``num_channels`` = D (the observation's length) and ``resolution`` = 1, so a model built from the data
      module sees ``in_channels * resolution**2 = D`` inputs (use a vector encoder: ``model/arch=mlp_encoder``).
    * factors are the continuous z in fixed point (module doc): int64 lattice indices, ``factor_sizes`` =
      :data:`FACTOR_LEVELS` each; the data set is a fixed sample, not a factorial grid, and ``sampling`` can only
      be ``"epochs"``.
    * the evaluation subset defaults to the whole data set (the paper evaluates on the training points).

    Args:
        num_samples: data set size (paper: 5000). name: must be "cliff2d" (configs look values up by it).
        grid_dims, min_spacing, max_spacing, priors: the grid density (:func:`make_grid_density`).
        density_seed: seeds the density's draw (2024 builders: z_seed = 1). sample_seed: seeds the points.
        prior_seed: seeds the cell probabilities of ``priors="non_factorized"`` (the 2024 builder's own seed).
        mix_seed, max_condition, input_range: the mixing (:func:`mixing_matrices`, :func:`mix`).
        factor_names, factor_sizes: optional checks against the data's.
        batch_size, eval_size (None = num_samples), eval_seed, seed, sampling: as for every data module.
    """

    name = "cliff2d"
    continuous_factors = True

    def __init__(self, num_samples: int = 5000, name: str = "cliff2d", grid_dims: Sequence[int] = (4, 4),
                 min_spacing: float = 0.3, max_spacing: float = 2.5, priors: str = "random", density_seed: int = 1,
                 sample_seed: int = 2, prior_seed: int = NON_FACTORIZED_SEED, mix_seed: int = 0,
                 max_condition: float = 10.0, input_range: float | None = 3.0,
                 factor_names: Sequence[str] | None = None, factor_sizes: Sequence[int] | None = None,
                 eval_size: int | None = None, **kwargs):
        num_samples = _positive_int("data.num_samples", num_samples)
        _check_name(name, self.name)
        super().__init__(eval_size=num_samples if eval_size is None else eval_size, **kwargs)
        if self.sampling != "epochs":
            raise ValueError(f"data.sampling must be 'epochs' for {self.name}: its factors are continuous "
                             f"(got {self.sampling!r})")
        if input_range is not None and not _finite("data.input_range", input_range) > 0:
            raise ValueError(f"data.input_range must be > 0 or null (got {input_range})")
        for key, value in (("data.density_seed", density_seed), ("data.sample_seed", sample_seed),
                           ("data.prior_seed", prior_seed)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{key} must be an integer (got {value!r})")  # noqa: TRY004
        try:
            self.density = make_grid_density(list(grid_dims), min_spacing=min_spacing, max_spacing=max_spacing,
                                             priors=priors, prior_seed=prior_seed,
                                             generator=torch.Generator().manual_seed(int(density_seed)))
            self.mixing = mixing_matrices(self.density.dim, seed=mix_seed, max_condition=max_condition)
        except ValueError as exc:
            raise ValueError(f"data: {exc}") from exc
        z = grid_density_sample(num_samples, self.density, generator=torch.Generator().manual_seed(int(sample_seed)))
        self.factors = self.density.to_lattice(z)
        self.latents = self.density.from_lattice(self.factors)       # float64 true z (snapped)
        self.observations = mix(self.latents, *self.mixing, low=self.density.low, high=self.density.high,
                                input_range=input_range).float()
        d = self.density.dim
        self.factor_names = tuple(f"z{i + 1}" for i in range(d))
        self.factor_sizes = (FACTOR_LEVELS,) * d
        self.num_channels = d
        self.resolution = 1
        self.num_samples = num_samples
        self._check_metadata(factor_names, factor_sizes)

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(observations float32 (B, D), lattice factors int64 (B, d)) on ``indices.device``."""
        cpu = indices.cpu()
        return self.observations[cpu].to(indices.device), self.factors[cpu].to(indices.device)

    def factor_table(self) -> torch.Tensor:
        return self.factors.clone()


COUPLINGS = ("independent", "joint")


class BallsDataModule(FactorDataModule):
    """Cliff's balls data (Cliff paper App. E, F.3): images of two balls whose coordinates
    z = (x1, y1, x2, y2) follow the grid density, rendered on the device by :mod:`.procedural.balls`.

    Coordinates: ``coupling="independent"`` draws each ball's (x, y) i.i.d. from one 2-D grid density with
    ``grid_dims`` cells (the paper: "the same distribution as the latent factors of the synthetic data", with
    4 discontinuities in x and 3 in y per ball); ``"joint"`` draws all four from one 4-D grid density with
    cells ``grid_dims * 2`` (ball 2's position then depends on ball 1's). Our choice: ``grid_dims=[5, 4]``
    counts only the interior separators as the 4 / 3 discontinuities ([3, 2] if the support edges count; the
    paper does not say). The density's support box is mapped affinely onto ``position_range`` (Lachapelle et
    al.'s [0.1, 0.9]) per axis.

    Differences from the image data contract: factors are the continuous coordinates in fixed point (int64
    indices on a :data:`FACTOR_LEVELS` lattice over each axis' support, ``factor_sizes`` = that lattice; use
    MCC); the data set is a fixed sample (``sampling`` must be ``"epochs"``); with ``held_out`` (default; our
    choice, the paper names no split) the evaluation set is ``eval_size`` further draws that training never
    sees (indices ``num_samples`` onwards), else a subset of the training set.

    Args:
        num_samples: training set size (F.3: 20000). name: must be "balls". resolution: image size (64).
        grid_dims, min_spacing, max_spacing, priors: the grid density (:func:`make_grid_density`).
        coupling: ``"independent"`` or ``"joint"`` (above). position_range: [lo, hi] frame range of the centres.
        density_seed, sample_seed: seed the density's draw and the points. held_out: see above.
        factor_names, factor_sizes: optional checks. batch_size, eval_size, eval_seed, seed, sampling: as usual.
    """

    continuous_factors = True
    name = "balls"

    def __init__(self, num_samples: int = 20000, name: str = "balls", resolution: int = 64,
                 grid_dims: Sequence[int] = (5, 4),
                 min_spacing: float = 0.3, max_spacing: float = 2.5, priors: str = "random",
                 coupling: str = "independent", position_range: Sequence[float] = (0.1, 0.9), density_seed: int = 1,
                 sample_seed: int = 2, prior_seed: int = NON_FACTORIZED_SEED, held_out: bool = True,
                 factor_names: Sequence[str] | None = None,
                 factor_sizes: Sequence[int] | None = None, eval_size: int = 5000, **kwargs):
        from .procedural import balls

        num_samples = _positive_int("data.num_samples", num_samples)
        _check_name(name, self.name)
        super().__init__(eval_size=eval_size, **kwargs)
        if self.sampling != "epochs":
            raise ValueError(f"data.sampling must be 'epochs' for {self.name}: its factors are continuous "
                             f"(got {self.sampling!r})")
        if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral) or resolution < 8:
            raise ValueError(f"data.resolution must be an integer >= 8 (got {resolution!r})")
        if coupling not in COUPLINGS:
            raise ValueError(f"data.coupling must be one of {list(COUPLINGS)} (got {coupling!r})")
        if not isinstance(held_out, bool):
            raise ValueError(f"data.held_out must be true or false (got {held_out!r})")  # noqa: TRY004
        bounds = list(position_range) if isinstance(position_range, Sequence) else []
        if len(bounds) != 2 or not _finite("data.position_range", bounds[0]) < _finite("data.position_range", bounds[1]):
            raise ValueError(f"data.position_range must be [lo, hi] with lo < hi (got {position_range!r})")
        lo, hi = float(bounds[0]), float(bounds[1])
        for key, value in (("data.density_seed", density_seed), ("data.sample_seed", sample_seed),
                           ("data.prior_seed", prior_seed)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{key} must be an integer (got {value!r})")  # noqa: TRY004
        dims = list(grid_dims)
        if coupling == "independent" and len(dims) != 2:
            raise ValueError(f"data.grid_dims must have 2 entries (cells along x and y of a ball), got {dims}")
        try:
            self.density = make_grid_density(dims if coupling == "independent" else dims * 2, min_spacing=min_spacing,
                                             max_spacing=max_spacing, priors=priors, prior_seed=prior_seed,
                                             generator=torch.Generator().manual_seed(int(density_seed)))
        except ValueError as exc:
            raise ValueError(f"data: {exc}") from exc
        self.held_out = held_out
        total = num_samples + (self.eval_size if held_out else 0)
        gen = torch.Generator().manual_seed(int(sample_seed))
        if coupling == "independent":   # (n, 2) per draw; the two balls' draws interleave: ball 1, ball 2
            z = grid_density_sample(2 * total, self.density, generator=gen).reshape(total, 4)
            low, high = self.density.low.repeat(2), self.density.high.repeat(2)
        else:
            z = grid_density_sample(total, self.density, generator=gen)
            low, high = self.density.low, self.density.high
        self._low, self._high = low, high
        k = torch.round((z - low) / (high - low) * (FACTOR_LEVELS - 1)).clamp_(0, FACTOR_LEVELS - 1).long()
        self.factors = k                                                   # (total, 4) lattice indices
        self.position_range = (lo, hi)
        self._render = balls.render
        self.factor_names = ("ball1_x", "ball1_y", "ball2_x", "ball2_y")
        self.factor_sizes = (FACTOR_LEVELS,) * 4
        self.num_channels = balls.NUM_CHANNELS
        self.resolution = int(resolution)
        self.num_samples = num_samples
        self._check_metadata(factor_names, factor_sizes)

    def latents(self, factors: torch.Tensor) -> torch.Tensor:
        """Lattice factors -> float64 coordinates in the grid density's units."""
        low, high = self._low.to(factors.device), self._high.to(factors.device)
        return low + (high - low) * factors.double() / (FACTOR_LEVELS - 1)

    def positions(self, factors: torch.Tensor) -> torch.Tensor:
        """Lattice factors -> float32 ball centres (x1, y1, x2, y2) in frame units within ``position_range``."""
        lo, hi = self.position_range
        return (lo + (hi - lo) * (factors.double() / (FACTOR_LEVELS - 1))).float()

    def eval_indices(self) -> torch.Tensor:
        """Held out: the ``eval_size`` draws after the training set, in order; else a subset of the training set."""
        if self.held_out:
            return torch.arange(self.num_samples, self.num_samples + self.eval_size)
        return super().eval_indices()

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(images float32 (B, 3, R, R) in [0, 1], lattice factors int64 (B, 4)) on ``indices.device``."""
        factors = self.factors[indices.cpu()].to(indices.device)
        return self._render(self.positions(factors), self.resolution), factors

    def factor_table(self) -> torch.Tensor:
        return self.factors[: self.num_samples].clone()
