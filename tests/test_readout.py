"""The readout R² of Schott et al. (ICLR 2022): its known answers, sklearn's where they coincide, and the grid's
variance as the denominator."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import r2_score

from disentangle.metrics.readout import grid_variance, readout_r2

SIZES = [4, 6, 10]


def _grid(sizes):
    return np.stack(np.meshgrid(*[np.arange(n) for n in sizes], indexing="ij"), -1).reshape(-1, len(sizes))


def test_the_grid_variance_is_that_of_the_scaled_classes():
    for n in (2, 3, 10, 40):
        y = np.arange(n) / (n - 1)
        assert grid_variance([n])[0] == pytest.approx(y.var(), rel=1e-12)


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_scored_on_the_whole_grid_it_is_sklearns_r2(kind):
    """On a test set that is the whole grid, the grid's variance is the test set's: R² equals sklearn's r2_score."""
    rng = np.random.default_rng(0)
    factors = _grid(SIZES)
    latents = factors / (np.asarray(SIZES) - 1) @ rng.normal(size=(3, 5)) + 0.3 * rng.normal(size=(len(factors), 5))
    got = readout_r2(latents, factors, latents, factors, SIZES, kind=kind)
    if kind == "linear":
        from sklearn.linear_model import LinearRegression

        predicted = LinearRegression().fit(latents, factors / (np.asarray(SIZES) - 1)).predict(latents)
    else:
        from sklearn.neural_network import MLPRegressor

        predicted = MLPRegressor(hidden_layer_sizes=(128, 128), max_iter=300, early_stopping=True,
                                 random_state=0).fit(latents, factors / (np.asarray(SIZES) - 1)).predict(latents)
    expected = r2_score(factors / (np.asarray(SIZES) - 1), predicted, multioutput="raw_values")
    np.testing.assert_allclose(got["per_factor"], expected, rtol=1e-10, atol=1e-12)
    assert got["mean"] == pytest.approx(expected.mean())


def test_a_readable_code_scores_one_and_noise_scores_nothing():
    rng = np.random.default_rng(1)
    factors = _grid(SIZES)
    held = factors[:, 2] >= 8                                 # extrapolation: the top of the third factor
    code = factors * np.array([0.5, -2.0, 3.0]) + 1.0         # an affine code of the factors
    perfect = readout_r2(code[~held], factors[~held], code[held], factors[held], SIZES)
    np.testing.assert_allclose(perfect["per_factor"], 1.0, atol=1e-9)
    noise = rng.normal(size=(len(factors), 4))
    blind = readout_r2(noise[~held], factors[~held], noise[held], factors[held], SIZES)
    assert max(blind["per_factor"][:2]) < 0.05                # no information: at best the mean
    # the held-out factor sits at its top values: the fitted mean (0.44) misses them by ~0.5, far worse than the
    # grid's spread, and the grid's variance (not the test set's near-zero one) keeps the score finite and negative
    assert blind["per_factor"][2] < -1.5
    assert all(np.isfinite(blind["per_factor"])) and blind["mean"] == pytest.approx(np.mean(blind["per_factor"]))


def test_the_mlp_reads_a_bent_code_the_linear_readout_cannot():
    factors = _grid(SIZES)
    y = factors / (np.asarray(SIZES) - 1)
    folded = np.concatenate([np.abs(y - 0.5), (y > 0.5).astype(float)], axis=1)  # distance to the middle, and side
    linear = readout_r2(folded, factors, folded, factors, SIZES, kind="linear")
    mlp = readout_r2(folded, factors, folded, factors, SIZES, kind="mlp")
    assert mlp["mean"] > 0.99 and linear["mean"] < 0.8     # measured: 0.999 and 0.776


def test_bad_inputs_are_one_line_errors():
    factors = _grid([2, 3])
    with pytest.raises(ValueError, match="kind='svm' is not supported"):
        readout_r2(factors, factors, factors, factors, [2, 3], kind="svm")
    with pytest.raises(ValueError, match="at least 2 classes"):
        readout_r2(factors, factors, factors, factors, [1, 3])
    with pytest.raises(ValueError, match=r"the test set needs \(N, d\) latents and \(N, 2\) factors"):
        readout_r2(factors, factors, factors[:3], factors[:2], [2, 3])
