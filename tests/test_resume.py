"""Runs that survive a kill (issue 16): a real training subprocess SIGKILLed after its first checkpoint and resumed
ends where an uninterrupted run does; checkpoint writes are atomic; a bad checkpoint stops a resume in one line and
changes nothing."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked_cli
import pytest
import torch
from conftest import FAST, ROOT, compose_config, run_cli

from disentangle.runtime.checkpointing import AtomicCheckpointIO
from disentangle.runtime.run import train

# long enough to be killed mid-run (~0.5 s of steps between checkpoints), short enough for the default suite
RESUME = [o for o in FAST if not o.startswith(("trainer.max_steps", "callbacks.checkpoint", "callbacks.evaluation.every"))]
RESUME += ["trainer.max_steps=40", "callbacks.checkpoint.every_n_train_steps=8", "callbacks.evaluation.every_n_steps=20",
           "+trainer.deterministic=true", "trainer.log_every_n_steps=5"]
# the CLI's resume=<run dir> for a deterministic latent; every model family's kill and resume (auto_resume) is in
# test_resume_families.py, so the other three run with make test-slow
MODELS = ["ae", *(pytest.param(m, marks=pytest.mark.slow) for m in ("tripod", "betavae", "factorvae"))]


def _start(args: list[str]):
    return forked_cli.start("disentangle.train", *args)


def _kill_after_first_checkpoint(proc: subprocess.Popen, run_dir: Path, timeout: float = 240) -> None:
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + timeout
    while not last.exists():
        assert proc.poll() is None, f"the run ended before its first checkpoint: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _steps(path: Path, key: str) -> list[int]:
    with path.open(newline="") as f:
        return [int(float(r["step"])) for r in csv.DictReader(f) if r.get(key)]


@pytest.mark.parametrize("model", MODELS)
def test_a_killed_run_resumes_to_the_uninterrupted_result(model, tmp_path):
    args = [*RESUME, f"model={model}", "data=shapes2d"]
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    train(compose_config(args, output_dir=full_dir))

    proc = _start([*args, f"hydra.run.dir={killed_dir}"])
    _kill_after_first_checkpoint(proc, killed_dir)
    assert proc.returncode == -signal.SIGKILL and not (killed_dir / "metrics.json").exists()
    killed_at = torch.load(killed_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert 0 < killed_at < 40

    res = run_cli(f"resume={killed_dir}")  # the run's own overrides and directory
    assert res.returncode == 0, res.stderr[-3000:]
    full = json.loads((full_dir / "metrics.json").read_text())
    resumed = json.loads((killed_dir / "metrics.json").read_text())
    assert resumed["step"] == full["step"] == 40
    for key, value in full.items():
        if isinstance(value, float) and key != "eval_seconds":
            assert resumed[key] == pytest.approx(value, abs=1e-6), key
    a = torch.load(full_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    b = torch.load(killed_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert max((a[k].double() - b[k].double()).abs().max().item() for k in a) <= 1e-6
    # logs: every step once, none missing
    history = lambda d: [json.loads(x)["step"] for x in (d / "metrics_history.jsonl").read_text().splitlines()]
    assert history(killed_dir) == history(full_dir) == [20, 40]
    for key in ("train/loss", "eval/infom"):
        steps = _steps(killed_dir / "csv" / "metrics.csv", key)
        assert steps == _steps(full_dir / "csv" / "metrics.csv", key) and len(steps) == len(set(steps)), key


def test_a_kill_during_a_checkpoint_write_leaves_last_ckpt_loadable(tmp_path):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 1, "weights": torch.arange(10.0)}, path)
    # a child process writes a large checkpoint over it and is killed while the bytes go to disk
    code = ("import sys, torch; from disentangle.runtime.checkpointing import AtomicCheckpointIO; "
            "AtomicCheckpointIO().save_checkpoint({'global_step': 2, 'weights': torch.zeros(400_000_000, "
            "dtype=torch.uint8)}, sys.argv[1])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], cwd=ROOT)
    part = tmp_path / "last.ckpt.part"
    deadline = time.monotonic() + 120
    while not (part.exists() and part.stat().st_size > 0):
        assert proc.poll() is None and time.monotonic() < deadline, "the write finished before the kill"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    kept = torch.load(path, weights_only=True)
    assert kept["global_step"] == 1 and torch.equal(kept["weights"], torch.arange(10.0))


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_resume_from_a_corrupt_or_missing_checkpoint_stops_in_one_line_and_changes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    res = run_cli(*FAST, "model=ae", "data=shapes2d", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr[-2000:]
    last = run_dir / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # a partial file, as a non-atomic write killed midway leaves
    before = _snapshot(run_dir)
    res = run_cli(f"resume={run_dir}")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert "truncated or damaged" in res.stderr and "last.ckpt" in res.stderr
    assert _snapshot(run_dir) == before
    # auto_resume into the run's directory: checked before Hydra writes .hydra/ (nothing changes either)
    res = run_cli(*FAST, "model=ae", "data=shapes2d", "auto_resume=true", f"hydra.run.dir={run_dir}")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert "truncated or damaged" in res.stderr, res.stderr[-2000:]
    assert _snapshot(run_dir) == before
    # a multirun job's Hydra writes .hydra/ before the job can check: the job puts the files back
    job_dir = run_dir.parent / "sweep" / "0_ae_shapes2d"
    job_dir.parent.mkdir()
    run_dir.rename(job_dir)
    before = _snapshot(job_dir)
    res = run_cli("-m", *FAST, "model=ae", "data=shapes2d", "auto_resume=true", "trainer.max_steps=6",
                  f"hydra.sweep.dir={job_dir.parent}")
    assert res.returncode == 1 and "truncated or damaged" in (job_dir / "error.txt").read_text()
    after = _snapshot(job_dir)
    assert {k: v for k, v in after.items() if k.startswith(".hydra")} == {
        k: v for k, v in before.items() if k.startswith(".hydra")}
    run_dir = job_dir
    last = run_dir / "checkpoints" / "last.ckpt"
    last.unlink()
    res = run_cli(f"resume={run_dir}")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no checkpoint" in res.stderr, res.stderr[-2000:]
    res = run_cli(f"resume={tmp_path / 'nowhere'}")
    assert res.returncode == 2 and "no checkpoint" in res.stderr.splitlines()[-1]


def test_auto_resume_continues_from_the_output_directory(tmp_path):
    run_dir = tmp_path / "run"
    first = [*FAST, "model=ae", "data=shapes2d"]
    train(compose_config(first, output_dir=run_dir))
    train(compose_config([*first, "trainer.max_steps=6", "auto_resume=true"], output_dir=run_dir))
    assert json.loads((run_dir / "metrics.json").read_text())["step"] == 6
    # the finished run's final evaluation at step 4 is redone as a periodic one, not kept beside it
    assert [json.loads(x)["step"] for x in (run_dir / "metrics_history.jsonl").read_text().splitlines()] == [2, 4, 6]
    assert _steps(run_dir / "csv" / "metrics.csv", "eval/infom") == [2, 4, 6]
    steps = _steps(run_dir / "csv" / "metrics.csv", "train/loss")
    assert steps == sorted(set(steps)) and steps[-1] == 5 and 3 in steps  # the first run's rows kept, none twice
    assert os.path.exists(run_dir / "checkpoints" / "last.ckpt")


# -- data-parallel training ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["ae", "qlae"])
def test_two_process_ddp_training_equals_one_process_on_the_same_global_batches(model, tmp_path):
    """gloo DDP with 2 CPU processes: each rank trains on its half of every global batch and DDP averages the
    gradients, so for a per-sample-mean loss the weights after a few steps equal a 1-process run's."""
    args = [o for o in FAST if o != "print_summary=false"] + [f"model={model}", "data=shapes2d", "print_summary=false",
                                                              "+trainer.deterministic=true"]
    train(compose_config(args, output_dir=tmp_path / "one"))
    res = run_cli(*args, "trainer=ddp", "trainer.devices=2", f"hydra.run.dir={tmp_path / 'two'}", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    one = torch.load(tmp_path / "one" / "checkpoints" / "last.ckpt", weights_only=True)
    two = torch.load(tmp_path / "two" / "checkpoints" / "last.ckpt", weights_only=True)
    assert one["global_step"] == two["global_step"] == 4
    diff = max((one["state_dict"][k].double() - two["state_dict"][k].double()).abs().max().item()
               for k in one["state_dict"])
    assert diff < 1e-5, diff  # float summation order only (weights are O(0.1))
    print(f"{model}: max |w_1proc - w_2proc| = {diff:.2e}")


def test_a_global_batch_that_does_not_divide_over_the_processes_is_refused(tmp_path):
    res = run_cli(*FAST, "model=ae", "data=shapes2d", "trainer=ddp", "trainer.devices=3",
                  f"hydra.run.dir={tmp_path}", timeout=120)
    assert res.returncode == 2 and "model.batch_size=16" in res.stderr and "3 processes" in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr[-2000:]


# -- sweeps that outlive a failing job; an optimising sweeper ---------------------------------------------------
SWEEP = [o for o in FAST if o != "print_summary=false"] + ["print_summary=false", "trainer.enable_model_summary=false"]


def test_a_multirun_goes_on_past_a_failing_job_and_reports_it(tmp_path):
    res = run_cli("-m", *SWEEP, "model=ae", "data=shapes2d", "model.optimizer.lr=0.001,-1,0.002",
                  f"hydra.sweep.dir={tmp_path}", timeout=300)
    assert res.returncode == 1, res.stderr[-3000:]
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0_ae_shapes2d", "1_ae_shapes2d", "2_ae_shapes2d"]
    assert (jobs[0] / "metrics.json").is_file() and (jobs[2] / "metrics.json").is_file()
    assert not (jobs[1] / "metrics.json").exists()
    assert (jobs[1] / "error.txt").read_text() == "error: model.optimizer.lr must be > 0 (got -1.0)\n"
    assert f"sweep {tmp_path}: 2 of 3 jobs succeeded, 1 failed" in res.stdout
    assert "failed: 1_ae_shapes2d: error: model.optimizer.lr must be > 0" in res.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["succeeded"], summary["failed"]) == (2, 1)
    assert [j["status"] for j in summary["jobs"]] == ["succeeded", "failed", "succeeded"]
    from disentangle.reporting.runs import read_run  # the report lists the failed job with its line

    assert read_run(jobs[1]).error == "failed: error: model.optimizer.lr must be > 0 (got -1.0)"


def test_an_optuna_search_finishes_and_records_its_best(tmp_path):
    res = run_cli("-m", "-cd", "sweeps", "-cn", "optuna_infom", "hydra.sweeper.n_trials=3", *SWEEP, "data=shapes2d",
                  f"hydra.sweep.dir={tmp_path}", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    import yaml

    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    scores = [json.loads((tmp_path / f"{i}_qlae_shapes2d" / "metrics.json").read_text())["infom"] for i in range(3)]
    assert best["best_value"] == pytest.approx(max(scores))
    assert set(best["best_params"]) == {"model.optimizer.lr", "model.optimizer.weight_decay"}
    assert 1e-4 <= best["best_params"]["model.optimizer.lr"] <= 1e-2


def test_the_objective_applies_the_reconstruction_filter():
    from omegaconf import OmegaConf

    from disentangle.train import objective

    cfg = OmegaConf.create({"sweep_objective": {"metric": "infom", "psnr_min": 30, "infeasible": -1.0}})
    assert objective(cfg, {"infom": 0.7, "psnr": 31.0}) == 0.7
    assert objective(cfg, {"infom": 0.9, "psnr": 29.0}) == -1.0
    assert objective(OmegaConf.create({"sweep_objective": {"metric": None}}), {"infom": 0.7}) is None
    with pytest.raises(Exception, match="sweep_objective.metric='mig'"):
        objective(OmegaConf.create({"sweep_objective": {"metric": "mig"}}), {"infom": 0.7})


# -- the joblib launcher; a chaos sweep -------------------------------------------------------------------------
def test_a_joblib_multirun_runs_its_jobs_in_worker_processes_and_reports_a_failing_one(tmp_path):
    res = run_cli("-m", *SWEEP, "data=shapes2d", "model=ae", "model.optimizer.lr=0.001,-1", "hydra/launcher=joblib",
                  "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path}", timeout=300)
    assert res.returncode == 1, res.stderr[-3000:]
    import yaml

    launcher = yaml.safe_load((tmp_path / "multirun.yaml").read_text())["hydra"]["launcher"]
    assert launcher["_target_"].endswith("JoblibLauncher") and launcher["n_jobs"] == 2
    assert json.loads((tmp_path / "0_ae_shapes2d" / "metrics.json").read_text())["step"] == 4
    assert (tmp_path / "1_ae_shapes2d" / "error.txt").read_text().startswith("error: model.optimizer.lr must be > 0")
    assert f"sweep {tmp_path}: 1 of 2 jobs succeeded, 1 failed" in res.stdout


@pytest.mark.slow
def test_a_chaos_sweep_survives_random_kills_with_the_uninterrupted_results(tmp_path):
    from disentangle.chaos import chaos

    report = chaos(tmp_path, jobs=4, kills=3, seed=1, launcher="joblib", log=lambda line: None)
    assert report["kills"] == 3 and report["launches"] >= 4
    assert report["problems"] == []


def test_a_run_killed_during_its_final_evaluation_resumes_to_it(tmp_path):
    """The last checkpoint is written, then the kill comes during the final evaluation: resuming from a finished
    loop runs no step (Lightning skips it), and the final evaluation is still made, equal to the uninterrupted one."""
    args = [*FAST, "model=ae", "data=shapes2d", "+trainer.deterministic=true"]
    run_dir = tmp_path / "run"
    train(compose_config(args, output_dir=run_dir))
    expected = json.loads((run_dir / "metrics.json").read_text())
    (run_dir / "metrics.json").unlink()  # what the kill left: no metrics.json, no final history entry
    history = run_dir / "metrics_history.jsonl"
    history.write_text("".join(line + "\n" for line in history.read_text().splitlines()
                               if not json.loads(line)["final"]))
    result = train(compose_config([*args, "auto_resume=true"], output_dir=run_dir))
    resumed = json.loads((run_dir / "metrics.json").read_text())
    assert resumed["step"] == expected["step"] == 4 and result["infom"] == resumed["infom"]
    for key, value in expected.items():
        if isinstance(value, float) and key != "eval_seconds":
            assert resumed[key] == pytest.approx(value, abs=1e-6), key
    assert [(json.loads(x)["step"], json.loads(x)["final"]) for x in history.read_text().splitlines()] == [
        (2, False), (4, True)]
