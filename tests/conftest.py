"""Shared test helpers: compose the real Hydra config in-process, with fast settings for CPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import disentangle.runtime.config  # noqa: F401  (resolvers)

ROOT = Path(__file__).resolve().parents[1]
# a test stopped by the global timeout (pyproject: [tool.pytest.ini_options] timeout) leaves no process behind
pytest_plugins = ["process_cleanup"]
CONF = ROOT / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
DATASETS = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
PROCEDURAL = ("shapes2d", "sprites")

# a few steps of the small architecture on 16x16 images, a small evaluation: seconds per run
FAST = [
    "model/arch=small",
    "data.resolution=16",
    "trainer.max_steps=4",
    "trainer.accelerator=cpu",
    "trainer.enable_model_summary=false",
    "trainer.enable_progress_bar=false",
    "~callbacks.progress",
    "trainer.log_every_n_steps=1",
    "model.batch_size=16",
    "callbacks.evaluation.n_samples=256",
    "callbacks.evaluation.every_n_steps=2",
    "callbacks.evaluation.dci.max_depth=4",
    "callbacks.evaluation.dci.n_estimators=10",
    "callbacks.evaluation.n_interventions=3",
    "callbacks.evaluation.progress=false",
    "callbacks.checkpoint.every_n_train_steps=2",
    "print_summary=false",
]

torch.set_num_threads(min(2, os.cpu_count() or 1))


def compose_config(overrides, output_dir=None):
    """The composed job config, exactly as the CLI would build it (output dir set explicitly)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        extra = [f"paths.output_dir={output_dir}"] if output_dir else ["paths.output_dir=/tmp/unused"]
        return compose("train", overrides=list(overrides) + extra)


def run_cli(*args, env=None, timeout=600):
    """Run `python -m disentangle.train ARGS` in a subprocess; returns CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "disentangle.train", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env, check=False,
    )


@pytest.fixture
def fast_overrides():
    return list(FAST)
