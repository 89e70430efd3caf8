"""The extending guide's examples (docs/examples/, shown in docs/extending.md) are real: each one attaches from the
config the way the guide says, trains, and does what its docstring claims."""
from __future__ import annotations

import csv
import json
import shlex

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from conftest import FAST, ROOT, compose_config
from test_doc_commands import blocks

from disentangle.runtime.run import build, train

EXAMPLES = ROOT / "docs" / "examples"
SEARCHPATH = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.fixture
def gaussian_tc_registered():
    import gaussian_tc  # registers the metric on import

    from disentangle.metrics.suite import REGISTRY, unregister_metric

    assert "gaussian_tc" in REGISTRY
    yield gaussian_tc
    unregister_metric("gaussian_tc")


def _config(tmp_path, *overrides):
    return compose_config([SEARCHPATH, *FAST, *overrides], output_dir=tmp_path)


def test_the_regularizer_example_attaches_to_any_model_and_adds_its_term(tmp_path):
    cfg = _config(tmp_path, "model=ae", "data=shapes2d", "+regularizer=latent_l1",
                  "model.regularizers.latent_l1.weight=0.5", "callbacks.evaluation.save_latents=true")
    train(cfg)
    with open(tmp_path / "csv" / "metrics.csv") as f:
        logged = [float(row["train/latent_l1"]) for row in csv.DictReader(f) if row.get("train/latent_l1")]
    assert len(logged) == 4 and all(v > 0 for v in logged)
    assert json.loads((tmp_path / "metrics.json").read_text())["step"] == 4
    job = build(_config(tmp_path / "b", "model=betavae", "data=shapes2d", "+regularizer=latent_l1"))
    x = torch.rand(8, 3, 16, 16)
    terms, weights = job.model.loss_terms(x)
    assert weights["latent_l1"] == 0.01 and set(terms) >= {"reconstruction", "kl", "latent_l1"}
    with pytest.raises(Exception, match="LatentL1 on=mean needs a Gaussian latent, not ContinuousLatent"):
        build(_config(tmp_path / "c", "model=ae", "data=shapes2d", "+regularizer=latent_l1",
                      "model.regularizers.latent_l1.on=mean"))


def test_the_regularizer_term_is_the_mean_absolute_latent():
    from latent_l1 import LatentL1

    from disentangle.quantizers import GaussianLatent
    from disentangle.regularizers import StepContext

    out = GaussianLatent(3)(torch.randn(5, 6))
    ctx = StepContext(x=torch.zeros(5, 1, 4, 4), pre=torch.zeros(5, 6), latent=out, logits=None)
    assert LatentL1(on="z")(ctx)["latent_l1"] == out.z.abs().mean()
    assert LatentL1(on="mean")(ctx)["latent_l1"] == out.params["mu"].abs().mean()


def test_the_latent_module_example_gives_binary_codes_the_metrics_treat_as_discrete(tmp_path):
    cfg = _config(tmp_path, "model=ae", "data=shapes2d", "model/latent=binary")
    train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["discrete_latents"] is True and 0 <= record["infom"] <= 1
    pl.seed_everything(0, verbose=False)
    model = build(_config(tmp_path / "b", "model=ae", "data=shapes2d", "model/latent=binary")).model
    z = model.represent(torch.rand(6, 3, 16, 16))
    assert set(z.unique().tolist()) <= {-1.0, 1.0}
    pre = torch.randn(4, model.n_latents, requires_grad=True)
    model.latent(pre).z.sum().backward()  # straight through tanh: d/dx tanh(x) = 1 - tanh(x)^2
    assert torch.allclose(pre.grad, 1 - torch.tanh(pre.detach()) ** 2)


def test_the_dataset_example_renders_its_factors_and_trains(tmp_path):
    from bars import BarsDataModule

    data = BarsDataModule(resolution=32, eval_size=192)
    images, factors = data.gather(torch.tensor([0, 191]))
    assert images.shape == (2, 1, 32, 32) and factors.tolist() == [[0, 0, 0], [7, 7, 2]]
    # row 7 of 8 (4-pixel cells) at width 3: pixel rows 28-30 lit across the image
    assert images[1, 0, 28:31].all() and not images[1, 0, 27, :20].any()
    with pytest.raises(ValueError, match="resolution >= positions x max_width"):
        BarsDataModule(resolution=16)
    cfg = _config(tmp_path, "model=ae", "data=bars", "data.resolution=32")
    train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["factor_names"] == ["row", "column", "width"] and record["n_samples"] == 192


def test_the_metric_example_gets_its_options_from_the_config(tmp_path, gaussian_tc_registered):
    cfg = _config(tmp_path, "model=ae", "data=shapes2d", "callbacks.evaluation.metrics=[infomec,gaussian_tc]",
                  "+callbacks.evaluation.gaussian_tc.eps=0.001", "callbacks.evaluation.save_latents=true")
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    latents = np.load(tmp_path / "latents.npz")["latents"]
    expected = gaussian_tc_registered.gaussian_tc(None, latents, eps=1e-3)["tc"]
    assert record["gaussian_tc"] == pytest.approx(expected, rel=1e-9) and result["gaussian_tc"] == record["gaussian_tc"]
    assert record["metrics"] == ["infomec", "gaussian_tc"] and len(record["gaussian_tc_covariance"]) == 12
    assert gaussian_tc_registered.gaussian_tc(None, np.random.default_rng(0).normal(size=(20000, 3)))["tc"] < 1e-3


def test_an_option_for_no_registered_metric_is_refused_in_one_line(tmp_path):
    cfg = _config(tmp_path, "+callbacks.evaluation.gaussian_tc.eps=0.001")
    with pytest.raises(Exception, match=r"callbacks.evaluation.gaussian_tc: not an option nor a registered metric"):
        build(cfg)


def test_the_guide_command_composes_all_three_config_examples_within_its_budget():
    """The guide's command, as printed (tests/test_doc_commands.py runs it verbatim from a mirror of the checkout):
    the examples' config folder on Hydra's search path, their code on PYTHONPATH, a data config with its own name
    (what the run directory and the models' per-dataset values need) and a step budget of seconds."""
    (block,) = [b for b in blocks(ROOT / "docs" / "extending.md") if b.illustrative is None]
    ((_, command),) = block.commands
    assert block.from_root and command.startswith("PYTHONPATH=docs/examples python -m disentangle.train ")
    overrides = [o.replace("$PWD", str(ROOT)) for o in shlex.split(command)[4:]]
    assert overrides[0] == SEARCHPATH
    cfg = compose_config(overrides)
    assert cfg.data.name == "bars" and cfg.data._target_ == "bars.BarsDataModule"
    assert cfg.model.latent._target_ == "binary_latent.BinaryLatent"
    assert cfg.model.regularizers.latent_l1._target_ == "latent_l1.LatentL1"
    assert cfg.trainer.max_steps <= 50 and cfg.model.arch.encoder._target_.endswith("SmallEncoder")
