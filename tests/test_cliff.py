"""Cliff (Barin-Pacela et al. 2025) and its baselines IOSS and HFS: known answers of the criterion's terms,
the loss-landscape study of App. D, invariances, bad input, and short real training runs (spec cliff.md §1,
§6, §8.4, §9)."""
import itertools
import json
import math

import pytest
import torch
from conftest import FAST, compose_config

from disentangle.errors import ConfigError
from disentangle.quantizers.base import LatentOutput
from disentangle.regularizers import (
    IOSS,
    Cliff,
    HausdorffFactorizedSupport,
    StepContext,
    cliff_terms,
    hausdorff_factorized_support,
    ioss,
)
from disentangle.runtime.run import build, train

SIGMA = 0.1
F64 = torch.float64


def terms(z, **kwargs):
    """cliff_terms as floats, with a fixed generator."""
    out = cliff_terms(z, generator=torch.Generator().manual_seed(0), **kwargs)
    return {name: value.item() for name, value in out.items()}


def rotate(z, theta1, theta2):
    """Eq. 16: rows w_k = (cos θ_k, sin θ_k) in degrees."""
    t = [math.radians(theta1), math.radians(theta2)]
    w = torch.tensor([[math.cos(t[0]), math.sin(t[0])], [math.cos(t[1]), math.sin(t[1])]], dtype=z.dtype)
    return z @ w.T


def piecewise_uniform(n, grid_dims=(4, 4), seed=0):
    """Spec §5.1's axis-aligned grid density (ManhattanUniform): cell widths U(0.3, 2.5), cell probabilities
    softmax(randn), so the factors are dependent but every density discontinuity is axis-aligned."""
    g = torch.Generator().manual_seed(seed)
    widths = [0.3 + 2.2 * torch.rand(k, generator=g, dtype=F64) for k in grid_dims]
    edges = [torch.cat([torch.zeros(1, dtype=F64), w.cumsum(0)]) for w in widths]
    priors = torch.softmax(torch.randn(grid_dims[0] * grid_dims[1], generator=g, dtype=F64), 0)
    cell = torch.multinomial(priors, n, replacement=True, generator=g)
    cells = (cell % grid_dims[0], cell // grid_dims[0])
    columns = []
    for axis in range(2):
        low, high = edges[axis][cells[axis]], edges[axis][cells[axis] + 1]
        columns.append(low + (high - low) * torch.rand(n, generator=g, dtype=F64))
    return torch.stack(columns, 1)


def quantiles(edges, probs, k):
    """k evenly spaced quantiles of a 1-D piecewise-uniform density (a noise-free sample of it)."""
    edges, probs = torch.tensor(edges, dtype=F64), torch.tensor(probs, dtype=F64)
    q = (torch.arange(k, dtype=F64) + 0.5) / k
    cdf = torch.cat([torch.zeros(1, dtype=F64), probs.cumsum(0)])
    cell = (torch.searchsorted(cdf, q, right=True) - 1).clamp(0, len(probs) - 1)
    return edges[cell] + (q - cdf[cell]) / probs[cell] * (edges[cell + 1] - edges[cell])


def independent_grid(k1, k2):
    """Independent factors with axis-aligned cliffs, as an exact product set: every slice z_2 = c holds the
    same z_1 values, so every conditional cliff density equals the marginal one."""
    a = quantiles([0.0, 1.0, 1.6, 3.5, 4.2], [0.1, 0.4, 0.2, 0.3], k1)
    b = quantiles([0.0, 2.0, 2.5, 4.0], [0.5, 0.15, 0.35], k2)
    return torch.cartesian_prod(a, b)


# -- univariate term (§1.4) ----------------------------------------------------------------------------------
def test_univariate_term_is_lower_for_piecewise_uniform_factors_than_for_a_gaussian():
    z = piecewise_uniform(2000)
    gaussian = torch.randn(2000, 2, generator=torch.Generator().manual_seed(1), dtype=F64) * z.std(0)
    assert terms(z)["uni"] < 0.6 * terms(gaussian)["uni"]


def test_univariate_term_has_the_closed_form_entropies():
    """Standardised uniform: |p'| is two σ-Gaussian bumps at ±√3, H = log 2 + ½ log(2πeσ²) per factor.
    Gaussian: p = N(0, 1 + σ²), s(t) = |t| exp(-t²/2v) / 2v, whose entropy is ≈ 1.640 per factor (quadrature
    below); the spec's numpy check (§9) printed 3.202 for two factors, n = 5000."""
    u = torch.linspace(-1, 1, 2000, dtype=F64)
    uniform = torch.stack([u, u.flip(0)], 1)
    expected = math.log(2) + 0.5 * math.log(2 * math.pi * math.e * SIGMA**2)
    assert terms(uniform)["uni"] / 2 == pytest.approx(expected, abs=0.03)

    v = 1 + SIGMA**2
    t = torch.linspace(-12, 12, 100001, dtype=F64)
    s = t.abs() * torch.exp(-t**2 / (2 * v)) / (2 * v)
    gaussian_entropy = -(torch.xlogy(s, s) * (t[1] - t[0])).sum().item()
    z = torch.randn(5000, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    uni = terms(z)["uni"]
    assert uni == pytest.approx(2 * gaussian_entropy, abs=0.25)
    assert uni == pytest.approx(3.202, abs=0.2)


def test_univariate_landscape_is_minimal_at_axis_aligned_projections():
    """App. D / Fig. 3 top row: the marginals of an axis-aligned grid density have their sharpest cliffs
    when the projections are the axes (§9: minima at 0° and 90°)."""
    z = piecewise_uniform(1000)
    by_angle = {a: terms(rotate(z, a, a + 90))["uni"] for a in range(0, 180, 15)}
    assert min(by_angle, key=by_angle.get) in (0, 90)
    assert all(by_angle[0] < 0.8 * value for a, value in by_angle.items() if a % 90)


# -- bivariate term (§1.5) -----------------------------------------------------------------------------------
def test_bivariate_term_is_zero_for_independent_axis_aligned_cliffs_and_grows_with_rotation():
    z = independent_grid(30, 25)
    assert terms(z)["biv"] == pytest.approx(0.0, abs=1e-9)
    rotated = [terms(rotate(z, d, 90 + d))["biv"] for d in (0, 2, 5, 10, 20)]
    assert all(a < b for a, b in itertools.pairwise(rotated)), rotated
    assert rotated[-1] > 1.0


def test_bivariate_landscape_is_minimal_at_the_true_angles_and_penalizes_equal_factors():
    """§8.4: the minimum at (0°, 90°) (or its swap); θ1 = θ2 (two copies of one factor) is strongly
    penalized."""
    z = independent_grid(30, 25)
    angles = range(0, 180, 30)
    land = {(a, b): terms(rotate(z, a, b))["biv"] for a in angles for b in angles}
    assert min(land, key=land.get) in ((0, 90), (90, 0))
    assert land[0, 90] < 1e-9
    off_axis = [v for (a, b), v in land.items() if {a, b} != {0, 90}]
    assert min(off_axis) > 0.5
    assert all(land[a, a] > 2.0 for a in angles)


def test_bivariate_sanity_pattern_on_dependent_grid_data():
    """§9 (ManhattanUniform with dependent cells, n = 5000): l_biv(0, 90) ≈ 0.34 is the minimum of the
    listed angles, the diagonal ≈ 2.3-2.6; a standard Gaussian gives ≈ 0.56. The values depend on the random
    grid."""
    z = piecewise_uniform(5000)
    land = {a: terms(rotate(z, *a))["biv"] for a in ((0, 0), (0, 30), (0, 45), (0, 90), (0, 135), (45, 45))}
    assert min(land, key=land.get) == (0, 90)
    assert 0.15 < land[0, 90] < 0.6 and land[0, 0] > 1.2 and land[45, 45] > 1.8
    gaussian = torch.randn(5000, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert 0.3 < terms(gaussian)["biv"] < 0.8


def test_bivariate_term_matches_a_per_pair_loop_over_the_papers_formulas():
    """The vectorised term equals Eq. 3-6 written out pair by pair, with the conditional's 1/p(ζ) included."""
    z = torch.randn(40, 3, generator=torch.Generator().manual_seed(3), dtype=F64) ** 3
    lo, hi, k = -5.0, 5.0, 100
    step = (hi - lo) / k
    t = torch.linspace(lo, hi, k, dtype=F64)
    zs = (z - z.mean(0)) / (z.std(0) + 1e-6)
    zeta = zs[torch.randperm(40, generator=torch.Generator().manual_seed(0))[:7]]

    def phi(x):
        return torch.exp(-0.5 * (x / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi))

    def entropy(q):
        return -step * sum(float(v) * math.log(float(v)) for v in q if v > 0)

    expected = 0.0
    for i in range(3):
        for j in range(3):
            if i == j:
                continue
            rows = []
            for m in range(7):
                w = phi(zeta[m, j] - zs[:, j])
                gap = t[:, None] - zs[None, :, i]
                joint_grad = (-gap / SIGMA**2 * phi(gap) * w).mean(1)
                u = joint_grad.abs() / w.mean()                      # Eq. 3-4
                rows.append(u / (step * u.sum()))                    # Eq. 5
            mixture = torch.stack(rows).mean(0)
            expected += entropy(mixture) - sum(entropy(r) for r in rows) / 7   # Eq. 6
    got = cliff_terms(z, n_conditioning=7, generator=torch.Generator().manual_seed(0))["biv"].item()
    assert got == pytest.approx(expected, rel=1e-9)


# -- anti-collapse term (§1.6) -------------------------------------------------------------------------------
def test_anti_collapse_term_is_near_its_minimum_for_a_standardised_uniform():
    """KL(U(-√3, √3) || U * N(0, σ²)) = -E_U log(Φ((√3-u)/σ) - Φ((-√3-u)/σ)) (only the σ-smoothed edges
    cost), far below a Gaussian's closed form -log(2√3) + ½ log(2π(1+σ²)) + 1/(2(1+σ²)) ≈ 0.177 per factor."""
    r3 = math.sqrt(3)
    u = torch.linspace(-r3, r3, 200001, dtype=F64)
    mass = torch.special.ndtr((r3 - u) / SIGMA) - torch.special.ndtr((-r3 - u) / SIGMA)
    edge_cost = -torch.log(mass).mean().item()
    grid = torch.linspace(-1, 1, 1000, dtype=F64)
    uniform = torch.stack([grid, grid.flip(0)], 1)
    kl = terms(uniform, n_uniform=5000)["kl_uni"]
    assert kl / 2 == pytest.approx(edge_cost, abs=0.005)
    assert kl / 2 < 0.04

    v = 1 + SIGMA**2
    gaussian_kl = -math.log(2 * r3) + 0.5 * math.log(2 * math.pi * v) + 1 / (2 * v)
    z = torch.randn(2000, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert terms(z, n_uniform=5000)["kl_uni"] / 2 == pytest.approx(gaussian_kl, abs=0.03)
    assert terms(piecewise_uniform(2000))["kl_uni"] > 5 * kl


# -- invariances, randomness, gradients ----------------------------------------------------------------------
def test_every_term_is_invariant_to_per_dimension_positive_affine_maps():
    z = piecewise_uniform(300, seed=4)
    z = torch.cat([z, z[:, :1] * z[:, 1:]], 1)
    mapped = z * torch.tensor([0.5, 30.0, 2.0], dtype=F64) + torch.tensor([-3.0, 100.0, 0.7], dtype=F64)
    before, after = terms(z), terms(mapped)
    for name in ("uni", "biv", "kl_uni"):
        assert after[name] == pytest.approx(before[name], rel=1e-5, abs=1e-8), name


def test_conditioning_on_the_whole_batch_makes_the_cliff_terms_independent_of_the_generator():
    z = piecewise_uniform(64, seed=5)
    a = cliff_terms(z, n_conditioning=64, generator=torch.Generator().manual_seed(0))
    b = cliff_terms(z, n_conditioning=500, generator=torch.Generator().manual_seed(99))  # capped at n
    assert torch.equal(a["uni"], b["uni"]) and torch.equal(a["biv"], b["biv"])
    c = cliff_terms(z, n_conditioning=20, generator=torch.Generator().manual_seed(0))
    d = cliff_terms(z, n_conditioning=20, generator=torch.Generator().manual_seed(99))
    assert not torch.equal(c["biv"], d["biv"])  # M < n: a random subset, so the generator matters
    # the KL's uniform draws are the paper's Monte Carlo estimate: fresh per call, close between generators
    assert a["kl_uni"].item() == pytest.approx(b["kl_uni"].item(), abs=0.3)


def test_cliff_terms_are_differentiable_with_respect_to_z():
    z = (torch.randn(12, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 0.7).requires_grad_()

    def total(x):
        out = cliff_terms(x, sigma=0.5, grid=(-4.0, 4.0, 30), n_conditioning=5, n_uniform=20,
                          generator=torch.Generator().manual_seed(0))
        return out["uni"] + out["biv"] + out["kl_uni"]

    assert torch.autograd.gradcheck(total, (z,), eps=1e-6, atol=1e-5)
    z32 = torch.randn(64, 10, generator=torch.Generator().manual_seed(0)).requires_grad_()
    out = cliff_terms(z32)
    sum(out.values()).backward()
    assert torch.isfinite(z32.grad).all() and z32.grad.abs().sum() > 0


def test_a_collapsed_latent_gives_finite_terms_and_gradients_and_a_large_anti_collapse_term():
    z = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    z[:, 1] = 0.5  # a constant latent: zero batch std
    z.requires_grad_()
    out = cliff_terms(z, generator=torch.Generator().manual_seed(0))
    sum(out.values()).backward()
    assert all(torch.isfinite(v) for v in out.values()) and torch.isfinite(z.grad).all()
    spread = z.detach().clone()
    spread[:, 1] = torch.linspace(-1, 1, 16)
    assert out["kl_uni"] > cliff_terms(spread, generator=torch.Generator().manual_seed(0))["kl_uni"] + 10


# -- IOSS and HFS (§6.1, §6.4) -------------------------------------------------------------------------------
def box_and_band(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    box = torch.rand(n, 3, generator=g)
    t = torch.rand(n, generator=g)
    band = torch.stack([t, t + 0.1 * torch.rand(n, generator=g), 1 - t + 0.1 * torch.rand(n, generator=g)], 1)
    return box, band


def test_ioss_is_small_for_a_factorized_support_and_large_for_a_diagonal_band():
    box, band = box_and_band()
    box_score = ioss(box, generator=torch.Generator().manual_seed(0)).item()
    band_score = ioss(band, generator=torch.Generator().manual_seed(0)).item()
    assert box_score < 0.3 and band_score > 1.2  # sums over 3 pairs, in min-max-scaled units (≤ √2 each)
    rescaled = ioss(band * 7 - 2, generator=torch.Generator().manual_seed(0)).item()
    assert rescaled == pytest.approx(band_score, rel=1e-4)


@pytest.mark.parametrize("n, n_draws", [(300, 500), (2500, 2000)])  # distance matrix; k-d tree (> 4e6 pairs)
def test_ioss_matches_differentiating_the_whole_distance_matrix(n, n_draws):
    """ioss picks the robust-max draw without autograd; value and gradient must equal the textbook estimator
    (spec §6.1: the CausalRepID formula) differentiated through every distance."""
    def reference(z, generator):
        pairs = torch.stack([torch.randperm(z.shape[1], generator=generator)[:2] for _ in range(3)])
        scaled = (z - z.min(0).values) / (z.max(0).values - z.min(0).values)
        total = 0.0
        unit = torch.rand(3, n_draws, 2, generator=generator, dtype=z.dtype)
        for p, pair in enumerate(pairs):
            sub = scaled[:, pair]
            k = int(0.01 * len(z)) + 1
            high, low = sub.topk(k, 0).values[-1], -(-sub).topk(k, 0).values[-1]
            draws = low + unit[p] * (high - low)
            total = total + torch.cdist(draws, sub).min(1).values.topk(int(0.01 * n_draws) + 1).values[-1]
        return total

    z = torch.randn(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    z1, z2 = z.clone().requires_grad_(), z.clone().requires_grad_()
    fast = ioss(z1, n_draws=n_draws, generator=torch.Generator().manual_seed(5))
    slow = reference(z2, torch.Generator().manual_seed(5))
    fast.backward()
    slow.backward()
    assert fast.item() == pytest.approx(slow.item(), rel=1e-12)
    assert torch.allclose(z1.grad, z2.grad, atol=1e-12) and z1.grad.abs().sum() > 0


def test_hfs_is_zero_on_a_product_set_and_positive_for_a_diagonal_band():
    grid = torch.linspace(0, 1, 8)
    product = torch.cartesian_prod(grid, grid)
    assert hausdorff_factorized_support(product).item() == 0.0
    # two opposite corners: the recombinations (0, 1) and (1, 0) are at squared distance 1 from the batch
    assert hausdorff_factorized_support(torch.tensor([[0.0, 0.0], [1.0, 1.0]])).item() == pytest.approx(1.0)
    box, band = box_and_band(n=64)
    assert hausdorff_factorized_support(box).item() < 0.3   # 3 pairs (all d(d-1)/2): the largest empty gaps
    assert hausdorff_factorized_support(band).item() > 0.9  # each pair ≈ 0.45 for a band
    one_pair = hausdorff_factorized_support(band, n_pairs=1, generator=torch.Generator().manual_seed(0))
    assert one_pair.item() > 0.2


def test_hfs_equals_the_direct_max_min_over_every_recombination_with_its_gradient():
    """The chunked search + selected-distance graph gives the value and gradient of Roth et al.'s
    dists.min(1).max(0).sum() over the full (n², n, pairs) distance tensor."""
    z = torch.randn(20, 4, generator=torch.Generator().manual_seed(2), dtype=F64).requires_grad_()
    pairs = torch.tensor(list(itertools.combinations(range(4), 2)))
    sub = z[:, pairs]
    recombined = torch.stack([sub[:, None, :, 0].expand(20, 20, 6), sub[None, :, :, 1].expand(20, 20, 6)], -1)
    dists = ((recombined.reshape(400, 1, 6, 2) - sub[None]) ** 2).sum(-1)          # [k·l, r, p]
    expected = dists.min(1).values.max(0).values.sum()
    got = hausdorff_factorized_support(z, n_pairs=6)
    assert got.item() == pytest.approx(expected.item(), rel=1e-12)
    (grad_expected,) = torch.autograd.grad(expected, z)
    (grad_got,) = torch.autograd.grad(got, z)
    assert torch.allclose(grad_got, grad_expected, atol=1e-12)


# -- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"sigma": 0.0}, "sigma must be a number > 0"),
        ({"sigma": -1.0}, "sigma must be a number > 0"),
        ({"grid": (5.0, -5.0, 100)}, "grid must have lo < hi"),
        ({"grid": (1.0, 1.0, 100)}, "grid must have lo < hi"),
        ({"grid": (-5.0, 5.0, 1)}, "grid's n_points must be an integer >= 2"),
        ({"grid": (-5.0, 5.0)}, r"grid must be \[lo, hi, n_points\]"),
        ({"n_conditioning": 0}, "n_conditioning must be an integer >= 1"),
        ({"n_uniform": 0}, "n_uniform must be an integer >= 1"),
    ],
)
def test_bad_cliff_settings_give_one_line_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        cliff_terms(torch.randn(8, 2), **kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=message):
        Cliff(**kwargs)


def test_bad_shapes_and_settings_of_the_baselines_give_one_line_value_errors():
    for call, message in (
        (lambda: cliff_terms(torch.randn(8, 1)),
         r"bivariate Cliff term needs at least 2 latent dimensions \(got d=1\)"),
        (lambda: cliff_terms(torch.randn(8)), r"z must have shape \(n, d\)"),
        (lambda: ioss(torch.randn(8, 1)), "IOSS needs at least 2 latent dimensions"),
        (lambda: ioss(torch.randn(8, 2), robust_fraction=1.0), r"robust_fraction must be in \[0, 1\)"),
        (lambda: hausdorff_factorized_support(torch.randn(8, 1)), "HFS needs at least 2 latent dimensions"),
        (lambda: HausdorffFactorizedSupport(n_pairs=0), "n_pairs must be an integer >= 1"),
        (lambda: IOSS(n_draws=0), "n_draws must be an integer >= 1"),
        (lambda: Cliff(on="posterior"), r"Cliff.on must be one of \['mean', 'sample', 'z'\]"),
        (lambda: Cliff(uni=-1), "uni must be a non-negative number"),
    ):
        with pytest.raises(ValueError, match=message) as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model=ae", "model.n_latents=1", "+regularizer=cliff"],
         r"model.regularizers.cliff: Cliff needs at least 2 latent dimensions .*the model has 1"),
        (["model=ae", "model.n_latents=1", "+regularizer=hfs"],
         "HausdorffFactorizedSupport needs at least 2 latent"),
        (["model=ae", "+regularizer=cliff", "model.regularizers.cliff.on=sample"],
         "Cliff on=sample needs a stochastic latent"),
        (["model=betavae", "+regularizer=cliff", "model.regularizers.cliff.sigma=0"],
         "sigma must be a number > 0"),
    ],
)
def test_bad_cliff_configs_fail_before_training(overrides, message, tmp_path):
    cfg = compose_config(FAST + ["data=shapes2d"] + overrides, output_dir=tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        train(cfg)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


# -- in a model ----------------------------------------------------------------------------------------------
def test_cliff_reads_the_posterior_mean_and_its_weights_follow_eq_8(tmp_path):
    d_x = 3 * 16 * 16
    base = FAST + ["data=shapes2d", "model=betavae", "+regularizer=cliff"]
    job = build(compose_config(base, output_dir=tmp_path))
    _, weights = job.model.loss_terms(torch.rand(8, 3, 16, 16))
    assert weights["uni"] == pytest.approx(0.5 / d_x) and weights["biv"] == pytest.approx(1.0 / d_x)
    assert weights["kl_uni"] == pytest.approx(0.7 / d_x)
    raw = build(compose_config(base + ["model.regularizers.cliff.per_image=false",
                                       "model.regularizers.cliff.weight=2"], output_dir=tmp_path / "raw"))
    _, weights = raw.model.loss_terms(torch.rand(8, 3, 16, 16))
    assert weights["uni"] == pytest.approx(1.0) and weights["kl_uni"] == pytest.approx(1.4)

    g = torch.Generator().manual_seed(0)
    mu, z = torch.randn(32, 4, generator=g), torch.randn(32, 4, generator=g)
    ctx = StepContext(x=torch.zeros(1), pre=torch.zeros(1), logits=torch.zeros(1),
                      latent=LatentOutput(z=z, z_continuous=z, params={"mu": mu}, sample=z))
    for on, seen in (("mean", mu), ("sample", z), ("z", z)):
        torch.manual_seed(0)
        got = Cliff(on=on)(ctx)
        torch.manual_seed(0)
        assert torch.equal(got["biv"], cliff_terms(seen)["biv"]), on


@pytest.mark.parametrize(
    "model, regularizer, names",
    [("betavae", "cliff", ("uni", "biv", "kl_uni")), ("betavae", "hfs", ("hfs",)), ("ae", "ioss", ("ioss",))],
)
def test_short_training_run_logs_the_new_terms(model, regularizer, names, tmp_path):
    # only the final evaluation, DCI only
    quick = ["trainer.max_steps=2", "callbacks.evaluation.every_n_steps=100",
             "callbacks.evaluation.metrics=[dci]", "callbacks.evaluation.figures=false"]
    cfg = compose_config(FAST + quick + [f"model={model}", f"+regularizer={regularizer}", "data=shapes2d"],
                         output_dir=tmp_path)
    train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["method"] == model and math.isfinite(record["dci_d"])
    header, *rows = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    columns = header.split(",")
    for name in names:
        values = [row.split(",")[columns.index(f"train/{name}")] for row in rows]
        values = [float(v) for v in values if v]
        assert values and all(math.isfinite(v) for v in values), name


def test_bench_terms_reports_each_term_against_the_shapes3d_step(capsys):
    from disentangle.bench import main

    main(["terms", "--repeats", "1", "--n", "16", "--d", "3", "--device", "cpu"])
    out = capsys.readouterr().out
    for label in ("step without Cliff", "step with Cliff", "cliff_terms", "ioss", "hfs"):
        assert label in out
    assert "z of shape (16, 3)" in out
