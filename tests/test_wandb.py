"""W&B runs with the real wandb library, offline (issue 29): what the run defines against the training step, the
figures of every evaluation at their step, and a killed run that resumes into the same W&B run with each evaluation
point logged exactly once. What wandb persisted is read back from its transaction logs by the project's one reader
(:mod:`disentangle.runtime.wandb_log`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import FAST, ROOT

from disentangle.runtime.wandb_log import WandbLogFormatError, history_rows, logged_points, records, run_logs

ENV = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
# ~0.5 s of steps between checkpoints; evaluations at 8, 16, 24 and the final one at 24
RUN = [o for o in FAST if not o.startswith(("trainer.max_steps", "callbacks.checkpoint", "callbacks.evaluation.every",
                                            "callbacks.evaluation.figures"))]
RUN += ["trainer.max_steps=24", "callbacks.checkpoint.every_n_train_steps=4", "callbacks.evaluation.every_n_steps=8",
        "+trainer.deterministic=true", "trainer.log_every_n_steps=2", "model=ae", "data=shapes2d", "logger=wandb",
        "callbacks.evaluation.figures=true", "callbacks.evaluation.n_interventions=3",
        "callbacks.evaluation.background=false"]


def _train(*args, env=None) -> subprocess.Popen:
    """A training job in a process group of its own, with its own wandb service as a Slurm job has (not the one an
    in-process W&B test may have left this pytest process, which a child would otherwise share via WANDB_SERVICE)."""
    own = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return subprocess.Popen([sys.executable, "-m", "disentangle.train", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**own, **ENV, **(env or {})},
                            start_new_session=True)


def _points(run_dir: Path) -> tuple[str, list[Path], list[dict]]:
    record = json.loads((run_dir / "wandb_run.json").read_text())
    logs = run_logs(run_dir / "wandb", record["id"])
    return record["id"], logs, [row for path in logs for row in history_rows(path)]


def _steps(rows: list[dict], key: str) -> list[int]:
    return sorted(int(r["trainer/global_step"]) for r in rows if key in r)


SWEEP = ["-m", *RUN, "auto_resume=true"]
JOB = "0_ae_shapes2d"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The one-job multirun run through: the twin of the killed one, and a run to inspect."""
    sweep = tmp_path_factory.mktemp("uninterrupted")
    res = _train(*SWEEP, f"hydra.sweep.dir={sweep}")
    assert res.wait(timeout=600) == 0, res.stderr.read()[-3000:]
    return sweep / JOB


def test_a_killed_sweep_job_resumes_into_its_wandb_run_with_every_evaluation_once(uninterrupted, tmp_path):
    """A one-job multirun (what a Slurm requeue reruns: the same job directory, auto_resume=true) is SIGKILLed as a
    process group once its second checkpoint exists, then launched again; it must equal its uninterrupted twin."""
    killed = tmp_path / "killed"
    proc = _train(*SWEEP, f"hydra.sweep.dir={killed}")
    ckpt = killed / JOB / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not (ckpt.exists() and torch.load(ckpt, weights_only=True)["global_step"] >= 8):
        assert proc.poll() is None, f"the run ended before the kill: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    job = killed / JOB
    assert not (job / "metrics.json").exists()
    first_id, first_logs, _ = _points(job)
    assert len(first_logs) == 1  # the killed process's log (what its wandb service persisted before the kill)

    res = _train(*SWEEP, f"hydra.sweep.dir={killed}")  # the relaunch resumes
    assert res.wait(timeout=600) == 0, res.stderr.read()[-3000:]

    run_id, logs, rows = _points(job)
    assert run_id == first_id and len(logs) == 2  # one W&B run: the same id, one log per process
    _, _, twin = _points(uninterrupted)
    history = [json.loads(x)["step"] for x in (job / "metrics_history.jsonl").read_text().splitlines()]
    assert history == [8, 16, 24]
    for key in ("eval/infom", "eval/psnr", "eval/interventions", "eval/reconstructions"):
        assert _steps(rows, key) == _steps(twin, key) == history, key  # every evaluation once, none lost
    loss = _steps(rows, "train/loss")
    assert len(loss) == len(set(loss)) and set(loss) <= set(_steps(twin, "train/loss"))  # none twice
    assert loss[-1] == _steps(twin, "train/loss")[-1]
    infom = {int(r["trainer/global_step"]): r["eval/infom"] for r in rows if "eval/infom" in r}
    expected = {int(r["trainer/global_step"]): r["eval/infom"] for r in twin if "eval/infom" in r}
    assert infom == pytest.approx(expected, abs=1e-6)  # the resumed values are the uninterrupted ones
    record = json.loads((job / "wandb_run.json").read_text())
    assert record["summary"]["best_infom"] == pytest.approx(max(expected.values()))


def test_a_run_defines_every_metric_against_the_training_step_and_logs_each_evaluations_figures(uninterrupted):
    run_dir = uninterrupted
    run_id, logs, rows = _points(run_dir)
    defined = {}
    for record in _records(logs[0]):
        if record.WhichOneof("record_type") == "metric":
            defined[record.metric.name or record.metric.glob_name] = record.metric.step_metric
    assert defined.get("*") == "trainer/global_step", defined
    assert not _artifacts(logs[0])  # checkpoints go to W&B only when asked
    for figure in ("interventions", "reconstructions", "nmi_heatmap"):
        assert _steps(rows, f"eval/{figure}") == [8, 16, 24], figure
        assert (run_dir / "figures" / "step_8" / f"{figure}.png").is_file()
    assert (run_dir / "interventions.png").is_file() and not (run_dir / "figures" / "step_24").exists()
    assert {(8, "eval/infom"), (24, "eval/dci_d")} <= logged_points(run_dir / "wandb", run_id)


def _records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for raw in records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        out.append(record)
    return out


def _artifacts(path: Path) -> list[tuple[str, str]]:
    return [(r.artifact.type, r.artifact.name) for r in _records(path) if r.WhichOneof("record_type") == "artifact"]


def test_a_log_the_reader_does_not_understand_stops_naming_the_wandb_version(tmp_path):
    import wandb

    path = tmp_path / "run-x.wandb"
    path.write_bytes(b"LEVELDB\x00" + bytes(64))
    with pytest.raises(WandbLogFormatError, match=f"wandb {wandb.__version__}"):
        list(records(path))
    path.write_bytes(b":W&B\xe1\xbe\x00" + b"\x00\x00\x00\x00\x05\x00\x01abc")  # a record cut by a kill
    assert history_rows(path) == []


def test_a_finished_run_continued_longer_keeps_its_wandb_run_and_logs_no_point_twice(tmp_path, monkeypatch):
    """Its whole log was persisted (the run finished): continuing with more steps redoes the evaluation at the old
    last step as a periodic one; the W&B run already holds that point, so it is not logged again."""
    from conftest import compose_config

    from disentangle.runtime.run import train

    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    short = [o for o in RUN if not o.startswith(("trainer.max_steps", "callbacks.evaluation.figures"))]
    short += ["callbacks.evaluation.figures=false"]
    train(compose_config([*short, "trainer.max_steps=8", "logger.log_model=true"], output_dir=tmp_path))
    first_id = json.loads((tmp_path / "wandb_run.json").read_text())["id"]
    # in one process: the resume waits for the finished run's wandb service to write its log (wandb.teardown)
    train(compose_config([*short, "trainer.max_steps=16", "auto_resume=true"], output_dir=tmp_path))
    import wandb

    wandb.teardown()  # finish() returns before the service has written the log's last records (the CI saw step 16 lost)
    run_id, logs, rows = _points(tmp_path)
    assert run_id == first_id and len(logs) == 2
    assert _steps(history_rows(logs[0]), "eval/infom") == [8]  # held by the first process's log: not logged again
    assert {kind for kind, _ in _artifacts(logs[0])} == {"model"}  # logger.log_model=true: the checkpoints
    assert _steps(rows, "eval/infom") == [8, 16] and _steps(rows, "eval/dci_d") == [8, 16]
    loss = _steps(rows, "train/loss")
    assert loss == sorted(set(loss)) and loss[-1] == 15
    assert json.loads((tmp_path / "wandb_run.json").read_text())["summary"]["step"] == 16


def test_logging_to_wandb_without_a_key_says_it_logs_offline_and_how_to_sync(tmp_path, monkeypatch, capsys):
    """No WANDB_API_KEY, no `wandb login` and no WANDB_MODE: one line says the run logs offline and names the
    `wandb sync` command for the folder the real wandb library writes (issue 45)."""
    from disentangle.runtime.loggers import wandb_logger

    for name in ("WANDB_API_KEY", "WANDB_MODE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = wandb_logger(save_dir=str(tmp_path / "run"), model="ae", data="shapes2d", seed=0)
    logger.experiment.log({"x": 1.0})  # the real wandb.init, offline
    logger.experiment.finish()
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("W&B:")]
    where = tmp_path / "run" / "wandb"
    assert line == (f"W&B: no API key (WANDB_API_KEY or `wandb login`), so this run logs offline under {where}; "
                    f"upload it later with `wandb sync {where}/offline-run-*`")
    assert list(where.glob("offline-run-*")), "the command names a folder wandb did not write"
    # `report --wandb` on that run logs into the run's own group (its wandb_run.json), not the folder's name; on a
    # sweep folder, its jobs' group
    from disentangle.report import _sweep_group

    assert _sweep_group(tmp_path / "run") == "ae-shapes2d"
    sweep = tmp_path / "multirun" / "2026-01-01_12-00-00"
    (sweep / "0_ae_shapes2d").mkdir(parents=True)
    (sweep / "0_ae_shapes2d" / "wandb_run.json").write_text((tmp_path / "run" / "wandb_run.json").read_text())
    assert _sweep_group(sweep) == "ae-shapes2d"
    assert _sweep_group(tmp_path / "multirun") == "multirun"  # no record: the folder's name, as before
    # with a mode chosen, nothing is said
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_logger(save_dir=str(tmp_path / "run2"), model="ae", data="shapes2d", seed=0)
    assert "W&B:" not in capsys.readouterr().err
