"""DIP-VAE and AnnealedVAE, and the Locatello et al. rows of Friede et al.'s Tables 1 and 5 (issue 24): the DIP-VAE
penalty against a direct float64 computation, the capacity schedule and its resume, the five models on Locatello et
al.'s protocol training and naming their published rows, their sweeps' grids, bad input in one line."""
from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import FAST, ROOT, compose_config
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf

from disentangle.errors import ConfigError
from disentangle.regularizers import AnnealedCapacity, annealed_capacity, dip_vae_penalty
from disentangle.reporting.compare import Published, method_names
from disentangle.runtime.run import train

NEW_MODELS = ("betavae_friede", "betatcvae_friede", "betatcvae_friede_chen", "dip_vae_i_friede", "dip_vae_ii_friede", "annealed_vae_friede")


# -- DIP-VAE's penalty ------------------------------------------------------------------------------------------
def _direct(mu: np.ndarray, sigma: np.ndarray, variant: str, lambda_od: float, lambda_d: float) -> float:
    """Kumar et al.'s penalty written out entry by entry in float64."""
    b, d = mu.shape
    mean = mu.mean(0)
    cov = np.zeros((d, d))
    for i, j in itertools.product(range(d), range(d)):
        cov[i, j] = sum((mu[n, i] - mean[i]) * (mu[n, j] - mean[j]) for n in range(b)) / b
        if variant == "ii" and i == j:
            cov[i, j] += sum(sigma[n, i] ** 2 for n in range(b)) / b
    off = sum(cov[i, j] ** 2 for i, j in itertools.product(range(d), range(d)) if i != j)
    diag = sum((cov[i, i] - 1) ** 2 for i in range(d))
    return lambda_od * off + lambda_d * diag


@pytest.mark.parametrize("variant", ["i", "ii"])
def test_dip_vae_penalty_matches_a_direct_float64_computation(variant):
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(32, 5, generator=gen, dtype=torch.float64) @ torch.randn(5, 5, generator=gen, dtype=torch.float64)
    sigma = torch.rand(32, 5, generator=gen, dtype=torch.float64) + 0.1
    got = dip_vae_penalty(mu, sigma, variant=variant, lambda_od=2.0, lambda_d=7.0)
    assert got.dim() == 0
    assert got.item() == pytest.approx(_direct(mu.numpy(), sigma.numpy(), variant, 2.0, 7.0), rel=1e-10)
    # float32 inputs (training) agree too
    assert dip_vae_penalty(mu.float(), sigma.float(), variant=variant, lambda_od=2.0, lambda_d=7.0).item() == \
        pytest.approx(got.item(), rel=1e-4)


def test_dip_vae_penalty_is_zero_for_whitened_means_and_positive_for_correlated_ones():
    gen = torch.Generator().manual_seed(1)
    b, d = 64, 6
    x = torch.randn(b, d, generator=gen, dtype=torch.float64)
    q, _ = torch.linalg.qr(x - x.mean(0))          # orthonormal columns, each orthogonal to the ones vector
    whitened = math.sqrt(b) * q + 3.0               # population covariance exactly I, any mean
    assert dip_vae_penalty(whitened, None, variant="i", lambda_od=10.0, lambda_d=100.0).item() == \
        pytest.approx(0.0, abs=1e-18)
    # variant ii adds E[sigma^2] to the diagonal: sigma = s everywhere gives lambda_d * d * s^4
    sigma = torch.full((b, d), 0.5, dtype=torch.float64)
    assert dip_vae_penalty(whitened, sigma, variant="ii", lambda_od=1.0, lambda_d=3.0).item() == \
        pytest.approx(3.0 * d * 0.5**4)
    correlated = whitened.clone()
    correlated[:, 1] = whitened[:, 0] + 0.1 * whitened[:, 1]
    only_od = dip_vae_penalty(correlated, None, variant="i", lambda_od=1.0, lambda_d=0.0)
    assert only_od.item() > 1.0                      # Cov[0, 1] = Cov[1, 0] = 1: at least 2
    assert dip_vae_penalty(correlated, None, variant="i", lambda_od=0.0, lambda_d=1.0).item() > 0  # C_11 = 1.01


def test_dip_vae_penalty_refuses_bad_arguments_in_one_line():
    mu = torch.randn(8, 3)
    for kwargs, message in (({"variant": "iii"}, "variant must be one of"),
                            ({"lambda_od": -1.0}, "lambda_od must be a non-negative number"),
                            ({"lambda_d": float("nan")}, "lambda_d must be a non-negative number")):
        args = {"variant": "i", "lambda_od": 1.0, "lambda_d": 1.0, **kwargs}
        with pytest.raises(ValueError, match=message) as info:
            dip_vae_penalty(mu, None, **args)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="variant 'ii' needs sigma"):
        dip_vae_penalty(mu, None, variant="ii", lambda_od=1.0, lambda_d=1.0)


# -- AnnealedVAE's capacity ---------------------------------------------------------------------------------------
def test_annealed_capacity_rises_linearly_then_stays_at_c_max():
    c = lambda t: annealed_capacity(t, c_max=25.0, iteration_threshold=100_000)
    assert (c(0), c(50_000), c(100_000), c(100_001), c(300_000)) == (0.0, 12.5, 25.0, 25.0, 25.0)
    assert isinstance(c(1), float) and c(1) == pytest.approx(25e-5)
    assert annealed_capacity(10, c_max=0.0, iteration_threshold=5) == 0.0
    for kwargs, message in (({"c_max": -1.0}, "c_max must be a non-negative number"),
                            ({"iteration_threshold": 0}, "iteration_threshold must be a number > 0"),
                            ({"step": -1}, "step must be an integer >= 0")):
        args = {"step": 0, "c_max": 5.0, "iteration_threshold": 10, **kwargs}
        with pytest.raises(ValueError, match=message):
            annealed_capacity(args.pop("step"), **args)


def test_the_annealed_term_replaces_the_latents_kl_with_the_same_kl():
    cfg = compose_config(["model=annealed_vae_friede", "model/arch=small", "data=shapes2d",
                          "model.regularizers.annealed_capacity.iteration_threshold=10"])
    model = instantiate(cfg.model, in_channels=3, resolution=32)
    reg = model.regularizers["annealed_capacity"]
    assert isinstance(reg, AnnealedCapacity) and reg.weight == 1000.0
    terms, weights = model.loss_terms(torch.rand(8, 3, 32, 32))
    assert weights["kl"] == 0 and weights["capacity"] == 0 and weights["capacity_gap"] == 1000.0  # nats per image
    assert terms["capacity"].item() == 0.0                                  # global step 0
    assert terms["capacity_gap"].item() == pytest.approx(terms["kl"].item(), rel=1e-6)  # |KL - 0|, the same KL


def _logged(run_dir: Path, key: str) -> dict[int, float]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as f:
        return {int(float(r["step"])): float(r[key]) for r in csv.DictReader(f) if r.get(key)}


def test_the_capacity_continues_exactly_after_a_resume(tmp_path):
    schedule = ["model=annealed_vae_friede", "data=shapes2d", "+trainer.deterministic=true",
                "model.regularizers.annealed_capacity.c_max=10", "model.regularizers.annealed_capacity.iteration_threshold=5",
                "~callbacks.evaluation"]                       # the logged terms are what this test reads
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train(compose_config([*FAST, *schedule, "trainer.max_steps=6"], output_dir=full))
    train(compose_config([*FAST, *schedule, "trainer.max_steps=4"], output_dir=resumed))
    train(compose_config([*FAST, *schedule, "trainer.max_steps=6", "auto_resume=true"], output_dir=resumed))
    expected = {step: min(10.0, 2.0 * step) for step in range(6)}  # C(t) = min(10, 10 t / 5) at update t
    assert _logged(full, "train/capacity") == _logged(resumed, "train/capacity") == expected
    a, b = _logged(full, "train/capacity_gap"), _logged(resumed, "train/capacity_gap")
    assert a.keys() == b.keys() == expected.keys() and all(b[s] == pytest.approx(a[s], rel=1e-5) for s in a)


# -- the five models on Locatello et al.'s protocol ------------------------------------------------------------------
@pytest.mark.parametrize("model", NEW_MODELS)
def test_each_model_trains_a_few_steps_and_writes_metrics(model, tmp_path):
    fast = [o for o in FAST if not o.startswith("callbacks.evaluation.every_n_steps")]
    train(compose_config([*fast, f"model={model}", "data=shapes2d", "trainer.max_steps=3",
                          "callbacks.evaluation.every_n_steps=0"], output_dir=tmp_path))
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["step"] == 3 and all(math.isfinite(record[k]) for k in ("infom", "dci_d", "psnr"))
    assert len(record["active"]) == 10       # Locatello et al.'s 10 latents on every dataset
    header = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()[0]
    own = {"betatcvae_friede": "train/tc", "betatcvae_friede_chen": "train/tc", "dip_vae_i_friede": "train/dip", "dip_vae_ii_friede": "train/dip",
           "annealed_vae_friede": "train/capacity_gap", "betavae_friede": "train/kl"}[model]
    assert own in header


def test_the_models_follow_locatello_et_al_and_name_their_published_rows():
    cfg = {m: compose_config([f"model={m}", "data=dsprites"]).model for m in NEW_MODELS}
    for m, c in cfg.items():
        assert (c.name, c.n_latents, c.batch_size, c.reconstruction, c.density_scale) == (m, 10, 64, "bce_sum", 1.0)
        assert (c.optimizer.lr, c.latent.scale, c.arch.encoder._target_) == (
            1e-4, "logvar", compose_config(["model=vae_friede"]).model.arch.encoder._target_)
    dip_i, dip_ii = cfg["dip_vae_i_friede"].regularizers.dip_vae, cfg["dip_vae_ii_friede"].regularizers.dip_vae
    assert (dip_i.variant, dip_i.lambda_d_factor, dip_ii.variant, dip_ii.lambda_d_factor) == ("i", 10.0, "ii", 1.0)
    assert cfg["dip_vae_i_friede"].latent.beta == cfg["dip_vae_ii_friede"].latent.beta == 1.0  # KL kept beside
    annealed = cfg["annealed_vae_friede"]
    assert annealed.latent.beta == 0.0 and annealed.regularizers.annealed_capacity.weight == 1000.0
    assert annealed.regularizers.annealed_capacity.iteration_threshold == 100_000
    assert cfg["betatcvae_friede"].latent.beta == 1.0 and cfg["betatcvae_friede_chen"].latent.beta == 0.0
    # report --compare-paper: each model finds its starred row of Friede et al.'s Tables 1 and 5
    from disentangle.published import load_published

    published = Published(load_published("friede", "1") + load_published("friede", "5"))
    expected = {"betavae_friede": ("β-VAE", 0.113), "betatcvae_friede": ("β-TCVAE", 0.176), "betatcvae_friede_chen": ("β-TCVAE", 0.176),
                "dip_vae_i_friede": ("DIP-VAE-I", 0.036), "dip_vae_ii_friede": ("DIP-VAE-II", 0.062),
                "annealed_vae_friede": ("AnnealedVAE", 0.078)}
    for model, (name, mig) in expected.items():
        assert method_names(model)[0] == name
        assert published.lookup(model, "dsprites", "mig")["value"] == mig


LOCATELLO_GRIDS = {  # disentanglement_lib's unsupervised_study_v1/sweep.py (Locatello et al.'s study), spec §13
    "friede_locatello_betavae": ("model.latent.beta", [1, 2, 4, 6, 8, 16]),
    "friede_locatello_betatcvae": ("model.regularizers.tcvae.beta", [1, 2, 4, 6, 8, 10]),
    "friede_locatello_dip_vae": ("model.regularizers.dip_vae.lambda_od", [1, 2, 5, 10, 20, 50]),
    "friede_locatello_annealed_vae": ("model.regularizers.annealed_capacity.c_max", [5, 10, 25, 50, 75, 100]),
}


@pytest.mark.parametrize("sweep", sorted(LOCATELLO_GRIDS))
def test_the_sweeps_hold_locatello_et_als_grids(sweep):
    params = OmegaConf.load(ROOT / "sweeps" / f"{sweep}.yaml").hydra.sweeper.params
    key, grid = LOCATELLO_GRIDS[sweep]
    assert [float(v) for v in str(params[key]).split(",")] == grid
    assert str(params.data).split(",") == ["dsprites", "colour_dsprites", "smallnorb", "cars3d"]
    assert str(params.seed) == "range(0,50)"
    # Locatello et al.'s protocol: 300k steps, and each model's training stream drawn from its own seed
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "sweeps"), version_base="1.3"):
        models = [f"model={m}" for m in str(params.get("model", "")).split(",")[-1:] if m]
        cfg = compose(sweep, overrides=[f"hydra.searchpath=[file://{ROOT / 'conf'}]", *models, "data=cars3d", "seed=7",
                                        "paths.output_dir=/tmp/unused"])
    assert cfg.model.name.endswith("_friede") and cfg.trainer.max_steps == 300_000
    assert cfg.data.seed == 7 and cfg.data.sampling == "uniform_factors"


def _fake_run(root: Path, name: str, model: str, seed: int, lambda_od: float, mig: float) -> None:
    """A run directory as a sweep job writes it (.hydra/config.yaml with interpolations, overrides, metrics.json)."""
    import yaml

    d = root / name
    (d / ".hydra").mkdir(parents=True)
    cfg = {"seed": seed, "data": {"name": "dsprites", "seed": "${seed}"},
           "model": {"name": model, "regularizers": {"dip_vae": {"lambda_od": lambda_od}}}}
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
        [f"model={model}", f"model.regularizers.dip_vae.lambda_od={lambda_od}", "data=dsprites", f"seed={seed}"]))
    (d / "metrics.json").write_text(json.dumps({"mig": mig, "method": model, "data": "dsprites", "step": 300_000}))


def test_report_puts_each_rerun_row_beside_its_starred_value(tmp_path, capsys):
    """The DIP-VAE sweep's directory: its # Report: rule pools λ_od with the seeds (median and quartiles), and
    --compare-paper friede:5 finds the DIP-VAE-I* / DIP-VAE-II* rows."""
    import yaml

    from disentangle.report import main as report_main

    root = tmp_path / "multirun"
    root.mkdir()
    sources = [{"path": str(ROOT / "sweeps"), "schema": "file", "provider": "command-line"}]
    (root / "multirun.yaml").write_text(yaml.safe_dump(
        {"hydra": {"job": {"config_name": "friede_locatello_dip_vae"}, "runtime": {"config_sources": sources}}}))
    j = 0
    for model, migs in (("dip_vae_i_friede", (0.02, 0.03, 0.04, 0.05)), ("dip_vae_ii_friede", (0.2, 0.3, 0.4, 0.5))):
        for (lambda_od, seed), mig in zip(itertools.product((1.0, 50.0), (0, 1)), migs):
            _fake_run(root, f"{j}_{model}", model, seed, lambda_od, mig)
            j += 1
    rc = report_main([str(root), "--compare-paper", "friede:5", "--metrics", "mig", "--format", "csv", "--no-figure"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = {r["model"]: r for r in csv.DictReader(out.splitlines())}
    assert set(rows) == {"dip_vae_i_friede", "dip_vae_ii_friede"} and "friede_locatello_dip_vae.yaml" in err
    first, second = rows["dip_vae_i_friede"], rows["dip_vae_ii_friede"]
    assert (first["n"], float(first["mig_median"])) == ("4", pytest.approx(0.035))
    assert (float(first["mig_paper"]), first["mig_inside"]) == (0.036, "1")       # in [0.019, 0.094]
    assert (float(second["mig_paper"]), second["mig_inside"]) == (0.062, "0")     # 0.35 not in [0.036, 0.086]


# -- bad input: one line, before training ----------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (["model=dip_vae_i_friede", "model.regularizers.dip_vae.lambda_od=-1"], "lambda_od must be a non-negative number"),
    (["model=dip_vae_ii_friede", "model.regularizers.dip_vae.lambda_d_factor=-2"],
     "lambda_d_factor must be a non-negative number"),
    (["model=dip_vae_i_friede", "model.regularizers.dip_vae.variant=iii"], "variant must be one of"),
    (["model=ae", "+regularizer=dip_vae"], "dip_vae: DIPVAE needs a gaussian latent distribution"),
    (["model=qlae", "+regularizer=annealed_capacity"], "AnnealedCapacity needs a gaussian latent distribution"),
    (["model=annealed_vae_friede", "model.regularizers.annealed_capacity.c_max=-1"], "c_max must be a non-negative"),
    (["model=annealed_vae_friede", "model.regularizers.annealed_capacity.iteration_threshold=0"],
     "iteration_threshold must be a number > 0"),
])
def test_bad_input_fails_before_training_in_one_line(overrides, message, tmp_path):
    cfg = compose_config([*FAST, *overrides, "data=shapes2d"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        train(cfg)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


# -- β-TCVAE as disentanglement_lib trains it (issue 33 item 4) ----------------------------------------------------
def _dlib_objective(x, logits, z, mean, logvar, beta):
    """disentanglement_lib's BetaTCVAE loss for one batch, written out in float64 numpy: summed Bernoulli
    reconstruction (logits), analytic KL, (beta - 1) * total_correlation (vae.py), all batch means."""
    from scipy.special import logsumexp

    recon = np.mean(np.sum(np.maximum(logits, 0) - logits * x + np.log1p(np.exp(-np.abs(logits))), axis=(1, 2, 3)))
    kl = np.mean(0.5 * np.sum(mean**2 + np.exp(logvar) - logvar - 1, axis=1))
    log_density = -0.5 * ((z[:, None] - mean[None]) ** 2 * np.exp(-logvar[None]) + logvar[None] + np.log(2 * np.pi))
    tc = np.mean(logsumexp(log_density.sum(2), axis=1) - logsumexp(log_density, axis=1).sum(1))
    return recon + kl + (beta - 1) * tc, tc


def test_betatcvae_friede_is_disentanglement_libs_objective_in_float64():
    cfg = compose_config(["model=betatcvae_friede", "data=dsprites", "model/arch=small", "model.regularizers.tcvae.beta=4"])
    assert cfg.model.latent.beta == 1.0 and cfg.model.regularizers.tcvae._target_.endswith("LocatelloTotalCorrelation")
    model = instantiate(cfg.model, in_channels=1, resolution=32).double()
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(16, 1, 32, 32, generator=gen, dtype=torch.float64) > 0.5).double()
    torch.manual_seed(3)
    terms, weights = model.loss_terms(x)
    total = sum(weights[k] * terms[k] for k in terms)
    torch.manual_seed(3)  # the same noise: z, mean and log-variance of that step
    out = model.run_latent(model.encoder(x))
    logits = model.decoder(out.z)
    mean, sigma = out.params["mu"], out.params["sigma"]
    expected, tc = _dlib_objective(x.numpy(), logits.detach().numpy(), out.z.detach().numpy(),
                                   mean.detach().numpy(), (2 * sigma.log()).detach().numpy(), beta=4.0)
    assert terms["tc"].item() == pytest.approx(tc, rel=1e-9)
    assert total.item() == pytest.approx(expected, rel=1e-9)


def test_chens_decomposition_is_one_option_away_with_the_same_tc_gradient():
    chen = compose_config(["model=betatcvae_friede_chen", "data=dsprites"]).model
    assert chen.latent.beta == 0.0 and chen.regularizers.tcvae._target_.endswith("DecomposedKL")
    from disentangle.regularizers import dlib_total_correlation, tcvae_decomposition

    gen = torch.Generator().manual_seed(1)
    mu = torch.randn(32, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    sigma = (torch.rand(32, 6, generator=gen, dtype=torch.float64) + 0.2).requires_grad_()
    z = (mu + sigma * torch.randn(32, 6, generator=gen, dtype=torch.float64))
    dlib = dlib_total_correlation(z, mu, sigma)
    normalised = tcvae_decomposition(z, mu, sigma, dataset_size=1000)["tc"].mean()
    assert (normalised - dlib).item() == pytest.approx(5 * math.log(32 * 1000), rel=1e-12)  # (n_z - 1) log(M N)
    assert torch.allclose(torch.autograd.grad(dlib, mu, retain_graph=True)[0],
                          torch.autograd.grad(normalised, mu)[0], rtol=1e-12, atol=1e-14)


def test_annealed_capacity_refuses_a_latent_whose_kl_still_counts():
    """The capacity term replaces the KL: with model.latent.beta > 0 the KL would count twice (issue 30 item 7)."""
    cfg = compose_config(["model=vae_friede", "model/arch=small", "+regularizer=annealed_capacity"])
    with pytest.raises(Exception, match=r"replaces the latent's KL, which still counts .* set model.latent.beta=0"):
        instantiate(cfg.model, in_channels=3, resolution=64)
    cfg = compose_config(["model=vae_friede", "model/arch=small", "+regularizer=annealed_capacity",
                          "model.latent.beta=0"])
    assert "annealed_capacity" in instantiate(cfg.model, in_channels=3, resolution=64).regularizers
