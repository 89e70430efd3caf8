"""Every model family survives a SIGKILL (issue 23): the families are derived from ``conf/model`` and
``conf/experiment`` (model class x latent module x several updates per step or not x a labelled stream or not x
encoder-only or not); each has a representative that is killed after its first checkpoint and resumed, ending
with the uninterrupted run's metrics. A new family without a representative fails the enumeration test, naming it."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import CONF, FAST, MODELS, ROOT, compose_config
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from disentangle.families import FAMILIES, Family, family_of
from disentangle.run import train

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


# short runs on tiny networks: killed after the first checkpoint (step 4), resumed to step 16
SHORT = [o for o in FAST if not o.startswith(("trainer.max_steps", "callbacks.checkpoint", "callbacks.evaluation.every",
                                              "callbacks.evaluation.dci"))]
SHORT += ["trainer.max_steps=16", "callbacks.checkpoint.every_n_train_steps=4", "callbacks.evaluation.every_n_steps=8",
          "+trainer.deterministic=true", "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.figures=false",
          "callbacks.evaluation.n_samples=128"]
IMAGES = [*SHORT, "data=shapes2d"]
# encoder-only on Cliff's 2-D data (FAMILIES selects it with experiment=cliff2d): an MLP encoder, no image options
CLIFF2D = [o for o in SHORT if not o.startswith(("model/arch", "data.resolution", "model.batch_size"))]
CLIFF2D += ["data.num_samples=256", "data.eval_size=128", "model.batch_size=64",
            "callbacks.evaluation.metrics=[mcc]", "callbacks.evaluation.periodic_metrics=[mcc]"]

# semi-supervised: a second, labelled stream of batches drawn by the supervision regularizer
SEMI = [*IMAGES, "model.regularizers.supervision.n_labels=40", "model.regularizers.supervision.batch_size=8"]


def _short_run(family: Family) -> list[str]:
    return CLIFF2D if family.encoder_only else SEMI if family.labelled_stream else IMAGES


# each family's representative (disentangle.families) with this test's short-run settings
REPRESENTATIVES: dict[Family, list[str]] = {family: [*_short_run(family), *choice] for family, choice in FAMILIES.items()}


def _family_of_config(overrides: list[str]) -> Family:
    cfg = compose_config(overrides)
    try:
        model = instantiate(cfg.model, in_channels=3, resolution=64, dataset_size=1000)
    except (InstantiationException, ValueError, TypeError):  # non-image data (Cliff's 2-D points): its shape
        data = instantiate(cfg.data)
        model = instantiate(cfg.model, in_channels=data.num_channels, resolution=data.resolution, dataset_size=1000)
    return family_of(model)


def test_every_family_of_the_configs_has_a_representative():
    found: dict[Family, list[str]] = {}
    for name in MODELS:
        found.setdefault(_family_of_config([f"model={name}", "model/arch=small"] if "balls" not in name
                                           else [f"model={name}", "data=balls"]), []).append(f"model={name}")
    for name in EXPERIMENTS:
        text = (CONF / "experiment" / f"{name}.yaml").read_text()
        if "override /model:" in text:  # it brings its model
            found.setdefault(_family_of_config([f"experiment={name}"]), []).append(f"experiment={name}")
            continue
        if "/regularizer" not in text:  # no regularizer added: every model keeps its family
            continue
        for model in MODELS:  # a regularizer it adds may change any model's family
            if "balls" in model:
                continue
            try:
                family = _family_of_config([f"experiment={name}", f"model={model}", "model/arch=small"])
            except (InstantiationException, ValueError):  # a combination the configs refuse (one line)
                continue
            found.setdefault(family, []).append(f"experiment={name} model={model}")
    missing = {family: configs for family, configs in found.items() if family not in REPRESENTATIVES}
    assert not missing, f"model families without a kill-and-resume representative: {missing}"
    for family, overrides in REPRESENTATIVES.items():  # each representative is what it claims to be
        assert _family_of_config(overrides) == family, overrides


class KillAfterFirstCheckpoint(threading.Thread):
    """Watches a training subprocess and SIGKILLs it as soon as its first checkpoint is on disk (a thread, so the
    uninterrupted twin can train in this process meanwhile, while the subprocess starts up)."""

    def __init__(self, args: list[str], run_dir: Path, timeout: float = 300):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "disentangle.train", *args, f"hydra.run.dir={run_dir}"],
                                     cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.last, self.timeout, self.problem = run_dir / "checkpoints" / "last.ckpt", timeout, None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.last.exists():
            if self.proc.poll() is not None:
                self.problem = f"the run ended before its first checkpoint: {self.proc.stderr.read()[-2000:]}"
                return
            if time.monotonic() > deadline:
                self.proc.kill()
                self.problem = "no checkpoint in time"
                return
            time.sleep(0.002)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def result(self) -> int:
        self.join()
        assert self.problem is None, self.problem
        return self.proc.returncode


@pytest.mark.parametrize("family", list(REPRESENTATIVES), ids=lambda f: "-".join(str(x) for x in f))
def test_each_family_killed_and_resumed_ends_where_the_uninterrupted_run_does(family, tmp_path):
    args = REPRESENTATIVES[family]
    full, killed = tmp_path / "full", tmp_path / "killed"
    watcher = KillAfterFirstCheckpoint(args, killed)  # the CLI in a subprocess, killed after its first checkpoint
    train(compose_config(args, output_dir=full))  # meanwhile, its uninterrupted twin here
    assert watcher.result() == -signal.SIGKILL
    assert not (killed / "metrics.json").exists()
    killed_at = torch.load(killed / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert 0 < killed_at < 16, killed_at
    train(compose_config([*args, "auto_resume=true"], output_dir=killed))  # what a relaunched sweep job does
    expected = json.loads((full / "metrics.json").read_text())
    resumed = json.loads((killed / "metrics.json").read_text())
    assert resumed["step"] == expected["step"] == 16
    compared = [k for k, v in expected.items() if isinstance(v, float) and k != "eval_seconds"]
    assert compared, expected
    for key in compared:
        assert resumed[key] == pytest.approx(expected[key], abs=1e-6), key
    history = lambda d: [json.loads(x)["step"] for x in (d / "metrics_history.jsonl").read_text().splitlines()]
    assert history(killed) == history(full) == [8, 16]
