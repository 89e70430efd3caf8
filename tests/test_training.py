"""End-to-end: short real training runs (Lightning Trainer, Hydra config) for every model; bad input."""
import json
import math
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import FAST, MODELS, compose_config, run_cli

from disentangle.errors import ConfigError, DatasetNotFoundError, NonFiniteLossError
from disentangle.run import build, train

SUMMARY = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


@pytest.mark.parametrize("model", MODELS)
def test_short_training_run_writes_metrics_and_figures(model, tmp_path):
    cfg = compose_config(FAST + [f"model={model}", "data=shapes2d"], output_dir=tmp_path)
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    for key in SUMMARY:
        assert math.isfinite(record[key]), key
        assert record[key] == pytest.approx(result[key])
    assert all(0 <= record[k] <= 1 for k in SUMMARY if k != "psnr")
    assert record["psnr"] > 5
    assert np.array(record["nmi"]).shape == (6, 12) and len(record["active"]) == 12
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


def test_checkpoint_stores_the_composed_config(tmp_path):
    cfg = compose_config(FAST + ["model=tripod", "data=shapes2d"], output_dir=tmp_path)
    train(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["disentangle_config"]["model"]["name"] == "tripod"
    assert ckpt["global_step"] == 4


def test_cli_run_lands_in_the_hydra_run_dir_and_prints_the_table(tmp_path):
    run_dir = tmp_path / "run"
    res = run_cli(*[o for o in FAST if not o.startswith("print_summary")], "model=tripod", "data=sprites",
                  f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    for header in ("InfoM", "InfoE", "InfoC", "PSNR"):
        assert header in res.stdout
    assert str((run_dir / "nmi_heatmap.png").resolve()) in res.stdout.replace("\n", "")


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.latent.n_values=1", "n_values must be >= 2"),
        ("model.regularizers.klm.weight=-1", "weight must be a non-negative"),
        ("model.batch_size=0", "batch_size must be >= 1"),
        ("model.n_latents=0", "n_latents must be >= 1"),
        ("model.optimizer.weight_decay=-0.1", "weight_decay must be >= 0"),
        ("trainer.max_steps=0", "max_steps must be >= 1"),
        ("+model.regularizers.nhp.weight=1", "attach one with \\+regularizer=nhp"),
    ],
)
def test_invalid_values_fail_before_training_with_a_clear_message(override, message, tmp_path):
    model = "qlae" if any(k in override for k in ("n_values", "weight_decay", "nhp")) else "tripod"
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
    cfg = compose_config(
        [o for o in FAST if not o.startswith("data.resolution")]
        + ["model=tripod", "data=isaac3d", f"data.root={tmp_path}", f"data.factor_sizes={sizes}",
           "data.eval_size=256"],
        output_dir=tmp_path / "run",
    )
    job = build(cfg)
    assert isinstance(job.datamodule.data.images, np.memmap)  # contiguous cache: mapped, not read
    x, s = job.datamodule.gather(torch.tensor([0, 511, 7]))
    assert torch.equal(s, torch.as_tensor(factors[[0, 511, 7]]))
    assert torch.allclose(x * 255, torch.as_tensor(images[[0, 511, 7]]).float())
    train(cfg)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["data"] == "isaac3d"


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
        ckpt = torch.load(last, map_location="cpu", weights_only=False)
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
        cfg = compose_config(FAST + ["model=tripod", "logger=wandb"], output_dir=tmp_path)
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
