"""Re-evaluation equals training: `disentangle.evaluate` takes the run's own evaluation settings from the checkpoint
(issue 29 item 4), command-line overrides on top, and says which it used."""
from __future__ import annotations

import json

import forked_cli
import pytest
from conftest import FAST, run_cli

# settings unlike conf/callbacks/default.yaml's, as the quickstart and the paper sweeps set them
OWN = ["callbacks.evaluation.infomec.ksg_k=5", "callbacks.evaluation.dci.completeness=weighted",
       "callbacks.evaluation.n_samples=300"]


def evaluate(*args):
    proc = forked_cli.run("disentangle.evaluate", *args, "callbacks.evaluation.figures=false", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def scalars(path):
    record = json.loads(path.read_text())
    return {k: v for k, v in record.items() if isinstance(v, float) and k != "eval_seconds"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("reeval")
    res = run_cli(*FAST, "model=qlae", *OWN, f"hydra.run.dir={out}")
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def test_the_checkpoint_reevaluates_to_the_runs_own_metrics(run_dir):
    stdout = evaluate(f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}", f"output_dir={run_dir / 'again'}")
    assert "evaluation settings: the run's own, stored in the checkpoint" in stdout
    trained, again = scalars(run_dir / "metrics.json"), scalars(run_dir / "again" / "metrics.json")
    assert set(trained) == set(again) and {"infom", "dci_d", "dci_c", "psnr"} <= set(trained)
    for key, value in trained.items():
        assert again[key] == pytest.approx(value, abs=1e-6), key


def test_the_defaults_on_request_and_overrides_on_top_are_said_and_used(run_dir):
    ckpt = f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}"
    stdout = evaluate(ckpt, "eval_settings=default", f"output_dir={run_dir / 'default'}")
    assert "evaluation settings: conf/callbacks/default.yaml" in stdout
    trained, default = scalars(run_dir / "metrics.json"), scalars(run_dir / "default" / "metrics.json")
    assert default["dci_c"] != pytest.approx(trained["dci_c"], abs=1e-6)  # other estimators, another subset

    override = "callbacks.evaluation.dci.n_estimators=20"
    stdout = evaluate(ckpt, override, f"output_dir={run_dir / 'more'}")
    assert f"the run's own, stored in the checkpoint; from the command line: {override}" in stdout
    more = scalars(run_dir / "more" / "metrics.json")
    assert more["dci_i"] != pytest.approx(trained["dci_i"], abs=1e-6)  # the override's forests ran
    for key in ("infom", "infoe", "infoc", "psnr"):  # the rest is the run's (InfoMEC options, the subset)
        assert more[key] == pytest.approx(trained[key], abs=1e-6), key


def test_a_paper_sweep_configs_settings_are_kept(tmp_path):
    """Tripod Table 1's estimators (KSG k=10, IQR activity rule, depth-10 forests, weighted completeness)."""
    fast = [o for o in FAST if not o.startswith("callbacks.evaluation.dci.max_depth")]
    res = run_cli("-cd", "sweeps", "-cn", "tripod_table1", *fast, "data=shapes2d", f"hydra.run.dir={tmp_path}")
    assert res.returncode == 0, res.stderr[-2000:]
    stdout = evaluate(f"ckpt={tmp_path / 'checkpoints' / 'last.ckpt'}", f"output_dir={tmp_path / 'again'}")
    assert "the run's own" in stdout
    trained, again = scalars(tmp_path / "metrics.json"), scalars(tmp_path / "again" / "metrics.json")
    for key, value in trained.items():
        assert again[key] == pytest.approx(value, abs=1e-6), key
