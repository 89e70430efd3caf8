"""Friede et al.: the straight-through gap Δ_ST and its selection command (§7), masked attention and the
semi-supervised label term (§6)."""
import json
import math

import pytest
import torch
from conftest import FAST, compose_config
from hydra.utils import instantiate

from disentangle.errors import ConfigError
from disentangle.quantizers import CategoricalLatent, factor_bins
from disentangle.regularizers import LabelSupervision, binned_cross_entropy, supervised_bce
from disentangle.reporting.selection import straight_through_gap, straight_through_mode
from disentangle.runtime.run import train
from disentangle.select import main as select_main


def _dvae(extra=()):
    cfg = compose_config(FAST + ["model=dvae_friede", "data=shapes2d", *extra])
    return instantiate(cfg.model, in_channels=3, resolution=16)


class Scaled(torch.nn.Module):
    """The encoder with its logits multiplied by ``factor`` (peaked posteriors for large factors)."""

    def __init__(self, encoder, factor):
        super().__init__()
        self.encoder, self.factor = encoder, factor

    def forward(self, x):
        return self.encoder(x) * self.factor


def _batches(n=3, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(size, 3, 16, 16, generator=g) for _ in range(n)]


def test_delta_st_is_zero_for_one_hot_posteriors_and_positive_otherwise():
    torch.manual_seed(0)
    model = _dvae()
    model.encoder = Scaled(model.encoder, 1e4)  # spec §17.6: peaked logits -> soft = hard
    peaked = straight_through_gap(model, _batches())
    assert peaked["delta_st"] == pytest.approx(0.0, abs=1e-3)
    model.encoder.factor = 1e-3  # nearly flat logits: the soft mixture is far from any one-hot code
    flat = straight_through_gap(model, _batches())
    assert flat["delta_st"] > 1.0
    assert flat["delta_st_loss"] == pytest.approx(flat["delta_st_elbo"])  # no TC term: loss = ELBO (§7)
    assert flat["batches"] == 3


def test_straight_through_mode_uses_no_noise_and_restores_the_model():
    model = _dvae()
    model.eval()
    model.latent.noise_scale = 1.7
    x = _batches(1)[0]
    with straight_through_mode(model, hard=True):
        assert model.training and model.latent.hard and model.latent.noise_scale == 0
        z = model.encode(x).z
        assert torch.isin(z, model.latent.values).all()  # hard codes lie on the grid v
        z2 = model.encode(x).z
        assert torch.equal(z, z2)  # no noise
    assert not model.training and not model.latent.hard and model.latent.noise_scale == 1.7


def test_delta_st_rejects_unknown_criteria_and_non_categorical_models():
    with pytest.raises(ValueError, match="choose from loss, elbo"):
        straight_through_gap(_dvae(), _batches(1), criterion="bce")
    cfg = compose_config(FAST + ["model=vae_friede", "data=shapes2d"])
    vae = instantiate(cfg.model, in_channels=3, resolution=16)
    with pytest.raises(ValueError, match="categorical latent"):
        straight_through_gap(vae, _batches(1))


def test_factor_bins_spread_values_over_the_categories():
    assert factor_bins(64, 64).tolist() == list(range(64))
    assert factor_bins(2, 64).tolist() == [0, 63]
    assert factor_bins(4, 64).tolist() == [0, 21, 42, 63]
    assert factor_bins(183, 64).unique().numel() == 64  # more values than categories: bins merge
    assert factor_bins(1, 64).tolist() == [0]


def test_masked_categories_never_appear_in_samples_kl_or_representation():
    torch.manual_seed(0)
    latent = CategoricalLatent(3, n_categories=64, active_counts=[4, 200]).train()
    latent.noise_scale = 2.0
    out = latent(torch.randn(512, 3 * 64) * 3)
    allowed = set(factor_bins(4, 64).tolist())
    assert set(out.indices[:, 0].tolist()) <= allowed
    assert len(set(out.indices[:, 0].tolist())) == 4
    assert len(set(out.indices[:, 1].tolist())) > 4  # k > m: not masked (spec §18 item 9)
    assert torch.isfinite(out.losses["kl"])
    values = latent.values[factor_bins(4, 64)]
    rep = latent.representation(out)
    assert rep[:, 0].min() >= -1 and rep[:, 0].max() <= 1
    # with the noise off and one-hot-like logits (distinct, >= 1000 apart: no near ties), z of latent 0 is one of the
    # 4 active values, even where the largest logit is a masked category
    latent.eval()
    ranks = torch.stack([torch.randperm(3 * 64) for _ in range(256)]).float()
    z0 = latent(ranks * 1e3).z[:, 0]
    assert (z0[:, None] - values).abs().min(1).values.max() < 1e-5


def test_binned_cross_entropy_and_bce_known_values():
    logits = torch.zeros(5, 2, 64)  # uniform categorical: CE = log m per factor and example, summed
    bins = torch.randint(0, 64, (5, 2))
    assert binned_cross_entropy(logits, bins).item() == pytest.approx(10 * math.log(64), rel=1e-6)
    mu = torch.zeros(4, 3)
    assert supervised_bce(mu, torch.full((4, 3), 0.3)).item() == pytest.approx(12 * math.log(2), rel=1e-6)


def test_label_supervision_trains_and_checks_its_budget(tmp_path):
    over = FAST + ["model=dvae_friede_masked", "data=sprites", "+regularizer=supervision",
                   "model.regularizers.supervision.n_labels=10000000"]
    with pytest.raises(ConfigError, match="n_labels=10000000 exceeds the"):
        train(compose_config(over, output_dir=tmp_path / "too_many"))
    with pytest.raises(Exception, match="loss must be one of"):
        train(compose_config(FAST + ["model=dvae_friede", "data=sprites", "+regularizer=supervision",
                                     "model.regularizers.supervision.loss=hinge"], output_dir=tmp_path / "bad"))
    # the Gaussian L2 variant: its learned scale b is trained with the model
    cfg = compose_config(FAST + ["model=vae_friede", "data=sprites", "+regularizer=supervision",
                                 "model.regularizers.supervision.loss=l2",
                                 "model.regularizers.supervision.n_labels=40"], output_dir=tmp_path / "l2")
    from disentangle.runtime.run import build

    job = build(cfg)
    reg = job.model.regularizers["supervision"]
    job.trainer.fit(job.model, datamodule=job.datamodule)
    assert isinstance(reg, LabelSupervision) and reg.loss_kind == "l2"
    assert reg.scale.item() != 1.0
    assert int(reg.steps) == cfg.trainer.max_steps
    assert len(reg.labels["train"]) == 36 and len(reg.labels["validation"]) == 4
    assert (tmp_path / "l2" / "metrics.json").is_file()


def _tiny_run(tmp_path, name, model, seed, extra=()):
    out = tmp_path / name
    train(compose_config(FAST + [f"model={model}", "data=shapes2d", f"seed={seed}",
                                 "callbacks.evaluation.metrics=[mig,infomec]", *extra], output_dir=out))
    return out


def test_select_command_picks_the_smallest_gap_and_lists_what_it_left_out(tmp_path, capsys):
    runs = tmp_path / "runs"
    _tiny_run(runs, "dvae_0", "dvae_friede", 0)
    _tiny_run(runs, "fdvae_1", "factordvae_friede", 1)
    _tiny_run(runs, "vae_0", "vae_friede", 0)
    (runs / "broken").mkdir()
    (runs / "broken" / "metrics.json").write_text("{")
    assert select_main([str(runs), "--criterion", "nope"]) == 2
    assert "unknown 'nope'" in capsys.readouterr().err
    assert select_main([str(runs), "--batches", "2", "--batch-size", "8", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    records = {p: json.loads((runs / p / "metrics.json").read_text()) for p in ("dvae_0", "fdvae_1")}
    gaps = {p: r["delta_st"] for p, r in records.items()}
    best = min(gaps, key=gaps.get)
    assert f"{runs / best}`" in text and "| shapes2d | 2 |" in text
    assert "vae_0`: Δ_ST needs a categorical latent" in text and "broken`: metrics.json unreadable" in text
    assert records["fdvae_1"]["delta_st_settings"] == {"batches": 2, "batch_size": 8, "stream_seed": 42}
    assert (runs / "selection.png").stat().st_size > 1000
    saved = json.loads((runs / "selection.json").read_text())
    assert saved["rows"][0]["key"] == pytest.approx(gaps[best])
    # a second call reuses the stored gaps (same settings) and selects the same run
    assert select_main([str(runs), "--batches", "2", "--batch-size", "8", "--device", "cpu"]) == 0
    assert f"{runs / best}`" in capsys.readouterr().out


def test_select_by_held_out_labels(tmp_path, capsys):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        _tiny_run(runs, f"ss_{seed}", "dvae_friede_masked", seed,
                  ["+regularizer=supervision", "model.regularizers.supervision.n_labels=60"])
    assert select_main([str(runs), "--rule", "labels", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    scores = {s: json.loads((runs / f"ss_{s}" / "metrics.json").read_text())["label_validation_mig"] for s in (0, 1)}
    assert all(0 <= v <= 1 for v in scores.values())
    best = max(scores, key=scores.get)
    assert f"ss_{best}`" in out and "held-out-label MIG" in out
    assert select_main([str(runs), "--rule", "best"]) == 2
