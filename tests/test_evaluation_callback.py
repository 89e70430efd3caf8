"""The evaluation callback off the training critical path: metrics computed in a worker thread reach the CSV
logger (at the step they were taken), the history and metrics.json; worker errors surface on the training
thread; training keeps stepping while the metrics compute; pending work is delivered when training crashes.
Also the new figures (DCI importance heatmap, reconstruction grid)."""
import csv
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import pytorch_lightning as pl
from conftest import FAST, compose_config
from conftest import FIGURES as FIGURES_ON
from hydra.utils import instantiate
from matplotlib.image import imread

from disentangle.callbacks import DisentanglementEvaluation, EvaluationError
from disentangle.callbacks.figures import dci_importance_heatmap, reconstruction_grid
from disentangle.metrics.accumulate import disentanglement_metrics
from disentangle.runtime.run import build, train

FIGURES = ("nmi_heatmap.png", "dci_importance.png", "interventions.png", "reconstructions.png")


def _job(tmp_path, *overrides, **evaluation):
    """The run's objects from the real config; with keyword arguments the evaluation callback is rebuilt from
    its config with those constructor arguments added (e.g. ``metric_fn``)."""
    cfg = compose_config(FAST + ["model=tripod", "data=shapes2d", *overrides], output_dir=tmp_path)
    pl.seed_everything(0, verbose=False)
    job = build(cfg)
    if evaluation:
        rebuilt = instantiate(cfg.callbacks.evaluation, **evaluation)
        callbacks = job.trainer.callbacks
        callbacks[callbacks.index(job.evaluation)] = rebuilt
        job.evaluation = rebuilt
    return job


def _fit(job):
    job.trainer.fit(job.model, datamodule=job.datamodule)


def _eval_rows(tmp_path):
    with open(tmp_path / "csv" / "metrics.csv") as f:
        return [row for row in csv.DictReader(f) if row.get("eval/infom")]


def _no_worker_left(evaluation):
    return evaluation.worker.idle and not any(
        t.name.startswith("disentangle-eval") for t in threading.enumerate())


class Gate:
    """A metric_fn (the callback's ``metric_fn`` parameter) whose first call blocks until ``release`` is set;
    later calls run at once. Records the threads it ran on."""

    def __init__(self, timeout=45.0):
        self.release = threading.Event()
        self.timeout = timeout
        self.released: bool | None = None
        self.threads: list[str] = []

    def __call__(self, latents, factors, **kwargs):
        self.threads.append(threading.current_thread().name)
        if len(self.threads) == 1:
            self.released = self.release.wait(self.timeout)
        return disentanglement_metrics(latents, factors, **kwargs)


class OnStep(pl.Callback):
    """Calls ``action(trainer)`` at the end of the batch that makes ``global_step == step``."""

    def __init__(self, step, action):
        self.step, self.action = step, action

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            self.action(trainer)


def test_background_results_reach_the_csv_logger_history_and_metrics_json(tmp_path):
    job = _job(tmp_path, "trainer.max_steps=6", "callbacks.evaluation.every_n_steps=2", FIGURES_ON)
    assert job.evaluation.background  # the default
    _fit(job)
    history = job.evaluation.history
    assert [(h["step"], h["final"]) for h in history] == [(2, False), (4, False), (6, True)]
    assert "dci_d" not in history[0] and "dci_d" in history[-1]  # DCI only at the end (periodic_metrics)
    # logged at the step each evaluation was taken, with the worker's numbers
    rows = {int(r["step"]): r for r in _eval_rows(tmp_path)}
    assert sorted(rows) == [2, 4, 6]
    for h in history:
        for key in ("infom", "infoe", "infoc", "psnr"):
            assert float(rows[h["step"]][f"eval/{key}"]) == h[key], (h["step"], key)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["step"] == 6
    for key in ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr"):
        assert record[key] == history[-1][key] == job.evaluation.last[key], key
    lines = (tmp_path / "metrics_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4, 6]
    for name in FIGURES:
        assert (tmp_path / name).stat().st_size > 1000, name
    assert set(job.evaluation.artifacts) >= {"metrics", "nmi_heatmap", "dci_importance", "interventions",
                                             "reconstructions"}
    assert _no_worker_left(job.evaluation)


def test_background_and_inline_evaluation_give_the_same_numbers(tmp_path):
    records = []
    for background in ("true", "false"):
        out = tmp_path / background
        overrides = ["model=tripod", "data=shapes2d", f"callbacks.evaluation.background={background}"]
        train(compose_config(FAST + overrides, output_dir=out))
        record = json.loads((out / "metrics.json").read_text())
        record.pop("eval_seconds")
        for timing in ("compile_probe_s", "compile_reason", "first_step_s"):  # timings of the run's own steps
            record["runtime"].pop(timing, None)
        records.append(record)
    assert records[0] == records[1]


def test_training_keeps_stepping_while_the_metrics_compute(tmp_path):
    """The step-2 evaluation's metric computation blocks until training has reached step 6: it can only finish
    if the training loop is not waiting for it."""
    gate = Gate()
    seen = {}

    def release(trainer):
        seen["history_at_release"] = len(job.evaluation.history)
        gate.release.set()

    job = _job(tmp_path, "trainer.max_steps=8", "callbacks.evaluation.every_n_steps=2", metric_fn=gate)
    job.trainer.callbacks.append(OnStep(6, release))
    _fit(job)
    assert gate.released, "the step-2 evaluation was still blocked: training did not reach step 6 meanwhile"
    assert seen["history_at_release"] == 0  # steps 3-6 ran while the step-2 metrics were computing
    assert all(name.startswith("disentangle-eval") for name in gate.threads) and len(gate.threads) == 4
    assert [h["step"] for h in job.evaluation.history] == [2, 4, 6, 8]
    assert sorted(int(r["step"]) for r in _eval_rows(tmp_path)) == [2, 4, 6, 8]
    assert _no_worker_left(job.evaluation)


def _failing(at):
    def metric_fn(latents, factors, *, metrics, **kwargs):
        if at == "final" and "dci" not in metrics:  # periodic evaluations succeed, the final one (with DCI) fails
            return disentanglement_metrics(latents, factors, metrics=metrics, **kwargs)
        raise ValueError("estimator exploded")

    return metric_fn


@pytest.mark.parametrize("at, step", [("periodic", 2), ("final", 4)])
def test_a_worker_exception_is_raised_on_the_training_thread_naming_the_step(tmp_path, at, step):
    job = _job(tmp_path, metric_fn=_failing(at))
    with pytest.raises(EvaluationError, match=f"evaluation at step {step} failed in the background worker: "
                                              "ValueError: estimator exploded") as info:
        _fit(job)
    assert isinstance(info.value.__cause__, ValueError)
    assert not (tmp_path / "metrics.json").exists()
    assert _no_worker_left(job.evaluation)


def test_an_inline_exception_is_raised_too(tmp_path):
    job = _job(tmp_path, "callbacks.evaluation.background=false", metric_fn=_failing("periodic"))
    with pytest.raises(EvaluationError, match="evaluation at step 2 failed: ValueError"):
        _fit(job)
    assert job.trainer.global_step == 2  # inline: the run stops at the evaluation that failed


def test_a_pending_evaluation_is_delivered_when_training_crashes(tmp_path):
    """Training fails at step 3 while the step-2 metrics are still computing: the callback waits for them, so
    they reach the logger and the history before the exception propagates."""
    gate = Gate()

    def crash(trainer):
        gate.release.set()  # the step-2 computation can finish only from now on: it is pending at the crash
        raise RuntimeError("boom at step 3")

    job = _job(tmp_path, "trainer.max_steps=6", "callbacks.evaluation.every_n_steps=2", metric_fn=gate)
    job.trainer.callbacks.append(OnStep(3, crash))
    with pytest.raises(RuntimeError, match="boom at step 3"):
        _fit(job)
    assert [h["step"] for h in job.evaluation.history] == [2]
    assert [int(r["step"]) for r in _eval_rows(tmp_path)] == [2]
    assert not (tmp_path / "metrics.json").exists()  # no final evaluation after a crash
    assert _no_worker_left(job.evaluation)


def test_run_without_a_trainer_computes_on_the_calling_thread_and_writes_everything(tmp_path):
    job = _job(tmp_path / "unused")
    evaluator = DisentanglementEvaluation(
        output_dir=tmp_path, n_samples=64, batch_size=24, dci={"max_depth": 2, "n_estimators": 5},
        n_interventions=2, n_reconstructions=3, progress=False, save_latents=True,
    )
    result = evaluator.run(job.model, job.datamodule, step=7)
    assert evaluator.worker.executor is None  # run() never starts a worker
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["step"] == 7 and record["n_samples"] == 64 and record["dci_d"] == result["dci_d"]
    assert np.array(record["dci_importance"]).shape == (12, 6)
    arrays = np.load(tmp_path / "latents.npz")
    assert arrays["latents"].shape == (64, 12) and arrays["factors"].shape == (64, 6)
    assert result["psnr"] == pytest.approx(arrays["psnr"].mean())
    for name in FIGURES:
        assert (tmp_path / name).stat().st_size > 1000, name
    assert not (tmp_path / "metrics_history.jsonl").exists()  # history files belong to training runs


def test_new_figures_render_in_a_worker_thread(tmp_path):
    rng = np.random.default_rng(0)
    importance = rng.dirichlet(np.ones(5), size=3).T  # (5 latents, 3 factors), columns sum to 1
    originals, recons = rng.uniform(size=(2, 4, 3, 16, 16))
    with ThreadPoolExecutor(1) as pool:  # the object API needs no pyplot state: safe off the main thread
        heat = pool.submit(dci_importance_heatmap, importance, ["a", "b", "c"], tmp_path / "dci.png").result()
        grid = pool.submit(reconstruction_grid, originals, recons, tmp_path / "rec.png").result()
    for path in (heat, grid):
        image = imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) > 100
    gray = rng.uniform(size=(2, 1, 8, 8))
    reconstruction_grid(gray, gray, tmp_path / "gray.png")  # one-channel images
    with pytest.raises(ValueError, match="originals and reconstructions"):
        reconstruction_grid(originals, recons[:2], tmp_path / "bad.png")
