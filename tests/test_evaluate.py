"""`python -m disentangle.evaluate ckpt=PATH`: re-evaluates a training checkpoint through the real CLI."""
import json
import math
import shutil

import forked_cli
import pytest
from conftest import FIGURES


def run_evaluate(*args):
    return forked_cli.run("disentangle.evaluate", *args, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, trained_run):
    """The shared tiny Tripod run (conftest.trained_run), copied: evaluating writes next to its checkpoint."""
    out = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(trained_run("model=tripod", "data=shapes2d"), out)
    return out


EVAL = ["callbacks.evaluation.dci.max_depth=4", "callbacks.evaluation.dci.n_estimators=10",
        "callbacks.evaluation.n_samples=256", "callbacks.evaluation.n_interventions=3",
        "callbacks.evaluation.progress=false", FIGURES]


def test_evaluate_reproduces_the_training_runs_final_metrics_next_to_the_checkpoint(trained):
    ckpt = trained / "checkpoints" / "last.ckpt"
    res = run_evaluate(f"ckpt={ckpt}", *EVAL)
    assert res.returncode == 0, res.stderr[-2000:]
    again = json.loads((ckpt.parent / "metrics.json").read_text())
    first = json.loads((trained / "metrics.json").read_text())
    for key in ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr"):
        assert again[key] == pytest.approx(first[key], abs=1e-6), key
    assert (ckpt.parent / "nmi_heatmap.png").is_file() and (ckpt.parent / "interventions.png").is_file()
    assert "InfoM" in res.stdout and "step 4" in res.stdout


def test_evaluate_runs_only_the_chosen_metrics_into_a_given_directory(trained, tmp_path):
    res = run_evaluate(f"ckpt={trained / 'checkpoints' / 'last.ckpt'}", "metrics=[infomec]",
                       f"output_dir={tmp_path}", *EVAL)
    assert res.returncode == 0, res.stderr[-2000:]
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert "infom" in record and "dci_d" not in record


@pytest.mark.parametrize(
    "args, message",
    [
        (["ckpt=/nonexistent/last.ckpt"], "no such checkpoint"),
        (["metrics=[infomec,migg]"], "metrics: unknown ['migg']; choose from"),
        (["data=sprites"], "was trained on 3x16px"),
    ],
)
def test_evaluate_bad_input_is_one_line(trained, args, message):
    if not args[0].startswith("ckpt="):
        args = [f"ckpt={trained / 'checkpoints' / 'last.ckpt'}", *args]
    res = run_evaluate(*args, *EVAL)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], res.stderr[-1500:]


SMALL_SAMPLED = [f"callbacks.evaluation.{m}.{k}={v}" for m in ("factorvae", "betavae")
                 for k, v in (("n_train", 40), ("n_eval", 20), ("batch_size", 8))]


def test_evaluate_all_metrics_prints_and_records_each(trained, tmp_path):
    res = run_evaluate(f"ckpt={trained / 'checkpoints' / 'last.ckpt'}", "metrics=all", f"output_dir={tmp_path}",
                       "callbacks.evaluation.factorvae.n_variance=100", *SMALL_SAMPLED, *EVAL)
    assert res.returncode == 0, res.stderr[-2000:]
    record = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "mig", "sap", "modularity", "explicitness",
                "mcc", "factorvae", "betavae", "psnr", "mse"):
        assert 0 <= record[key] <= (100 if key == "psnr" else 1), key
    # mean per-image PSNR >= PSNR of the mean MSE (Jensen: -log is convex), and close to it
    assert 0 <= record["psnr"] + 10 * math.log10(record["mse"]) < 3.0
    for label in ("MIG", "SAP", "Mod", "Expl", "MCC", "FactorVAE", "BetaVAE", "MSE"):
        assert label in res.stdout, label
    for name in ("nmi_heatmap.png", "dci_importance.png", "interventions.png", "reconstructions.png"):
        assert (tmp_path / name).is_file(), name


def test_evaluate_a_failing_metric_is_one_line_naming_the_metric_error(trained, tmp_path):
    res = run_evaluate(f"ckpt={trained / 'checkpoints' / 'last.ckpt'}", "metrics=[factorvae]",
                       f"output_dir={tmp_path}", "callbacks.evaluation.factorvae.batch_size=1", *EVAL)
    assert res.returncode == 1
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert lines == ["error: evaluation at step 4 failed: ValueError: batch_size must be >= 2, got 1"], res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "metrics.json").exists()
