"""Metrics: InfoMEC (Hsu et al. 2023), nonlinear DCI (Eastwood & Williams 2018) and PSNR (spec qlae.md §8).

Sample sizes and forest depths are kept small so the file runs in well under a minute on 2 cores; thresholds
were checked with the fixed seeds used here.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import mutual_info_score

from disentangle.metrics import (
    active_latents,
    dci,
    dci_from_importance,
    infoe,
    infom_infoc,
    infomec,
    nmi_matrix,
    psnr,
    psnr_per_image,
)

N = 4000
CARDINALITIES = (3, 4, 5, 4, 3)  # small so the plug-in MI bias (~(K_i-1)(K_j-1)/2N) stays below 1e-2
FAST_DCI = {"max_depth": 8, "n_estimators": 50}
SCORES = ("infom", "infoe", "infoc")


@pytest.fixture(scope="module")
def sources() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([rng.integers(0, k, N) for k in CARDINALITIES], axis=1)


@pytest.fixture(scope="module")
def entangled(sources: np.ndarray) -> np.ndarray:
    """A partly entangled, partly redundant discrete code: good for invariance tests (no score saturates)."""
    rng = np.random.default_rng(1)
    s = sources.astype(float)
    noise = rng.integers(0, 3, N).astype(float)
    return np.stack([s[:, 0] + 3 * s[:, 1], s[:, 1], s[:, 2], s[:, 2] + noise, s[:, 3], noise], axis=1)


# ------------------------------------------------------------------------------------------------ NMI estimator
def test_discrete_mi_matches_sklearn_plugin(sources: np.ndarray, entangled: np.ndarray) -> None:
    nmi = nmi_matrix(sources, entangled, discrete_latents=True)
    for i in range(sources.shape[1]):
        h = mutual_info_score(sources[:, i], sources[:, i])
        for j in range(entangled.shape[1]):
            assert nmi[i, j] == pytest.approx(
                mutual_info_score(sources[:, i], entangled[:, j]) / h, abs=1e-12
            )


@pytest.mark.parametrize("discrete", [True, False])
def test_nmi_shape_and_range(sources: np.ndarray, entangled: np.ndarray, discrete: bool) -> None:
    latents = (
        entangled if discrete else entangled + 0.1 * np.random.default_rng(2).standard_normal(entangled.shape)
    )
    result = infomec(sources, latents, discrete_latents=discrete)
    nmi = result["nmi"]
    assert nmi.shape == (len(CARDINALITIES), entangled.shape[1])
    assert result["active"].shape == (entangled.shape[1],) and result["active"].dtype == bool
    assert np.all((nmi >= 0) & (nmi <= 1)) and not np.isnan(nmi).any()
    assert nmi[1, 1] > 0.9 and nmi[4, 5] < 0.05  # z1 = s1; the noise latent says nothing about s4


# ------------------------------------------------------------------------------------------ known-answer checks
def test_perfect_discrete_latents(sources: np.ndarray) -> None:
    latents = sources.astype(float)
    result = infomec(sources, latents, discrete_latents=True)
    assert min(result[k] for k in SCORES) >= 0.99
    assert result["active"].all()
    scores = dci(sources, latents, **FAST_DCI)
    assert scores["i"] >= 0.99
    assert scores["d"] >= 0.9 and scores["c"] >= 0.9
    assert scores["importance"].shape == (latents.shape[1], sources.shape[1])
    assert scores["max_depth"] == [8] * sources.shape[1]


def test_perfect_continuous_latents(sources: np.ndarray) -> None:
    latents = sources + 0.05 * np.random.default_rng(3).standard_normal(sources.shape)
    result = infomec(sources, latents, discrete_latents=False)
    assert result["infom"] >= 0.9 and result["infoc"] >= 0.9
    assert result["infoe"] >= 0.9


def test_onehot_infoe_features(sources: np.ndarray) -> None:
    perfect = infomec(sources, sources.astype(float), discrete_latents=True, infoe_features="onehot")
    assert perfect["infoe"] >= 0.99
    # One-hot makes any function of a latent's values linearly decodable; standardised floats cannot express
    # the parity of a latent (classes on alternating values are not intervals of a 1-D linear softmax).
    parity = sources[:, 2:3] % 2
    latent = sources[:, 2:3].astype(float)
    linear = infomec(parity, latent, discrete_latents=True)["infoe"]
    onehot = infomec(parity, latent, discrete_latents=True, infoe_features="onehot")["infoe"]
    assert onehot >= 0.99 and linear <= 0.2


@pytest.mark.parametrize("discrete", [True, False])
def test_random_latents_score_low(sources: np.ndarray, discrete: bool) -> None:
    rng = np.random.default_rng(4)
    latents = rng.integers(0, 10, (N, 8)).astype(float) if discrete else rng.standard_normal((N, 8))
    result = infomec(sources, latents, discrete_latents=discrete)
    assert result["infoe"] <= 0.05
    assert result["nmi"].max() <= 0.05
    scores = dci(sources, latents, **FAST_DCI)
    assert scores["d"] <= 0.2
    assert scores["i"] <= 0.5  # chance level is 1/K_i (0.2–0.33)


def test_duplicated_latents_keep_modularity_lose_compactness(sources: np.ndarray) -> None:
    single = infomec(sources, sources.astype(float), discrete_latents=True)
    doubled = infomec(sources, np.tile(sources.astype(float), 2), discrete_latents=True)
    assert doubled["infom"] >= 0.99
    assert (
        doubled["infoc"] < 0.6 < single["infoc"]
    )  # two equal latents per source: (1/2 − 1/10)/(1 − 1/10) ≈ 0.44
    assert doubled["nmi"].shape == (len(CARDINALITIES), 2 * len(CARDINALITIES))


# ------------------------------------------------------------------------------------------------- invariances
@pytest.mark.parametrize("discrete", [True, False])
def test_infomec_invariant_to_latent_permutation(
    sources: np.ndarray, entangled: np.ndarray, discrete: bool
) -> None:
    latents = (
        entangled if discrete else entangled + 0.1 * np.random.default_rng(5).standard_normal(entangled.shape)
    )
    perm = np.random.default_rng(6).permutation(latents.shape[1])
    base = infomec(sources, latents, discrete_latents=discrete)
    permuted = infomec(sources, latents[:, perm], discrete_latents=discrete)
    for key in SCORES:
        assert permuted[key] == pytest.approx(base[key], abs=1e-4), key
    np.testing.assert_allclose(permuted["nmi"], base["nmi"][:, perm], atol=1e-4)
    assert 0.2 < base["infom"] < 0.99  # the example is not trivially saturated


def test_dci_invariant_to_latent_permutation(sources: np.ndarray, entangled: np.ndarray) -> None:
    perm = np.random.default_rng(7).permutation(entangled.shape[1])
    # The formulas themselves are exactly invariant to reordering importance rows ...
    importance = np.random.default_rng(8).random((6, 5))
    assert dci_from_importance(importance[perm]) == pytest.approx(dci_from_importance(importance), abs=1e-12)
    # ... while the forests draw feature subsets by column index, so refits agree up to Monte-Carlo noise
    # (largest on the redundant latents z0/z1 and z2/z3, which the trees may use interchangeably).
    base = dci(sources, entangled, **FAST_DCI)
    permuted = dci(sources, entangled[:, perm], **FAST_DCI)
    for key in ("d", "c", "i"):
        assert permuted[key] == pytest.approx(base[key], abs=0.03), key
    np.testing.assert_allclose(permuted["importance"], base["importance"][perm], atol=0.15)


# ------------------------------------------------------------------------------------------------ active latents
@pytest.mark.parametrize("discrete", [True, False])
def test_constant_latent_is_inactive_and_ignored(
    sources: np.ndarray, entangled: np.ndarray, discrete: bool
) -> None:
    latents = (
        entangled if discrete else entangled + 0.1 * np.random.default_rng(9).standard_normal(entangled.shape)
    )
    with_constant = np.concatenate([latents[:, :2], np.full((N, 1), 7.0), latents[:, 2:]], axis=1)
    base = infomec(sources, latents, discrete_latents=discrete)
    extra = infomec(sources, with_constant, discrete_latents=discrete)
    assert not extra["active"][2] and extra["active"].sum() == base["active"].sum()
    assert extra["infom"] == pytest.approx(base["infom"], abs=1e-9)
    assert extra["infoc"] == pytest.approx(base["infoc"], abs=1e-9)
    assert np.all(extra["nmi"][:, 2] == 0)


def test_active_rules_on_crafted_latents() -> None:
    rng = np.random.default_rng(10)
    n = 1000
    spiky = np.where(np.arange(n) < 10, 5.0, 0.0)  # range 5, IQR 0
    narrow = rng.integers(0, 2, n) * 0.08  # discrete values {0, 0.08}: IQR 0.08 <= 0.1
    wide = rng.integers(0, 4, n).astype(float)  # IQR 2
    discrete = np.stack([spiky, narrow, wide, np.zeros(n)], axis=1)
    assert active_latents(discrete, discrete_latents=True, active_rule="range").tolist() == [
        True,
        True,
        True,
        False,
    ]
    assert active_latents(discrete, discrete_latents=True, active_rule="iqr").tolist() == [
        False,
        False,
        True,
        False,
    ]

    base = rng.uniform(0, 1, n)  # range ≈ 1, IQR ≈ 0.5
    small = 0.08 * rng.uniform(0, 1, n)  # range ratio ≈ 0.08 > 1/20, IQR ratio ≈ 0.08 < 1/10
    tiny = 0.04 * rng.uniform(0, 1, n)  # range ratio ≈ 0.04 < 1/20
    mid = 0.3 * rng.uniform(0, 1, n)  # IQR ratio ≈ 0.3 > 1/10
    continuous = np.stack([base, small, tiny, mid], axis=1)
    assert active_latents(continuous, discrete_latents=False, active_rule="range").tolist() == [
        True,
        True,
        False,
        True,
    ]
    assert active_latents(continuous, discrete_latents=False, active_rule="iqr").tolist() == [
        True,
        False,
        False,
        True,
    ]

    # the rule feeds through: under "iqr" the narrow latent no longer counts
    src = np.stack([rng.integers(0, 2, n), rng.integers(0, 4, n)], axis=1)
    codes = np.stack([0.08 * src[:, 0], src[:, 1].astype(float)], axis=1)
    by_range = infomec(src, codes, discrete_latents=True)
    by_iqr = infomec(src, codes, discrete_latents=True, active_rule="iqr")
    assert by_range["active"].tolist() == [True, True] and by_iqr["active"].tolist() == [False, True]
    assert by_range["infoc"] >= 0.99
    assert by_iqr["infoc"] == 1.0  # one active latent: InfoC is defined as 1


def test_degenerate_infom_infoc() -> None:
    nmi = np.array([[0.9, 0.0], [0.0, 0.8]])
    assert infom_infoc(nmi, np.array([True, True])) == pytest.approx((1.0, 1.0))
    assert infom_infoc(nmi, np.array([False, False])) == (0.0, 0.0)
    infom, infoc = infom_infoc(nmi, np.array([True, False]))
    assert infoc == 1.0 and infom == pytest.approx(1.0)
    # an active column with no information is dropped from InfoM's mean instead of producing NaN
    assert infom_infoc(np.array([[0.9, 0.0], [0.0, 0.0]]), np.array([True, True]))[0] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------------ bad inputs
def test_single_valued_source_warns_and_is_skipped(sources: np.ndarray, entangled: np.ndarray) -> None:
    with_constant = np.concatenate([sources[:, :2], np.full((N, 1), 3), sources[:, 2:]], axis=1)
    with pytest.warns(RuntimeWarning, match="source 2"):
        result = infomec(with_constant, entangled, discrete_latents=True)
    base = infomec(sources, entangled, discrete_latents=True)
    assert not np.isnan(result["nmi"]).any() and np.all(result["nmi"][2] == 0)
    for key in SCORES:
        assert np.isfinite(result[key]) and result[key] == pytest.approx(base[key], abs=1e-9), key

    with pytest.warns(RuntimeWarning, match="source 2"):
        scores = dci(with_constant, entangled, max_depth=4, n_estimators=10)
    reference = dci(sources, entangled, max_depth=4, n_estimators=10)
    for key in ("d", "c", "i"):
        assert scores[key] == pytest.approx(reference[key], abs=1e-12), key
    assert not np.isnan(scores["importance"]).any()


def test_invalid_options_raise(sources: np.ndarray) -> None:
    latents = sources.astype(float)
    with pytest.raises(ValueError, match="'range'.*'iqr'"):
        infomec(sources, latents, discrete_latents=True, active_rule="quantile")
    with pytest.raises(ValueError, match="'standardize'.*'onehot'"):
        infomec(sources, latents, discrete_latents=True, infoe_features="raw")
    with pytest.raises(ValueError, match="same number of samples"):
        infomec(sources, latents[:10], discrete_latents=True)


def test_torch_inputs_match_numpy(sources: np.ndarray, entangled: np.ndarray) -> None:
    s, z = sources[:500], entangled[:500]
    from_numpy = infomec(s, z, discrete_latents=True)
    from_torch = infomec(torch.from_numpy(s), torch.from_numpy(z).float(), discrete_latents=True)
    for key in SCORES:
        assert from_torch[key] == pytest.approx(from_numpy[key], abs=1e-6)
    small = {"max_depth": 4, "n_estimators": 10}
    assert dci(torch.from_numpy(s), torch.from_numpy(z), **small)["d"] == pytest.approx(
        dci(s, z, **small)["d"]
    )


# ------------------------------------------------------------------------------------------------------ DCI
def test_dci_formulas() -> None:
    assert dci_from_importance(np.eye(4)) == pytest.approx((1.0, 1.0), abs=1e-8)
    assert dci_from_importance(np.ones((4, 4))) == pytest.approx((0.0, 0.0), abs=1e-8)
    # one latent serving two sources: not disentangled, perfectly complete
    assert dci_from_importance(np.array([[0.5, 0.5], [0.0, 0.0]])) == pytest.approx((0.0, 1.0), abs=1e-6)
    assert dci_from_importance(np.zeros((3, 2))) == pytest.approx((0.0, 0.0), abs=1e-12)  # no NaN
    assert dci_from_importance(np.array([[0.3], [0.7]]))[0] == 1.0  # one source: D := 1
    assert dci_from_importance(np.array([[0.3, 0.7]]))[1] == 1.0  # one latent: C := 1


def test_dci_depth_tuning_picks_from_grid(sources: np.ndarray, entangled: np.ndarray) -> None:
    scores = dci(sources, entangled, depth_grid=(1, 8), n_estimators=20)
    assert len(scores["max_depth"]) == sources.shape[1]
    assert set(scores["max_depth"]) <= {1, 8}
    assert 8 in scores["max_depth"]  # depth-1 stumps cannot separate 4–5 classes through the entangled code
    assert np.allclose(scores["importance"].sum(axis=0), 1.0)


# ------------------------------------------------------------------------------------------------------ PSNR
def test_psnr_known_answer_and_torch_numpy_agree() -> None:
    target = np.random.default_rng(11).uniform(0.2, 0.8, (3, 3, 8, 8))
    recon = target + 0.1
    assert psnr(recon, target) == pytest.approx(20.0, abs=1e-9)
    t_recon, t_target = torch.from_numpy(recon).float(), torch.from_numpy(target).float()
    assert psnr(t_recon, t_target) == pytest.approx(psnr(recon, target), abs=1e-4)
    assert psnr(target, target) == 100.0  # capped instead of inf


def test_psnr_is_mean_of_per_image_values() -> None:
    target = np.zeros((2, 1, 4, 4))
    recon = target.copy()
    recon[0] += 0.1  # 20 dB
    recon[1] += 0.01  # 40 dB
    assert psnr_per_image(recon, target) == pytest.approx([20.0, 40.0])
    assert psnr(recon, target) == pytest.approx(30.0)  # not PSNR of the pooled MSE (≈ 23 dB)
    with pytest.raises(ValueError, match="shapes differ"):
        psnr(recon, target[:1])


def test_no_stray_warnings_on_clean_input(sources: np.ndarray) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        infomec(sources[:1000], sources[:1000].astype(float), discrete_latents=True, infoe_features="onehot")


# ------------------------------------------------------------------------------------------------ fast paths
def test_truncated_forest_equals_refit_when_trees_are_deterministic() -> None:
    """With every feature considered at every split and no bootstrap, a tree grown to depth d is exactly the full
    tree cut at depth d: importances and probabilities must match sklearn's refit to float precision. (Deeper down,
    small nodes have exactly tied splits that sklearn breaks by its random feature order, so depths stay shallow.)"""
    from sklearn.ensemble import RandomForestClassifier

    from disentangle.metrics.dci import forest_depth_profile

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 5))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] + 0.5 * x[:, 2] > 0.3) + (x[:, 3] > 1)
    x_test = rng.normal(size=(200, 5))

    def forest(depth):
        return RandomForestClassifier(
            n_estimators=3, max_features=None, bootstrap=False, criterion="entropy", max_depth=depth, random_state=0
        ).fit(x, y)

    full = forest(None)
    depths = [1, 2, 3, 4, None]
    importance, proba = forest_depth_profile(full, x_test, depths)
    for k, depth in enumerate(depths):
        refit = forest(depth)
        np.testing.assert_allclose(importance[k], refit.feature_importances_, atol=1e-12)
        np.testing.assert_allclose(proba[k], refit.predict_proba(x_test), atol=1e-12)
    assert not np.allclose(importance[0], importance[-1])  # the depths really differ


def test_fast_dci_agrees_with_refitting_every_depth() -> None:
    from disentangle.metrics.synthetic import synthetic_representation

    s, z = synthetic_representation(2000, (3, 4, 5, 4), 8, n_inactive=1, seed=0)
    kwargs = {"n_estimators": 30, "depth_grid": (2, 4, 8, None)}
    fast = dci(s, z, depth_search="truncate", **kwargs)
    refit = dci(s, z, depth_search="refit", **kwargs)
    for key in ("d", "i", "c"):
        assert fast[key] == pytest.approx(refit[key], abs=0.03)


@pytest.mark.parametrize("discrete", [True, False])
def test_infomec_agrees_with_straightforward_sklearn(discrete: bool) -> None:
    from disentangle.metrics.reference import infomec_reference
    from disentangle.metrics.synthetic import synthetic_representation

    s, z = synthetic_representation(1500, (3, 4, 5), 6, n_inactive=1, discrete=discrete, noise=0.1, seed=1)
    ours = infomec(s, z, discrete_latents=discrete)
    reference = infomec_reference(s, z, discrete_latents=discrete)
    for key in SCORES:
        assert ours[key] == pytest.approx(reference[key], abs=0.01)
    np.testing.assert_allclose(ours["nmi"], reference["nmi"], atol=1e-6 if discrete else 0.02)


def test_torch_device_path_matches_sklearn(sources: np.ndarray, entangled: np.ndarray) -> None:
    """The GPU code path (torch bincount MI tables, torch L-BFGS logistic regression), run here on the CPU."""
    cpu = infomec(sources, entangled, discrete_latents=True)
    torch_path = infomec(sources, entangled, discrete_latents=True, device="cpu")
    np.testing.assert_allclose(torch_path["nmi"], cpu["nmi"], atol=1e-12)
    assert torch_path["infoe"] == pytest.approx(cpu["infoe"], abs=0.005)
    # "auto" picks the GPU when torch sees one and the numpy path otherwise
    auto = infomec(sources, entangled, discrete_latents=True, device="auto")
    expected = torch_path if torch.cuda.is_available() else cpu
    assert auto["infoe"] == pytest.approx(expected["infoe"], abs=1e-3)


# ------------------------------------------------------------------------------------------------ invariances
def test_strictly_monotone_transform_keeps_mi_based_scores(sources: np.ndarray, entangled: np.ndarray) -> None:
    """Discrete latents: a strictly monotone map relabels the values, so plug-in MI is unchanged exactly.
    Continuous latents: KSG works on ranks-by-distance and is invariant up to estimation noise."""
    base = infomec(sources, entangled, discrete_latents=True)
    warped = infomec(sources, np.exp(entangled) - 7.0, discrete_latents=True)
    np.testing.assert_allclose(warped["nmi"], base["nmi"], atol=1e-12)
    assert (warped["infom"], warped["infoc"]) == pytest.approx((base["infom"], base["infoc"]), abs=1e-12)

    rng = np.random.default_rng(3)
    continuous = sources[:, :3] + 0.3 * rng.normal(size=(N, 3))
    base = nmi_matrix(sources, continuous, discrete_latents=False)
    warped = nmi_matrix(sources, np.sinh(2 * continuous) + continuous**3, discrete_latents=False)
    np.testing.assert_allclose(warped, base, atol=0.03)
    assert np.abs(warped - base).max() > 0  # a real recomputation, not the same array


def test_latents_equal_to_sources_are_perfect_for_dci(sources: np.ndarray) -> None:
    scores = dci(sources, sources.astype(float), n_estimators=30, depth_grid=(2, 8, None))
    assert scores["i"] == pytest.approx(1.0)
    # Not 1: with max_features='sqrt' a split sometimes sees only unrelated latents and credits them a little.
    assert scores["d"] > 0.9 and scores["c"] > 0.9


def test_too_few_samples_give_clear_errors(sources: np.ndarray) -> None:
    with pytest.raises(ValueError, match="KSG estimator needs more than ksg_k=3 samples"):
        infomec(sources[:3], sources[:3].astype(float), discrete_latents=False)
    with pytest.raises(ValueError, match="DCI needs at least 2 training and 1 test sample"):
        dci(sources[:2], sources[:2].astype(float))
    with pytest.raises(ValueError, match="at least 2 samples"):
        infomec(sources[:1], sources[:1].astype(float), discrete_latents=True)


# ------------------------------------------------------------------------------------------------ variants
def test_continuous_sources_use_least_squares_r2() -> None:
    rng = np.random.default_rng(0)
    s = rng.uniform(size=(3000, 2))
    linear = np.column_stack([2 * s[:, 0] + 1, -s[:, 1]])
    score, per_source = infoe(s, linear, discrete_latents=False, continuous_sources=True)
    assert score == pytest.approx(1.0, abs=1e-9)
    noisy = np.column_stack([s[:, 0] + rng.normal(scale=0.1, size=3000), rng.normal(size=3000)])
    _, per_source = infoe(s, noisy, discrete_latents=False, continuous_sources=True)
    # R² of s0 on s0 + noise: var(s0) / (var(s0) + 0.01) with var(U(0,1)) = 1/12
    assert per_source[0] == pytest.approx((1 / 12) / (1 / 12 + 0.01), abs=0.02)
    assert per_source[1] < 0.01
    full = infomec(s, linear, discrete_latents=False, continuous_sources=True)
    assert full["infoe"] == pytest.approx(1.0, abs=1e-9) and full["infom"] > 0.9


def test_gradient_boosted_dci_variant(sources: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    idx = rng.choice(N, 600, replace=False)
    s = sources[idx, :3]
    z = np.column_stack([s, rng.normal(size=(600, 1))])
    scores = dci(s, z, predictor="gbt")
    assert scores["i"] > 0.95 and scores["d"] > 0.9 and scores["c"] > 0.8
    assert scores["importance"][3].sum() < 0.1  # the noise latent gets little importance
    assert scores["max_depth"] == [None, None, None]


def test_weighted_completeness_matches_hand_computation() -> None:
    r = np.array([[0.6, 0.0], [0.2, 0.5], [0.0, 0.1]])
    _, c_mean = dci_from_importance(r, "mean")
    _, c_weighted = dci_from_importance(r, "weighted")

    def entropy3(p):
        q = (p + 1e-11) / (p + 1e-11).sum()
        return -(q * np.log(q)).sum() / np.log(3)

    per_source = np.array([1 - entropy3(r[:, 0]), 1 - entropy3(r[:, 1])])
    assert c_mean == pytest.approx(per_source.mean())
    assert c_weighted == pytest.approx((per_source * np.array([0.8, 0.6]) / 1.4).sum())
    column_normalised = r / r.sum(axis=0)
    assert dci_from_importance(column_normalised, "weighted")[1] == pytest.approx(
        dci_from_importance(column_normalised, "mean")[1]
    )


def test_small_ksg_estimates_run_in_process_and_equal_the_worker_processes(monkeypatch):
    """Below SEQUENTIAL_BELOW samples InfoM's KSG estimates skip joblib's worker processes (their start costs more
    than the estimate); the numbers are the same as on the workers."""
    import importlib

    infomec = importlib.import_module("disentangle.metrics.infomec")  # the module, not the function of its name
    rng = np.random.default_rng(3)
    sources = rng.integers(0, 4, size=(300, 3))
    latents = sources @ rng.normal(size=(3, 5)) + 0.3 * rng.normal(size=(300, 5))
    assert 300 < infomec.SEQUENTIAL_BELOW
    in_process = infomec.nmi_matrix(sources, latents, discrete_latents=False)
    monkeypatch.setattr(infomec, "SEQUENTIAL_BELOW", 0)
    on_workers = infomec.nmi_matrix(sources, latents, discrete_latents=False)
    np.testing.assert_array_equal(in_process, on_workers)
    assert in_process.max() > 0.1
