"""MIG, SAP, modularity, explicitness, MCC, MSE and the sampled FactorVAE / BetaVAE scores.

Known answers (oracle latents, hand-computed matrices, independent reference computations) and invariances
(permutations, affine / monotone maps, duplicated latents). Sizes are small so the file runs in seconds on
2 cores; thresholds were checked with the fixed seeds used here.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import mutual_info_score

from disentangle.data.base import FactorDataModule
from disentangle.data.procedural_module import ProceduralDataModule
from disentangle.metrics import (
    betavae_score,
    explicitness,
    factorvae_score,
    mcc,
    mig,
    modularity,
    modularity_from_mi,
    mse,
    sap,
)

N = 4000
CARDINALITIES = (3, 4, 5, 4, 3)


@pytest.fixture(scope="module")
def sources() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([rng.integers(0, k, N) for k in CARDINALITIES], axis=1)


@pytest.fixture(scope="module")
def noisy(sources: np.ndarray) -> np.ndarray:
    """Continuous, partly entangled latents: no score saturates, so invariances are meaningful."""
    rng = np.random.default_rng(1)
    s = sources.astype(float)
    z = s + 0.4 * rng.normal(size=s.shape)
    z[:, 1] += 0.5 * s[:, 2]
    return z


def _one_hot(sources: np.ndarray) -> np.ndarray:
    return np.concatenate([np.eye(k)[sources[:, i]] for i, k in enumerate(CARDINALITIES)], axis=1)


def _with_constant_source(sources: np.ndarray) -> np.ndarray:
    return np.concatenate([sources[:, :2], np.full((len(sources), 1), 7), sources[:, 2:]], axis=1)


# ------------------------------------------------------------------------------------------------------------ MIG
def test_mig_matches_reference_computation(sources: np.ndarray, noisy: np.ndarray) -> None:
    """The spec's recipe written out independently: digitize on histogram edges + sklearn's plug-in MI."""
    out = mig(sources, noisy)
    n_z, n_s = noisy.shape[1], sources.shape[1]
    ref = np.zeros((n_z, n_s))
    for j in range(n_z):
        binned = np.digitize(noisy[:, j], np.histogram(noisy[:, j], 20)[1][:-1])
        for k in range(n_s):
            ref[j, k] = mutual_info_score(sources[:, k], binned)
    np.testing.assert_allclose(out["mi"], ref, atol=1e-12)
    top = np.sort(ref, axis=0)[::-1]
    h = np.array([mutual_info_score(sources[:, k], sources[:, k]) for k in range(n_s)])
    expected = (top[0] - top[1]) / h
    np.testing.assert_allclose(out["per_source"], expected, atol=1e-12)
    assert out["mig"] == pytest.approx(expected.mean(), abs=1e-12)
    assert 0.1 < out["mig"] < 0.9  # entangled but informative


def test_mig_oracle_is_one(sources: np.ndarray) -> None:
    rng = np.random.default_rng(2)
    out = mig(sources, sources.astype(float))
    assert out["mig"] > 0.99  # the second-best MI is only the plug-in bias
    extra = np.concatenate([sources, rng.normal(size=(N, 3))], axis=1)  # more latents than sources
    out = mig(torch.as_tensor(sources), torch.as_tensor(extra))
    assert out["mi"].shape == (8, 5) and out["per_source"].shape == (5,)
    assert out["mig"] > 0.99


def test_mig_discrete_latents_are_binned_too(sources: np.ndarray) -> None:
    codes = (2 * sources - 3).astype(np.int8)  # few unique values, integer dtype
    assert mig(sources, codes)["mig"] > 0.99


def test_mig_twenty_bins_merge_a_forty_class_source() -> None:
    """Known answer: 40 equiprobable classes in 20 equal-width bins keep ln 20 of ln 40 nats."""
    rng = np.random.default_rng(3)
    s = np.stack([np.repeat(np.arange(40), 100), rng.integers(0, 3, 4000)], axis=1)
    out = mig(s, s.astype(float))
    assert out["per_source"][0] == pytest.approx(np.log(20) / np.log(40), abs=5e-3)
    # Cliff/dent's min-max variant bins the sources as well, so latent == source is perfect again.
    assert mig(s, s.astype(float), discretize="minmax")["per_source"][0] == pytest.approx(1.0, abs=5e-3)


def test_mig_invariances(sources: np.ndarray, noisy: np.ndarray) -> None:
    base = mig(sources, noisy)
    perm = np.array([3, 0, 4, 1, 2])
    permuted = mig(sources, noisy[:, perm])
    assert permuted["mig"] == pytest.approx(base["mig"], abs=1e-12)
    np.testing.assert_allclose(permuted["mi"], base["mi"][perm], atol=1e-12)
    # Equal-width bins move with a positive affine map (not with a nonlinear monotone one).
    assert mig(sources, 3.0 * noisy + 7.0)["mig"] == pytest.approx(base["mig"], abs=1e-9)
    # min-max scaling then linspace edges is the same partition, up to rounding at bin edges.
    assert mig(sources, noisy, discretize="minmax")["mig"] == pytest.approx(base["mig"], abs=1e-3)


def test_mig_random_latents_score_low(sources: np.ndarray) -> None:
    assert mig(sources, np.random.default_rng(4).normal(size=(N, 6)))["mig"] < 0.1


def test_mig_skips_single_valued_source(sources: np.ndarray, noisy: np.ndarray) -> None:
    with pytest.warns(RuntimeWarning, match="source 2 has a single value"):
        out = mig(_with_constant_source(sources), noisy)
    assert np.isfinite(out["per_source"]).all() and out["per_source"][2] == 0.0
    assert out["mig"] == pytest.approx(mig(sources, noisy)["mig"], abs=1e-12)
    with pytest.warns(RuntimeWarning):
        assert mig(np.zeros((50, 1)), noisy[:50])["mig"] == 0.0


def test_mig_errors(sources: np.ndarray, noisy: np.ndarray) -> None:
    with pytest.raises(ValueError, match="at least 2 latents"):
        mig(sources, noisy[:, :1])
    with pytest.raises(ValueError, match="n_bins"):
        mig(sources, noisy, n_bins=1)
    with pytest.raises(ValueError, match="discretize"):
        mig(sources, noisy, discretize="quantile")
    with pytest.raises(ValueError, match="at least 2 samples"):
        mig(sources[:1], noisy[:1])
    with pytest.raises(ValueError, match="NaN"):
        mig(sources, np.where(noisy > 3, np.nan, noisy))


# ---------------------------------------------------------------------------------------------------- modularity
def test_modularity_from_mi_known_answers() -> None:
    # latent 0 is about one source (1), latent 1 equally about two (δ = 1 → 0), latent 2 about none (0)
    score, per = modularity_from_mi(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    np.testing.assert_allclose(per, [1.0, 0.0, 0.0])
    assert score == pytest.approx(1 / 3)
    # θ = 4, δ = (4 + 1 − 4) / (4 · 1) = 0.25
    assert modularity_from_mi(np.array([[2.0, 1.0]]))[0] == pytest.approx(0.75)
    # one source: δ would be 0/0; informative latents are trivially modular
    np.testing.assert_allclose(modularity_from_mi(np.array([[0.3], [0.0]]))[1], [1.0, 0.0])


def test_modularity_oracle_duplicates_and_permutations(sources: np.ndarray, noisy: np.ndarray) -> None:
    z = sources.astype(float)
    assert modularity(sources, z)["modularity"] == pytest.approx(1.0, abs=1e-4)
    assert modularity(sources, np.concatenate([z, z], axis=1))["modularity"] == pytest.approx(1.0, abs=1e-4)
    base = modularity(sources, noisy)
    perm = np.array([4, 2, 0, 1, 3])
    permuted = modularity(sources, noisy[:, perm])
    assert permuted["modularity"] == pytest.approx(base["modularity"], abs=1e-12)
    np.testing.assert_allclose(permuted["per_latent"], base["per_latent"][perm], atol=1e-12)
    # latent 1 mixes sources 1 and 2, so it is clearly less modular than the others
    assert base["per_latent"][1] < 0.97 and base["per_latent"][[0, 2, 3, 4]].min() > 0.999
    mixed = np.stack([z[:, 0] + 3 * z[:, 1], z[:, 2]], axis=1)  # latent 0 holds two sources exactly
    assert modularity(sources, mixed)["per_latent"][0] < 0.9


def test_modularity_constant_source_and_latent(sources: np.ndarray) -> None:
    z = np.concatenate([sources.astype(float), np.ones((N, 1))], axis=1)
    with pytest.warns(RuntimeWarning, match="single value"):
        out = modularity(_with_constant_source(sources), z)
    assert np.isfinite(out["per_latent"]).all()
    assert out["per_latent"][-1] == 0.0  # θ = 0 for the constant latent
    assert out["modularity"] == pytest.approx(5 / 6, abs=1e-4)


# -------------------------------------------------------------------------------------------------- explicitness
def test_explicitness_known_answers(sources: np.ndarray) -> None:
    small = sources[:1500]
    assert explicitness(small, _one_hot(small))["explicitness"] == pytest.approx(1.0, abs=1e-9)
    random = explicitness(small, np.random.default_rng(5).normal(size=(1500, 4)))
    assert random["explicitness"] == pytest.approx(0.5, abs=0.05)
    # A 1-D linear score cannot isolate a middle class: raw labels are informative but not fully explicit.
    raw = explicitness(small, small.astype(float))
    assert 0.7 < raw["explicitness"] < 0.95 and raw["per_source"].shape == (5,)


def test_explicitness_explicit_test_split_and_errors(sources: np.ndarray, noisy: np.ndarray) -> None:
    s, z = sources[:1200], noisy[:1200]
    split = explicitness(s[:800], z[:800], sources_test=s[800:], latents_test=z[800:])
    assert 0.6 < split["explicitness"] <= split["explicitness_train"] + 0.05
    with pytest.warns(RuntimeWarning, match="single value"):
        out = explicitness(_with_constant_source(s), z)
    assert out["per_source"][2] == 0.0 and np.isfinite(out["explicitness"])
    one_class_train = s.copy()
    one_class_train[:800, 0] = 0
    with pytest.raises(ValueError, match="single class in the training split"):
        explicitness(one_class_train[:800], z[:800], sources_test=s[800:], latents_test=z[800:])
    with pytest.raises(ValueError, match="both sources_test and latents_test"):
        explicitness(s, z, sources_test=s)


# ----------------------------------------------------------------------------------------------------------- SAP
def test_sap_oracle_random_and_matrix(sources: np.ndarray) -> None:
    s = sources[:2400]
    out = sap(s, s.astype(float))
    scores = out["score_matrix"]
    assert scores.shape == (5, 5)
    np.testing.assert_array_equal(scores.argmax(axis=0), np.arange(5))  # each source's best latent is its own
    assert np.diag(scores).min() > 0.7 and out["sap"] > 0.4
    assert sap(s, np.random.default_rng(6).normal(size=(2400, 5)))["sap"] < 0.05


def test_sap_explicit_split_matches_and_errors(sources: np.ndarray, noisy: np.ndarray) -> None:
    s, z = sources[:1500], noisy[:1500]
    a = sap(s[:1000], z[:1000], sources_test=s[1000:], latents_test=z[1000:])
    b = sap(s[:1000], z[:1000], sources_test=torch.as_tensor(s[1000:]), latents_test=torch.as_tensor(z[1000:]))
    np.testing.assert_allclose(a["score_matrix"], b["score_matrix"])
    # permuting latents permutes the score matrix rows and leaves SAP unchanged
    perm = np.array([2, 4, 0, 3, 1])
    c = sap(s[:1000], z[:1000, perm], sources_test=s[1000:], latents_test=z[1000:, perm])
    np.testing.assert_allclose(c["score_matrix"], a["score_matrix"][perm])
    with pytest.raises(ValueError, match="at least 2 latents"):
        sap(s, z[:, :1])
    with pytest.raises(ValueError, match="at least 4 samples"):
        sap(s[:3], z[:3])
    with pytest.warns(RuntimeWarning, match="single value"):
        out = sap(_with_constant_source(s), z)
    assert out["per_source"][2] == 0.0 and np.isfinite(out["sap"])


# ----------------------------------------------------------------------------------------------------------- MCC
def test_mcc_oracle_permutation_and_signs(sources: np.ndarray, noisy: np.ndarray) -> None:
    out = mcc(sources, sources)
    assert out["mcc"] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_array_equal(out["matching"], np.stack([np.arange(5)] * 2, axis=1))
    perm = np.array([1, 3, 0, 4, 2])
    z = -2.5 * sources[:, perm].astype(float) + 4.0  # permuted, flipped, affine
    out = mcc(sources, z)
    assert out["mcc"] == pytest.approx(1.0, abs=1e-12)
    assert {(j, k) for j, k in out["matching"]} == {(j, perm[j]) for j in range(5)}
    assert mcc(sources, noisy[:, perm])["mcc"] == pytest.approx(mcc(sources, noisy)["mcc"], abs=1e-12)


def test_mcc_matches_reference_correlations(sources: np.ndarray, noisy: np.ndarray) -> None:
    pearson = np.corrcoef(noisy.T, sources.T)[:5, 5:]
    np.testing.assert_allclose(mcc(sources, noisy)["correlation"], np.abs(pearson), atol=1e-12)
    rho = spearmanr(noisy, sources).statistic[:5, 5:]
    out = mcc(sources, noisy, method="spearman")
    np.testing.assert_allclose(out["correlation"], np.abs(rho), atol=1e-12)
    # with this near-diagonal structure the optimal matching is the identity
    assert out["mcc"] == pytest.approx(np.abs(np.diag(rho)).mean(), abs=1e-12)


def test_mcc_spearman_invariant_to_monotone_maps(noisy: np.ndarray) -> None:
    rng = np.random.default_rng(7)
    truth = rng.normal(size=(2000, 3))
    z = truth[:, [2, 0, 1]] + 0.3 * rng.normal(size=(2000, 3))
    warped = np.column_stack([np.exp(z[:, 0]), z[:, 1] ** 3, -np.tanh(z[:, 2])])  # strictly monotone per column
    base = mcc(truth, z, method="spearman")["mcc"]
    assert mcc(truth, warped, method="spearman")["mcc"] == pytest.approx(base, abs=1e-12)
    assert mcc(truth, warped)["mcc"] < mcc(truth, z)["mcc"] - 0.05  # Pearson is not invariant


def test_mcc_unequal_sizes_constant_columns_and_random(sources: np.ndarray) -> None:
    rng = np.random.default_rng(8)
    more = np.concatenate([rng.normal(size=(N, 2)), sources], axis=1)
    out = mcc(sources, more)
    assert out["mcc"] == pytest.approx(1.0, abs=1e-12) and out["matching"].shape == (5, 2)
    fewer = mcc(sources, sources[:, [3, 1]])
    assert fewer["mcc"] == pytest.approx(1.0, abs=1e-12)
    assert {(j, k) for j, k in fewer["matching"]} == {(0, 3), (1, 1)}
    with_constant = np.concatenate([sources, np.full((N, 1), 0.1)], axis=1)
    corr = mcc(sources, with_constant)["correlation"]
    assert np.isfinite(corr).all() and (corr[-1] == 0).all()
    with pytest.warns(RuntimeWarning, match="source 2 has a single value"):
        out = mcc(_with_constant_source(sources), sources)
    assert out["mcc"] == pytest.approx(1.0, abs=1e-12) and 2 not in out["matching"][:, 1]
    assert mcc(sources, rng.normal(size=(N, 5)))["mcc"] < 0.1
    with pytest.raises(ValueError, match="method"):
        mcc(sources, sources, method="kendall")


# ----------------------------------------------------------------------------------------------------------- MSE
def test_mse_known_answer_and_dtype() -> None:
    target = np.zeros((2, 3, 4, 4), dtype=np.float32)
    recon = target.copy()
    recon[0] = 0.5  # image 0: MSE 0.25; image 1: 0
    assert mse(recon, target) == pytest.approx(0.125, abs=1e-15)
    assert mse(torch.as_tensor(recon), torch.as_tensor(target)) == pytest.approx(0.125, abs=1e-15)
    # float64 accumulation: 1e-4 offsets on values near 1e4 would lose digits in float32
    big = np.full((1, 4096), 1e4, dtype=np.float32)
    assert mse(big + np.float32(1.0), big) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="shapes differ"):
        mse(recon, target[:1])


# ------------------------------------------------------------------------------------------- FactorVAE / BetaVAE
class GridModule(FactorDataModule):
    """A tiny factor grid whose 'images' spell out their normalised factors in the first pixels.

    No factor has 2 values: a batch of 8 would then repeat one value with probability 1/128, tying its
    variance with the fixed factor's and costing the oracle a FactorVAE vote (true behaviour, noisy test).

    ``table_order``: store the grid in a permuted row order behind a factor table (like prepared data), so the
    metrics must map factors to indices through ``data.factors``. ``corrupt``: return wrong factors.
    """

    def __init__(self, sizes=(3, 4, 5, 6), table_order=None, corrupt=False):
        super().__init__(eval_size=1)
        self.factor_sizes = tuple(sizes)
        self.factor_names = tuple(f"f{i}" for i in range(len(sizes)))
        self.num_samples = int(np.prod(sizes))
        self.resolution, self.num_channels = 4, 1
        grid = np.stack(np.unravel_index(np.arange(self.num_samples), sizes), axis=1)
        self.table = grid if table_order is None else grid[table_order]
        if table_order is not None:
            self.data = SimpleNamespace(factors=self.table)
        self.corrupt = corrupt
        self.encode_calls = 0

    def gather(self, indices):
        factors = torch.as_tensor(self.table[indices.cpu().numpy()])
        images = torch.zeros(len(indices), 1, 4, 4)
        images.view(len(indices), -1)[:, : factors.shape[1]] = factors / torch.tensor(self.factor_sizes)
        return images, (factors + 1 if self.corrupt else factors)

    def oracle(self, images):
        self.encode_calls += 1
        return images.flatten(1)[:, : len(self.factor_sizes)] * torch.tensor(self.factor_sizes)


class SpyShapes(ProceduralDataModule):
    """shapes2d that remembers which factors each rendered image came from (renders are deterministic)."""

    def __init__(self):
        super().__init__(name="shapes2d", resolution=16)
        self.seen: dict[bytes, np.ndarray] = {}

    def gather(self, indices):
        images, factors = super().gather(indices)
        for image, f in zip(images.numpy(), factors.numpy()):
            self.seen[image.tobytes()] = f
        return images, factors

    def oracle(self, images):
        """Reads the factors back from the pixels alone, through the table of images seen so far."""
        return np.stack([self.seen[image.tobytes()] for image in images.numpy()]).astype(np.float64)


FAST_SAMPLED = {"n_train": 60, "n_eval": 40, "batch_size": 8}


def test_sampled_scores_oracle_on_shapes2d() -> None:
    dm = SpyShapes()
    out = factorvae_score(dm, dm.oracle, n_variance=200, **FAST_SAMPLED)
    assert out["factorvae"] == 1.0 and out["n_active"] == 6
    assert betavae_score(dm, dm.oracle, **FAST_SAMPLED)["betavae"] >= 0.95


def test_sampled_scores_uninformative_encoder_near_chance() -> None:
    dm = GridModule(sizes=(3, 4, 5, 6, 7))
    rng = np.random.default_rng(9)

    def noise(images):
        return rng.normal(size=(len(images), 5))

    fv = factorvae_score(dm, noise, n_train=300, n_eval=200, batch_size=16, n_variance=500)
    assert fv["factorvae"] <= 0.5 and fv["n_active"] == 5
    assert betavae_score(dm, noise, n_train=300, n_eval=200, batch_size=16)["betavae"] <= 0.5
    constant = factorvae_score(dm, lambda images: torch.ones(len(images), 3), **FAST_SAMPLED, n_variance=50)
    assert constant["factorvae"] == 0.0 and constant["n_active"] == 0


def test_sampled_scores_batch_encoding_and_chunk_independence() -> None:
    dm = GridModule()
    big = factorvae_score(dm, dm.oracle, n_variance=300, **FAST_SAMPLED)
    assert big["factorvae"] == 1.0
    assert dm.encode_calls <= 3  # 300 + 100 points x 8 images: one call per ~1024 images, not one per point
    small = factorvae_score(dm, dm.oracle, n_variance=300, encode_batch_size=20, **FAST_SAMPLED)
    np.testing.assert_array_equal(small["global_variance"], big["global_variance"])
    assert small["train_accuracy"] == big["train_accuracy"]
    a = betavae_score(dm, dm.oracle, **FAST_SAMPLED)
    b = betavae_score(dm, dm.oracle, encode_batch_size=1, **FAST_SAMPLED)
    assert a == b and a["betavae"] >= 0.95


def test_sampled_scores_use_factor_table_and_check_gathered_factors() -> None:
    order = np.random.default_rng(10).permutation(360)
    dm = GridModule(table_order=order)
    assert factorvae_score(dm, dm.oracle, n_variance=100, **FAST_SAMPLED)["factorvae"] == 1.0
    # more samples than the dataset holds is fine: factor vectors are drawn with replacement
    assert factorvae_score(dm, dm.oracle, n_variance=1000, n_train=20, n_eval=20)["n_active"] == 4
    bad = GridModule(corrupt=True)
    with pytest.raises(RuntimeError, match="other factors than requested"):
        factorvae_score(bad, bad.oracle, **FAST_SAMPLED)


def test_sampled_scores_single_valued_factor_and_bad_sizes() -> None:
    dm = GridModule(sizes=(3, 1, 4))
    with pytest.warns(RuntimeWarning, match="factor 1 has a single value"):
        out = factorvae_score(dm, dm.oracle, n_variance=100, **FAST_SAMPLED)
    assert out["factorvae"] == 1.0
    with pytest.warns(RuntimeWarning, match="factor 1 has a single value"):
        assert betavae_score(dm, dm.oracle, **FAST_SAMPLED)["betavae"] >= 0.95
    one = GridModule(sizes=(1, 5))
    with warnings.catch_warnings(), pytest.raises(ValueError, match="at least 2 factors"):
        warnings.simplefilter("ignore", RuntimeWarning)
        factorvae_score(one, one.oracle, **FAST_SAMPLED)
    dm = GridModule()
    for kwargs in ({"batch_size": 1}, {"n_train": 0}, {"n_variance": 1}, {"encode_batch_size": 0}):
        with pytest.raises(ValueError, match=">= "):
            factorvae_score(dm, dm.oracle, **{**FAST_SAMPLED, **kwargs})
    with pytest.raises(ValueError, match="n_eval"):
        betavae_score(dm, dm.oracle, n_eval=0)
    with pytest.raises(ValueError, match="single factor"):
        betavae_score(dm, dm.oracle, n_train=1, n_eval=5)
    with pytest.raises(ValueError, match="encode must return"):
        factorvae_score(dm, lambda images: torch.ones(len(images)), **FAST_SAMPLED)
