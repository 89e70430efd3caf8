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
