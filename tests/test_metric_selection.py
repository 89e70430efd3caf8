"""Choosing metrics by name (disentangle.metrics.suite): the dispatcher returns exactly what each metric function
returns, flattened; unknown names fail in one line naming the key and the allowed values; the callback runs the
chosen set at the end and the periodic set in between."""
from __future__ import annotations

import json

import numpy as np
import pytest
import pytorch_lightning as pl
from conftest import FAST, FIGURES, compose_config
from test_metrics_suite import GridModule

from disentangle import metrics as M
from disentangle.errors import ConfigError
from disentangle.metrics.accumulate import disentanglement_metrics
from disentangle.runtime.run import build


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    factors = np.stack([rng.integers(0, k, 600) for k in (3, 4, 5)], axis=1)
    latents = np.concatenate([factors + 0.3 * rng.standard_normal(factors.shape),
                              rng.standard_normal((600, 2))], axis=1)
    return factors, latents


OPTIONS = {"dci": {"max_depth": 4, "n_estimators": 10}, "mcc": {"method": "spearman"}, "mig": {"n_bins": 10}}


def test_metric_names_all_repeats_and_unknown():
    assert M.check_metric_names("all") == M.METRICS
    assert M.check_metric_names(["mig", "dci", "mig"]) == ("mig", "dci")
    assert M.check_metric_names("sap") == ("sap",)
    with pytest.raises(ValueError, match=r"callbacks.evaluation.metrics: unknown \['dcii'\]; choose from \['infomec'"):
        M.check_metric_names(["infomec", "dcii"], key="callbacks.evaluation.metrics")


def test_array_metrics_equal_the_individual_functions(data):
    factors, latents = data
    out = M.array_metrics(latents, factors, discrete_latents=False, metrics=M.ARRAY_METRICS, options=OPTIONS)
    info = M.infomec(factors, latents, discrete_latents=False)
    d = M.dci(factors, latents, **OPTIONS["dci"])
    expected = {
        "infom": info["infom"], "infoe": info["infoe"], "infoc": info["infoc"],
        "dci_d": d["d"], "dci_i": d["i"], "dci_c": d["c"],
        "mig": M.mig(factors, latents, n_bins=10)["mig"],
        "sap": M.sap(factors, latents)["sap"],
        "modularity": M.modularity(factors, latents)["modularity"],
        "explicitness": M.explicitness(factors, latents)["explicitness"],
        "mcc": M.mcc(factors, latents, method="spearman")["mcc"],
    }
    assert {k: out[k] for k in expected} == expected
    assert all(isinstance(out[k], float) for k in expected)
    np.testing.assert_array_equal(out["nmi"], info["nmi"])
    np.testing.assert_array_equal(out["dci_importance"], d["importance"])
    assert out["mcc_matching"].shape == (3, 2) and out["mig_per_source"].shape == (3,)
    # the option changes the value: Pearson and Spearman MCC differ on these latents
    assert M.mcc(factors, latents)["mcc"] != expected["mcc"]
    # only what was asked for; sampled metrics need a data module and are skipped here
    assert set(M.array_metrics(latents, factors, discrete_latents=False, metrics=["mig", "factorvae"])) == {
        "mig", "mig_per_source"}


def test_disentanglement_metrics_adds_reconstruction_means(data):
    factors, latents = data
    mse = np.array([0.01, 0.001])
    out = disentanglement_metrics(latents, factors, discrete_latents=False, metrics=["mcc"],
                                  psnr=M.psnr_from_mse(mse), mse=mse)
    assert out["psnr"] == pytest.approx(25.0) and out["mse"] == pytest.approx(0.0055)
    assert set(out) == {"mcc", "mcc_matching", "psnr", "mse"}


def test_sampled_metrics_dispatch_to_the_score_functions():
    dm = GridModule()
    options = {"factorvae": {"n_train": 60, "n_eval": 40, "batch_size": 8, "n_variance": 200},
               "betavae": {"n_train": 60, "n_eval": 40, "batch_size": 8}}
    out = M.sampled_metrics(dm, dm.oracle, metrics=["mig", "factorvae", "betavae"], options=options)
    assert set(out) == {"factorvae", "betavae"}
    assert out["factorvae"] == M.factorvae_score(dm, dm.oracle, **options["factorvae"])["factorvae"] == 1.0
    assert out["betavae"] == M.betavae_score(dm, dm.oracle, **options["betavae"])["betavae"]


def test_callback_runs_the_chosen_metrics_at_the_end_and_the_periodic_ones_in_between(tmp_path):
    cfg = compose_config(FAST + [FIGURES, "model=ae", "data=shapes2d", "trainer.max_steps=4",
                                 "callbacks.evaluation.metrics=[mig,mcc,factorvae]",
                                 "callbacks.evaluation.periodic_metrics=[modularity]",
                                 "callbacks.evaluation.factorvae.n_train=40",
                                 "callbacks.evaluation.factorvae.n_eval=20",
                                 "callbacks.evaluation.factorvae.n_variance=100",
                                 "callbacks.evaluation.factorvae.batch_size=8"], output_dir=tmp_path)
    pl.seed_everything(0, verbose=False)
    job = build(cfg)
    job.trainer.fit(job.model, datamodule=job.datamodule)
    history = job.evaluation.history
    assert [h["step"] for h in history] == [2, 4]
    assert {"modularity", "psnr", "mse"} <= set(history[0]) and "mig" not in history[0]
    assert {"mig", "mcc", "factorvae", "psnr", "mse"} <= set(history[1]) and "infom" not in history[1]
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["metrics"] == ["mig", "mcc", "factorvae"]
    assert 0 <= record["factorvae"] <= 1 and len(record["mcc_matching"]) == 6
    assert "nmi" not in record and not (tmp_path / "nmi_heatmap.png").exists()  # no InfoMEC, no NMI figure
    assert (tmp_path / "interventions.png").is_file() and (tmp_path / "reconstructions.png").is_file()


def test_callback_rejects_an_unknown_metric_before_training(tmp_path):
    cfg = compose_config(FAST + ["callbacks.evaluation.periodic_metrics=[infomec,bogus]"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"callbacks.evaluation.periodic_metrics: unknown \['bogus'\]"):
        build(cfg)


def test_infomec_auto_options_follow_the_model():
    from disentangle.metrics.suite import ModelFacts, resolve_options

    gpu, cpu = ModelFacts(device="cuda:1"), ModelFacts(device="cpu")
    options = {"infomec": {"device": "auto", "ksg_k": 3}, "dci": {"max_depth": 4}}
    assert resolve_options(options, gpu)["infomec"] == {"device": "cuda:1", "ksg_k": 3}
    assert resolve_options(options, cpu)["infomec"] == {"device": None, "ksg_k": 3}
    assert resolve_options(options, cpu)["dci"] == options["dci"]  # a metric without auto options: as given
    fixed = {"infomec": {"device": None, "infoe_features": "standardize"}}
    assert resolve_options(fixed, ModelFacts(device="cuda:0", categorical=True)) == fixed
    # infoe_features=auto: the representation's choice (one-hot for unordered code indices)
    auto = {"infomec": {"infoe_features": "auto"}}
    assert resolve_options(auto, ModelFacts(categorical=True))["infomec"]["infoe_features"] == "onehot"
    assert resolve_options(auto, cpu)["infomec"]["infoe_features"] == "standardize"
