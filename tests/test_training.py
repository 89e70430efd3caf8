"""End-to-end: short real training runs (Lightning Trainer, Hydra config) for every model; bad input."""
import csv
import json
import math
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import FAST, FIGURES, MODELS, compose_config, run_cli
from omegaconf import OmegaConf

from disentangle.callbacks.gather import decode_interventions
from disentangle.errors import ConfigError, DatasetNotFoundError, NonFiniteLossError
from disentangle.metrics.suite import resolve_options
from disentangle.runtime.loggers import config_key
from disentangle.runtime.run import build, train

SUMMARY = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


@pytest.mark.parametrize("model", MODELS)
def test_short_training_run_writes_metrics_and_figures(model, tmp_path):
    cfg = compose_config(FAST + [FIGURES, f"model={model}", "data=shapes2d"], output_dir=tmp_path)
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    for key in SUMMARY:
        assert math.isfinite(record[key]), key
        assert record[key] == pytest.approx(result[key])
    assert all(0 <= record[k] <= 1 for k in SUMMARY if k != "psnr")
    assert record["psnr"] > 5
    # Friede et al.: 10 latents on every dataset; Cliff's balls models: the balls' 4 coordinates
    n_latents = 10 if "_friede" in model else 4 if model.endswith("_balls") else 12
    assert np.array(record["nmi"]).shape == (6, n_latents) and len(record["active"]) == n_latents
    assert record["factor_names"][0] == "floor_hue"
    assert (tmp_path / "nmi_heatmap.png").stat().st_size > 1000
    assert (tmp_path / "interventions.png").stat().st_size > 1000
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    rows = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert "train/loss" in rows[0] and "eval/infom" in rows[0] and len(rows) > 3


def test_training_reduces_the_loss_and_updates_parameters(tmp_path):
    cfg = compose_config(FAST + ["model=qlae", "data=sprites", "trainer.max_steps=25",
                                 "callbacks.evaluation.every_n_steps=0"], output_dir=tmp_path)
    job = build(cfg)
    before = {k: v.clone() for k, v in job.model.state_dict().items()}
    x, _ = job.datamodule.gather(torch.arange(0, job.datamodule.num_samples, 9000))
    loss0 = job.model.loss_terms(x)[0]["reconstruction"].item()
    job.trainer.fit(job.model, datamodule=job.datamodule)
    loss1 = job.model.loss_terms(x)[0]["reconstruction"].item()
    assert loss1 < loss0
    after = job.model.state_dict()
    assert not torch.equal(before["latent.values"], after["latent.values"])  # codebook trained
    assert not torch.equal(before["encoder.head.weight"] if "encoder.head.weight" in before else
                           next(iter(before.values())), next(iter(after.values())))


def test_checkpoint_stores_the_composed_config(trained_run):
    run = trained_run("model=tripod", "data=shapes2d")  # shared with test_evaluate
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["disentangle_config"]["model"]["name"] == "tripod"
    assert ckpt["global_step"] == 4


def test_cli_run_lands_in_the_hydra_run_dir_and_prints_the_table(tmp_path):
    run_dir = tmp_path / "run"
    res = run_cli(*[o for o in FAST if not o.startswith("print_summary")], FIGURES, "model=tripod", "data=sprites",
                  f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    for header in ("InfoM", "InfoE", "InfoC", "PSNR"):
        assert header in res.stdout
    assert str((run_dir / "nmi_heatmap.png").resolve()) in res.stdout.replace("\n", "")


@pytest.mark.parametrize(
    "model, override, message",
    [
        ("qlae", "model.latent.n_values=1", "n_values must be >= 2"),
        ("tripod", "model.regularizers.klm.weight=-1", "weight must be a non-negative"),
        ("tripod", "model.batch_size=0", "batch_size must be >= 1"),
        ("tripod", "model.n_latents=0", "n_latents must be >= 1"),
        ("qlae", "model.optimizer.weight_decay=-0.1", "weight_decay must be >= 0"),
        ("tripod", "trainer.max_steps=0", "max_steps must be >= 1"),
        ("qlae", "+model.regularizers.nhp.weight=1", "attach one with \\+regularizer=nhp"),
        ("betavae", "model.latent.beta=-1", r"model.latent: beta must be a non-negative number"),
        ("betatcvae", "model.regularizers.tcvae.beta=-1", "beta must be a non-negative number"),
        ("vqvae", "model.latent.codebook_size=1", r"model.latent: codebook_size must be an integer >= 2"),
        ("vqvae", "model.latent.code_dim=0", r"model.latent: code_dim must be an integer >= 1"),
        ("ae", "+regularizer=tcvae", (r"model.regularizers.tcvae: DecomposedKL needs a gaussian latent distribution, "
                                     r"but the latent module is ContinuousLatent")),
        ("qlae", "+regularizer=tcvae", "needs a gaussian latent distribution"),
        ("betavae", "model.density_scale=-1", "density_scale must be 'per_pixel' or a number > 0"),
        ("qvae", "model.latent.codebook_size=1", r"model.latent: codebook_size must be an integer >= 2"),
        ("qvae", "model.latent.initial_temperature=0", r"model.latent: initial_temperature must be > 0"),
        ("factorqvae", "model.regularizers.tc_discriminator.weight=-1", "weight must be a non-negative number"),
        ("ae", "+regularizer=tc_discriminator", (r"model.regularizers.tc_discriminator: AdversarialTotalCorrelation "
                                                r"needs a sampled latent, but ContinuousLatent is deterministic")),
        ("factorqvae", "model.batch_size=15", "model.batch_size=15 must be even"),
        ("ae_fq", "model.optimizer.schedule.steps=0", "model.optimizer.schedule.steps must be >= 1"),
    ],
)
def test_invalid_values_fail_before_training_with_a_clear_message(model, override, message, tmp_path):
    cfg = compose_config(FAST + [f"model={model}", override], output_dir=tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        train(cfg)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_invalid_value_on_the_command_line_is_one_line_and_names_the_key(tmp_path):
    res = run_cli(*FAST, "model=qlae", "model.latent.n_values=1", f"hydra.run.dir={tmp_path}")
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "n_values must be >= 2" in lines[0] and "model" in lines[0]
    assert "Traceback" not in res.stderr


def test_missing_dataset_names_the_file_and_the_prepare_command(tmp_path):
    res = run_cli("model=tripod", "data=isaac3d", f"data.root={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, res.stderr
    assert str(tmp_path / "isaac3d.h5") in lines[0]
    assert "python -m disentangle.prepare data=isaac3d" in lines[0]
    assert "Traceback" not in res.stderr


def test_prepared_hdf5_dataset_trains(tmp_path):
    """A real HDF5 cache (reduced factor grid) goes through the data module into training."""
    sizes = [2, 2, 2, 2, 2, 2, 2, 2, 2]
    factors = np.stack(np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij"), -1).reshape(-1, 9)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (len(factors), 3, 64, 64), dtype=np.uint8)
    images[:, 0] = (factors[:, :1, None] * 120).astype(np.uint8)  # factor 0 is visible
    with h5py.File(tmp_path / "isaac3d.h5", "w") as f:
        f["images"], f["factors"] = images, factors.astype(np.int64)
        f.attrs["factor_sizes"] = sizes
        f.attrs["factor_names"] = ["object_shape", "robot_x", "robot_y", "camera_height", "object_scale",
                                   "lighting_intensity", "lighting_direction", "object_color", "wall_color"]
        f.attrs["complete"] = True
    cfg_overrides = [o for o in FAST if not o.startswith("data.resolution")] + [
        "model=tripod", "data=isaac3d", f"data.root={tmp_path}", f"data.factor_sizes={sizes}", "data.eval_size=256"]
    cfg = compose_config(cfg_overrides, output_dir=tmp_path / "run")
    job = build(cfg)
    assert isinstance(job.datamodule.data.images, np.memmap)  # contiguous cache: mapped, not read
    x, s = job.datamodule.gather(torch.tensor([0, 511, 7]))
    assert torch.equal(s, torch.as_tensor(factors[[0, 511, 7]]))
    assert torch.allclose(x * 255, torch.as_tensor(images[[0, 511, 7]]).float())
    train(cfg)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["data"] == "isaac3d"
    # a stochastic model on the same cache: beta-TCVAE's N is the cache's image count
    vae = compose_config([o.replace("model=tripod", "model=betatcvae") for o in cfg_overrides],
                         output_dir=tmp_path / "vae")
    assert build(vae).model.dataset_size == 512
    train(vae)
    assert json.loads((tmp_path / "vae" / "metrics.json").read_text())["method"] == "betatcvae"


def test_missing_dataset_raises_before_any_work(tmp_path):
    fast = [o for o in FAST if not o.startswith("data.resolution")]
    cfg = compose_config(fast + ["data=shapes3d", f"data.root={tmp_path}"], output_dir=tmp_path / "run")
    with pytest.raises(DatasetNotFoundError, match="shapes3d.h5"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_nan_loss_stops_the_run_naming_term_and_step_and_keeps_no_later_checkpoint(tmp_path):
    # a huge learning rate makes the first update blow the network up: step 1's loss is NaN
    cfg = compose_config(FAST + ["model=ae", "model.optimizer.lr=1e30", "model.optimizer.clip_value=0",
                                 "trainer.max_steps=20", "callbacks.checkpoint.every_n_train_steps=1"],
                         output_dir=tmp_path)
    with pytest.raises(NonFiniteLossError, match=r"at step 1: term 'reconstruction'"):
        train(cfg)
    last = tmp_path / "checkpoints" / "last.ckpt"
    if last.exists():  # only a checkpoint from before the non-finite step may exist
        ckpt = torch.load(last, map_location="cpu", weights_only=True)
        assert ckpt["global_step"] <= 1
        assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())
    assert not (tmp_path / "metrics.json").exists()


def test_nan_on_the_command_line_exits_with_one_line(tmp_path):
    res = run_cli(*FAST, "model=ae", "model.optimizer.lr=1e30", "model.optimizer.clip_value=0",
                  f"hydra.run.dir={tmp_path}")
    assert res.returncode == 3
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "term 'reconstruction'" in lines[0] and "step 1" in lines[0]


def test_a_failing_final_metric_on_the_command_line_is_one_line_and_keeps_the_checkpoint(tmp_path):
    res = run_cli(*FAST, "model=ae", "callbacks.evaluation.metrics=[infomec,betavae]",
                  "callbacks.evaluation.betavae.n_train=1", f"hydra.run.dir={tmp_path}")
    assert res.returncode == 1
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert lines == [("error: evaluation at step 4 failed: ValueError: n_train=1 train points cover a single "
                     "factor; use more points")], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()  # the trained weights are not lost


def test_wandb_logger_runs_offline_with_the_real_library(tmp_path):
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cfg = compose_config(FAST + [FIGURES, "model=tripod", "logger=wandb"], output_dir=tmp_path)
        train(cfg)
    finally:
        import wandb

        wandb.finish()
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    runs = list(Path(tmp_path).rglob("offline-run-*"))
    assert runs, "no offline W&B run directory"
    files = {p.name for p in runs[0].rglob("*")}
    assert any(name.endswith(".wandb") for name in files)
    assert list(runs[0].rglob("*.png")), "figures were not logged to W&B"
    # what the live run reported (wandb's public attributes): the whole experiment, the best InfoM
    record = json.loads((tmp_path / "wandb_run.json").read_text())
    config, summary = record["config"], record["summary"]
    assert config["model.optimizer.lr"] == cfg.model.optimizer.lr and config["trainer.precision"] == "32-true"
    assert config["model.name"] == config["model"] == "tripod" and config["seed"] == 0 and config["runtime.precision"] == "32-true"
    assert any(k.startswith("model.regularizers.") for k in config) and len(config) > 100
    assert len(config["config_key"]) == 12
    history = [json.loads(line) for line in (tmp_path / "metrics_history.jsonl").read_text().splitlines()]
    best = max(history, key=lambda e: e["infom"])
    assert summary["best_infom"] == pytest.approx(best["infom"]) and summary["best_infom_step"] == best["step"]
    assert summary["infom"] == pytest.approx(json.loads((tmp_path / "metrics.json").read_text())["infom"])


def test_config_key_is_shared_by_the_seeds_of_a_configuration_and_only_by_them(tmp_path):
    def key(*overrides):
        return config_key(OmegaConf.to_container(compose_config(FAST + list(overrides), tmp_path), resolve=False))

    base = key("model=qlae", "seed=0")
    assert base == key("model=qlae", "seed=1") == key("model=qlae", "seed=0", "trainer.enable_progress_bar=true")
    assert base == key("model=qlae", "trainer.compile=true")  # compiled steps compute what eager ones do
    assert base != key("model=qlae", "model.optimizer.lr=0.0005") and base != key("model=tripod")


def test_a_regularizer_that_needs_a_distribution_fails_on_the_command_line_naming_it(tmp_path):
    res = run_cli(*FAST, "model=ae", "+regularizer=tcvae", f"hydra.run.dir={tmp_path}")
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "gaussian latent" in lines[0] and "model/latent=gaussian" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_tcvae_takes_the_dataset_size_from_the_data_module_and_stops_when_there_is_none(tmp_path):
    cfg = compose_config(FAST + ["model=betatcvae", "data=sprites"], output_dir=tmp_path)
    job = build(cfg)
    assert job.model.dataset_size == job.datamodule.num_samples == 3 * 6 * 40 * 32 * 32
    job.model.dataset_size = None  # a model built without it reads it from the data module at fit time
    job.trainer.fit(job.model, datamodule=job.datamodule)
    assert job.model.dataset_size == job.datamodule.num_samples
    other = build(compose_config(FAST + ["model=betatcvae", "data=sprites"], output_dir=tmp_path / "b"))
    other.model.dataset_size = None
    other.datamodule.num_samples = 0  # a data module that cannot say its size
    with pytest.raises(ConfigError, match=r"model.regularizers.tcvae needs the training set's size") as info:
        other.trainer.fit(other.model, datamodule=other.datamodule)
    assert "\n" not in str(info.value) and other.trainer.global_step == 0


def test_density_terms_are_divided_by_the_pixel_count_and_other_terms_are_not(tmp_path):
    """β-VAE: BCE + β KL / D_x; β-TCVAE: BCE + (MI + β TC + DWKL) / D_x (spec qlae.md §4.3-4.4); BioAE: not scaled
    (§4.5); with density_scale=1 the terms count in nats per image."""
    d_x = 3 * 16 * 16
    x = torch.rand(8, 3, 16, 16)
    for overrides, expected in (
        (["model=betavae", "model.latent.beta=3"], {"kl": 3 / d_x}),
        (["model=betatcvae", "model.regularizers.tcvae.beta=5"], {"kl": 0.0, "mi": 1 / d_x, "tc": 5 / d_x,
                                                                  "dwkl": 1 / d_x}),
        (["model=bioae", "model.regularizers.bio.activity_weight=0.3"], {"nonneg": 1.0, "activity": 0.3}),
        (["model=betavae", "model.latent.beta=3", "model.density_scale=1"], {"kl": 3.0}),
    ):
        job = build(compose_config(FAST + ["data=shapes2d"] + overrides, output_dir=tmp_path))
        terms, weights = job.model.loss_terms(x)
        assert weights == pytest.approx({"reconstruction": 1.0, **expected}), overrides
        assert all(torch.isfinite(v) for v in terms.values())


def test_evaluation_sees_mu_for_gaussians_and_code_indices_for_vq(tmp_path):
    extra = ["callbacks.evaluation.save_latents=true", "callbacks.evaluation.every_n_steps=0"]
    cfg = compose_config(FAST + extra + [FIGURES, "model=vqvae", "data=shapes2d", "model.latent.codebook_size=32",
                                         "model.latent.code_dim=4"], output_dir=tmp_path / "vq")
    result_vq = train(cfg)
    z = np.load(tmp_path / "vq" / "latents.npz")["latents"]
    assert z.shape[1] == 12 and np.array_equal(z, z.round()) and z.min() >= 0 and z.max() < 32
    record = json.loads((tmp_path / "vq" / "metrics.json").read_text())
    assert record["discrete_latents"] is True and math.isfinite(result_vq["infoe"])
    assert (tmp_path / "vq" / "interventions.png").stat().st_size > 1000  # code sweeps, decoded

    # InfoE's auto features are one-hot for the categorical codes; interventions step through the codes in use
    job = build(cfg)
    job.model.eval()
    prepared = job.evaluation.prepare(job.model, job.datamodule, step=0, final=False, write=False,
                                      metrics=("infomec",))
    assert prepared.model.categorical  # what infomec.infoe_features=auto resolves to one-hot features for
    assert resolve_options({"infomec": {"infoe_features": "auto"}}, prepared.model)["infomec"] == {
        "infoe_features": "onehot"}
    seen = []
    decode = job.model.decode_intervention
    job.model.decode_intervention = lambda r: seen.append(r.clone()) or decode(r)
    codes = np.zeros((50, 12))
    codes[:, 3] = np.repeat([3, 7, 9, 30, 31], 10)  # latent 3 uses five codes; the others one each
    decode_interventions(job.model, job.datamodule, codes, n_interventions=3)
    grid = seen[0].reshape(3, 12, 12)
    assert set(grid[:, 3, 3].tolist()) == {3.0, 9.0, 31.0}  # 3 steps through the used codes, ends included
    assert (grid[:, 0, 0] == 0).all()

    cfg = compose_config(FAST + extra + ["model=betavae", "data=shapes2d"], output_dir=tmp_path / "vae")
    job = build(cfg)
    train(cfg)
    z = np.load(tmp_path / "vae" / "latents.npz")["latents"]
    record = json.loads((tmp_path / "vae" / "metrics.json").read_text())
    assert record["discrete_latents"] is False
    model = job.model
    ckpt = torch.load(tmp_path / "vae" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    images, _ = job.datamodule.gather(job.datamodule.eval_indices()[:5])
    with torch.no_grad():
        mu = model.encoder(images)[:, :12]
        assert np.allclose(z[:5], mu.numpy(), atol=1e-5)  # the posterior mean, not a sample
        assert torch.equal(model.embed(images)[0], model.embed(images)[0])  # deterministic at evaluation


def test_a_run_logs_its_training_losses_at_its_last_step(trained_run):
    """Lightning writes the training losses every ``log_every_n_steps``; the run's last step is written too (a run
    shorter than n had no training-loss curve), once, beside the steps Lightning wrote itself."""
    run = trained_run("trainer.log_every_n_steps=3")  # 4 steps: Lightning writes step 2, the last step is 3
    with open(run / "csv" / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
    assert steps == [2, 3]
