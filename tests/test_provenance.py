"""Every run says what produced it: metrics.json records the versions that matter for a number and the commit."""
from __future__ import annotations

import json
import platform
import subprocess
from importlib import metadata

import forked_cli
from conftest import FAST, ROOT, compose_config

from disentangle.foundation.provenance import cpu_info, git_state, machine, software_versions
from disentangle.runtime.run import train

REQUIRED = {"python", "disentangle", "torch", "pytorch_lightning", "hydra", "numpy", "scikit_learn", "scipy", "wandb"}


def test_the_versions_are_the_installed_distributions_and_the_checkout_commit():
    versions = software_versions()
    assert REQUIRED <= set(versions), REQUIRED - set(versions)
    assert versions["python"] == platform.python_version()
    for dist, key in (("torch", "torch"), ("scikit-learn", "scikit_learn"), ("wandb", "wandb"), ("numpy", "numpy")):
        assert versions[key] == metadata.version(dist)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert versions["git_commit"] == head and isinstance(versions["git_dirty"], bool)


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert git_state(tmp_path) == {}


def test_metrics_json_of_training_and_of_evaluate_record_the_versions(tmp_path):
    train(compose_config(FAST + ["model=qlae"], output_dir=tmp_path))
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["versions"] == json.loads(json.dumps(software_versions()))
    assert record["machine"] == machine() and record["machine"]["cpu"] == cpu_info()[0]  # where: CPUs differ

    out = tmp_path / "evaluated"
    proc = forked_cli.run(
        "disentangle.evaluate", f"ckpt={tmp_path / 'checkpoints' / 'last.ckpt'}", f"output_dir={out}",
        "callbacks.evaluation.figures=false", "callbacks.evaluation.n_samples=256",
        "callbacks.evaluation.progress=false", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    evaluated = json.loads((out / "metrics.json").read_text())
    assert evaluated["versions"]["torch"] == record["versions"]["torch"]
    assert evaluated["versions"]["git_commit"] == record["versions"]["git_commit"]
