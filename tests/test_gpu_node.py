"""Every GPU of a node, several runs per GPU (issue 22): hydra/launcher=gpu_node runs max(1, N) x runs_per_gpu jobs at
once, each job on a free GPU slot (GPU i mod N first; issue 30: never more than runs_per_gpu on a GPU). On this CPU
machine the GPUs are simulated (DISENTANGLE_SIMULATE_GPUS=N: the placement is computed and recorded, training runs on
the CPU); the sweeps are real Hydra multiruns in joblib worker processes."""
from __future__ import annotations

import json
import os

import joblib
import pytest
import torch
from conftest import CONF, FAST, compose_config, run_cli
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from disentangle.data.prepared import (
    ON_DEVICE_FRACTION,
    PreparedDataModule,
    check_on_device,
    resolve_on_device,
)
from disentangle.errors import ConfigError
from disentangle.foundation.devices import (
    SIMULATE_VARIABLE,
    LauncherConfigError,
    concurrent_jobs,
    describe_node,
    gpu_share,
    job_placement,
)
from disentangle.runtime.run import build

# two optimizer steps of the small AE, an evaluation of PSNR only (no metric), no checkpoint or logger: the cost of a
# job is its worker's start-up
TINY = [o for o in FAST if not o.startswith(("trainer.max_steps", "trainer.accelerator", "callbacks."))]
TINY += ["model=ae", "data=shapes2d", "trainer.max_steps=2", "logger=none", "~callbacks.checkpoint",
         "callbacks.evaluation.n_samples=64", "callbacks.evaluation.every_n_steps=100",
         "callbacks.evaluation.metrics=[]", "callbacks.evaluation.periodic_metrics=[]",
         "callbacks.evaluation.figures=false", "callbacks.evaluation.progress=false"]


def expected_device(job: int, n_gpus: int) -> str:
    return f"cuda:{job % n_gpus}" if n_gpus else "cpu"


@pytest.fixture
def hydra_job(monkeypatch):
    """Compose the real config with its hydra node and make it this process's HydraConfig as job ``num`` (what a
    launcher does before it calls the task function); cleared afterwards."""
    def make(overrides, num=0):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=[*overrides, "paths.output_dir=/tmp/unused"], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.job.num = num
        HydraConfig.instance().set_config(cfg)
        return cfg

    yield make
    HydraConfig.instance().cfg = None
    GlobalHydra.instance().clear()


# -- real multiruns ------------------------------------------------------------------------------------------------
# (8 GPUs x 4 would start 32 joblib workers: that case is covered in process below)
@pytest.mark.parametrize("n_gpus, runs_per_gpu", [(0, 1), (1, 4), (8, 1)])
def test_a_gpu_node_sweep_places_job_i_on_gpu_i_mod_n_with_n_times_runs_per_gpu_at_once(n_gpus, runs_per_gpu,
                                                                                          tmp_path):
    res = run_cli("-m", *TINY, "hydra/launcher=gpu_node", f"runs_per_gpu={runs_per_gpu}", "seed=0,1",
                  f"hydra.sweep.dir={tmp_path}", env={SIMULATE_VARIABLE: str(n_gpus)}, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    n_jobs = max(1, n_gpus) * runs_per_gpu
    # what the launcher was given (Hydra's joblib launcher logs its Parallel arguments)
    assert f"Joblib.Parallel(n_jobs={n_jobs}," in res.stdout + res.stderr
    assert f"sweep {tmp_path}: 2 of 2 jobs succeeded, 0 failed" in res.stdout
    for job in (0, 1):
        full = json.loads((tmp_path / f"{job}_ae_shapes2d" / "metrics.json").read_text())
        record = full["runtime"]  # what ran, beside the metrics
        assert record["device"] == expected_device(job, n_gpus), (job, record)
        assert (record["job"], record["n_gpus"], record["runs_per_gpu"]) == (job, n_gpus, runs_per_gpu)
        assert record["concurrent_jobs"] == n_jobs and record["simulated_gpus"] is True
        assert full["step"] == 2 and full["precision"] == "32-true"  # trained, on the CPU
        if n_jobs > 1 and "OMP_NUM_THREADS" not in os.environ:  # joblib caps a worker's threads at cores // n_jobs
            assert record["torch_threads"] == max(1, joblib.cpu_count() // n_jobs)


def max_jobs_per_gpu(sweep_dir) -> dict[str, int]:
    """The most jobs that ran at once on each GPU, from each job's placement time and the time its metrics.json was
    written (its end)."""
    spans = []
    for metrics in sweep_dir.glob("*/metrics.json"):
        record = json.loads(metrics.read_text())["runtime"]
        spans.append((record["device"], record["placed_at"], metrics.stat().st_mtime))
    most: dict[str, int] = {}
    for device, start, _ in spans:
        at_once = sum(1 for d, s, e in spans if d == device and s <= start < e)
        most[device] = max(most.get(device, 0), at_once)
    return most


def test_jobs_of_unequal_length_never_put_more_than_runs_per_gpu_on_a_gpu(tmp_path):
    """Issue 30 item 3: job 0 is long, jobs 1-3 short, 2 GPUs x 1 run. Under the old "job i on GPU i mod N" job 2 went
    to GPU 0 while job 0 still ran there (2 jobs on it, GPU 1 idle); a job now takes a free slot. Which job lands
    where depends on when each worker starts; the bound holds whatever the order."""
    res = run_cli("-m", *TINY, "hydra/launcher=gpu_node", "runs_per_gpu=1", "trainer.max_steps=400,2,2,2",
                  f"hydra.sweep.dir={tmp_path}", env={SIMULATE_VARIABLE: "2"}, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4 of 4 jobs succeeded" in res.stdout
    devices = {int(p.name.split("_")[0]): json.loads((p / "metrics.json").read_text())["runtime"]["device"]
               for p in tmp_path.glob("*_ae_shapes2d")}
    assert len(devices) == 4 and set(devices.values()) == {"cuda:0", "cuda:1"}, devices
    assert max(max_jobs_per_gpu(tmp_path).values()) == 1, (devices, max_jobs_per_gpu(tmp_path))


def test_bad_launcher_settings_stop_the_sweep_in_one_line_before_any_job(tmp_path):
    cases = [
        (["runs_per_gpu=0"], {}, "runs_per_gpu must be an integer >= 1 (got 0)"),
        (["trainer.devices=3"], {SIMULATE_VARIABLE: "2"}, "trainer.devices=3: more GPUs requested than present"),
    ]
    for i, (overrides, env, message) in enumerate(cases):
        sweep_dir = tmp_path / str(i)
        res = run_cli("-m", *TINY, "hydra/launcher=gpu_node", *overrides, "seed=0,1", f"hydra.sweep.dir={sweep_dir}",
                      env=env, timeout=120)
        assert res.returncode != 0
        errors = [line for line in res.stderr.splitlines() if message in line]
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
        assert not sweep_dir.exists()  # no job started


# -- placement, in process -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_gpus", [0, 1, 8])
@pytest.mark.parametrize("runs_per_gpu", [1, 4])
def test_job_i_is_placed_on_gpu_i_mod_n_and_only_recorded_under_the_simulation(n_gpus, runs_per_gpu, hydra_job,
                                                                               monkeypatch):
    monkeypatch.setenv(SIMULATE_VARIABLE, str(n_gpus))
    for job in (0, 1, 7, 8, 9, 17):
        cfg = hydra_job(["hydra/launcher=gpu_node", f"runs_per_gpu={runs_per_gpu}"], num=job)
        placement = job_placement(cfg)
        assert placement.record["device"] == expected_device(job, n_gpus)
        assert placement.record["job"] == job and placement.record["simulated_gpus"] is True
        assert placement.record["concurrent_jobs"] == max(1, n_gpus) * runs_per_gpu
        assert placement.trainer_kwargs == {"accelerator": "cpu"}  # simulated: the CPU trains
        assert gpu_share() == runs_per_gpu  # ceil(n_jobs / max(1, N)): the runs sharing one GPU


def test_with_real_gpus_the_trainer_gets_gpu_i_mod_n(hydra_job, monkeypatch):
    monkeypatch.delenv(SIMULATE_VARIABLE, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)  # what the node reports; nothing is trained here
    for job in range(7):
        placement = job_placement(hydra_job(["hydra/launcher=gpu_node", "runs_per_gpu=2"], num=job))
        assert placement.trainer_kwargs == {"accelerator": "gpu", "devices": [job % 3]}
        assert placement.record["device"] == f"cuda:{job % 3}" and "simulated_gpus" not in placement.record
    # accelerator=cpu is left alone; a DDP job keeps its devices (Lightning's first two)
    assert job_placement(hydra_job(["trainer=cpu"], num=5)).trainer_kwargs == {}
    ddp = job_placement(hydra_job(["trainer=ddp"], num=5))
    assert ddp.trainer_kwargs == {} and ddp.record["device"] == "cuda:0,cuda:1"


def test_a_single_run_or_a_config_composed_outside_hydra_is_job_0(monkeypatch):
    monkeypatch.setenv(SIMULATE_VARIABLE, "4")
    HydraConfig.instance().cfg = None
    placement = job_placement(compose_config(["model=ae"]))
    assert placement.record["job"] == 0 and placement.record["device"] == "cuda:0"
    assert "concurrent_jobs" not in placement.record
    monkeypatch.setenv(SIMULATE_VARIABLE, "0")
    assert job_placement(compose_config(["model=ae"])).record["device"] == "cpu"


@pytest.mark.parametrize("overrides, simulated, message", [
    (["runs_per_gpu=0"], "2", "runs_per_gpu must be an integer >= 1 (got 0)"),
    (["trainer.devices=3"], "2", "trainer.devices=3: more GPUs requested than present (2 visible)"),
    (["trainer.devices=[0,2]"], "2", "trainer.devices=[0, 2]: more GPUs requested than present"),
    (["trainer=gpu"], "0", "trainer.accelerator=gpu: more GPUs requested than present (0 visible)"),
])
def test_bad_placement_input_is_one_config_error_before_any_work(overrides, simulated, message, monkeypatch, tmp_path):
    monkeypatch.setenv(SIMULATE_VARIABLE, simulated)
    HydraConfig.instance().cfg = None
    cfg = compose_config([*TINY, *overrides], output_dir=tmp_path / "run")
    with pytest.raises(ConfigError) as info:
        job_placement(cfg)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="more GPUs|runs_per_gpu") as info:
        build(cfg)  # the run's own construction stops there, before a Trainer exists
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()


def test_the_launcher_size_and_its_bad_inputs(monkeypatch):
    for n_gpus, runs, expected in [(0, 1, 1), (0, 4, 4), (1, 4, 4), (8, 1, 8), (8, 4, 32)]:
        monkeypatch.setenv(SIMULATE_VARIABLE, str(n_gpus))
        assert concurrent_jobs(runs) == expected
        assert f"{expected} concurrent job(s)" in describe_node(runs)
    monkeypatch.setenv(SIMULATE_VARIABLE, "2")
    for bad in (0, -1, "x", 1.5, True):
        with pytest.raises(LauncherConfigError, match="runs_per_gpu must be an integer >= 1"):
            concurrent_jobs(bad)
    with pytest.raises(LauncherConfigError, match="give one value"):
        concurrent_jobs(1, 1, "auto", ["model=ae", "runs_per_gpu=1,4"])
    assert concurrent_jobs(4, 1, "auto", ["runs_per_gpu=4", "seed=0,1"]) == 8
    with pytest.raises(LauncherConfigError, match="more GPUs requested than present"):
        concurrent_jobs(1, 3, "auto")
    monkeypatch.setenv(SIMULATE_VARIABLE, "many")
    with pytest.raises(ConfigError, match=f"{SIMULATE_VARIABLE} must be a number of GPUs"):
        concurrent_jobs(1)


# -- data.on_device ------------------------------------------------------------------------------------------------
def test_on_device_auto_keeps_the_images_on_cuda_when_they_fit_and_never_on_the_cpu():
    for setting in ("auto", True, False):
        assert resolve_on_device(setting, "cpu", nbytes=1) is False
    gb = 2**30
    # 6 GB of images, 80 GB free: kept by one run, and by four sharing the GPU (6 <= 0.5 * 80 / 4 = 10)
    assert resolve_on_device("auto", "cuda:0", 6 * gb, free=80 * gb, share=4) is True
    assert resolve_on_device("auto", "cuda:3", 6 * gb, free=80 * gb, share=8) is False  # 6 > 5
    assert ON_DEVICE_FRACTION == 0.5
    assert resolve_on_device(True, "cuda:0", 100 * gb, free=gb) is True  # forced
    assert resolve_on_device(False, "cuda:0", 1, free=80 * gb) is False
    assert check_on_device("auto") == "auto" and check_on_device("true") is True and check_on_device(False) is False


def test_prepared_data_defaults_to_auto_and_gathers_on_the_cpu_as_before(tmp_path):
    import raw_fixtures

    _, truth = raw_fixtures.WRITERS["dsprites"](tmp_path)
    dm = PreparedDataModule("dsprites", root=tmp_path, batch_size=8, eval_size=10,
                            factor_sizes=[int(s) for s in truth.max(0) + 1])
    assert dm.on_device == "auto" and dm.keeps_images_on(torch.device("cpu")) is False
    images, factors = dm.gather(torch.arange(4))
    assert images.device.type == "cpu" and dm._device_images is None and factors.shape[0] == 4
    assert compose_config(["data=shapes3d"]).data.on_device == "auto"


def test_a_bad_on_device_value_is_one_line_naming_the_key(tmp_path):
    cfg = compose_config(["model=ae", "data=shapes3d", f"data.root={tmp_path}", "data.on_device=yes"])
    with pytest.raises(ConfigError) as info:
        build(cfg)  # refused before the (missing) cache is opened
    assert "data.on_device must be one of auto, true, false (got 'yes')" in str(info.value)
    assert "\n" not in str(info.value)
