"""``python -m disentangle.doctor`` on this CPU: a small subset of the families in fp32 and bf16 through the real
training path, the concurrency measurement with worker processes on the CPU (the testing option standing in for a
GPU), the GPU-vs-CPU evaluation comparison run as CPU-vs-CPU, one paper step timed, the recommendation rule on given
numbers, a failing family reported as a failure, and a bad option in one line."""
from __future__ import annotations

import json
import math

import pytest
from rich.console import Console

from disentangle.doctor import compare_evaluations, main, recommend_runs_per_gpu, run_family, time_cases
from disentangle.doctor.tables import print_report
from disentangle.runtime.families import FAMILIES, family_of


def test_doctor_on_the_cpu_trains_families_in_both_precisions_and_names_what_it_skipped(tmp_path):
    out = tmp_path / "doctor.json"
    code = main(["--families", "qlae", "cliff2d", "--steps", "2", "--skip-timing", "--json", str(out),
                 "--workdir", str(tmp_path / "runs"), "--concurrency-device", "cpu", "--concurrency-runs", "1", "2",
                 "--concurrency-steps", "2", "--concurrency-batch-size", "4", "--concurrency-resolution", "16",
                 "--concurrency-override=model/arch=small"])
    report = json.loads(out.read_text())
    assert code == 0, report["failures"]
    assert report["ok"] and not report["failures"]

    cpu = report["devices"][0]
    assert cpu["kind"] == "cpu" and cpu["bf16"] in ("native", "emulated") and cpu["cores"] >= 1
    assert cpu["precisions"] == {"32-true": True, "bf16-mixed": True, "16-mixed": False}

    runs = {(r["family"], r["precision"]): r for r in report["families"]}
    assert set(runs) == {(f, p) for f in ("qlae", "cliff2d") for p in ("32-true", "bf16-mixed")}
    for run in runs.values():
        assert run["status"] == "ok" and run["error"] is None and run["accelerator"] == "cpu"
        assert run["losses"] and all(math.isfinite(v) for v in run["losses"].values()), run["losses"]
        assert "train/loss" in run["losses"] and run["metrics"]
    assert set(runs["qlae", "bf16-mixed"]["metrics"]) >= {"infom", "infoe", "infoc", "dci_d", "psnr"}
    assert set(runs["cliff2d", "32-true"]["metrics"]) == {"mcc"}

    # the worker processes ran on the CPU: a throughput per level and a recommendation among them
    concurrency = report["concurrency"]
    assert concurrency["status"] == "ok" and concurrency["device"] == "cpu"
    assert [lv["runs"] for lv in concurrency["levels"]] == [1, 2]
    levels = {lv["runs"]: lv for lv in concurrency["levels"]}
    for k, lv in levels.items():
        assert lv["total_steps_per_s"] > 0 and len(lv["per_run_steps_per_s"]) == k
        # the window runs from the first start to the last end, so no run is slower than its share of the total
        assert min(lv["per_run_steps_per_s"]) >= lv["total_steps_per_s"] / k * (1 - 1e-9)
        assert lv["vs_one_run"] == pytest.approx(lv["total_steps_per_s"] / levels[1]["total_steps_per_s"])
    # the recommendation is the rule's on these measured throughputs (whichever level won here)
    assert concurrency["runs_per_gpu"] == recommend_runs_per_gpu({k: lv["total_steps_per_s"]
                                                                  for k, lv in levels.items()})

    skipped = " | ".join(s["check"] for s in report["skipped"])
    for part in ("families on CUDA", "GPU vs CPU evaluation", "2-process DDP", "timing", "families not selected"):
        assert part in skipped, skipped
    assert report["ddp"]["status"] == "skipped" and "GPUs" in report["ddp"]["reason"]

    # the comparison a GPU run gets, here between two CPU evaluations of the run's checkpoint
    ckpt = tmp_path / "runs" / "cpu" / "bf16-mixed" / "qlae" / "checkpoints" / "last.ckpt"
    check = compare_evaluations(ckpt, ("cpu", "cpu"))
    assert check["status"] == "ok", check
    assert set(check["metrics"]) >= {"infom", "dci_d", "psnr"} and check["max_diff"] == 0
    # each side is a real evaluation of the checkpoint's weights: the run's own final evaluation, at its step
    final = json.loads((ckpt.parents[1] / "metrics.json").read_text())
    for key, values in check["metrics"].items():
        assert values["cpu"] == pytest.approx(final[key], rel=1e-6, abs=1e-9), key
    # the comparison evaluates in full float32 whatever the runs' TF32 setting, and restores that setting after
    # (on an H200, TF32's rounding moved a 2-step InfoWGAN's DCI-I by 0.05 between the devices)
    import torch

    from disentangle.callbacks import DisentanglementEvaluation

    seen, real_run = [], DisentanglementEvaluation.run

    def run_recording_tf32(self, *args, **kwargs):
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return real_run(self, *args, **kwargs)

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        DisentanglementEvaluation.run = run_recording_tf32
        assert compare_evaluations(ckpt, ("cpu", "cpu"))["status"] == "ok"
        assert seen == [(False, False), (False, False)]
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        DisentanglementEvaluation.run = real_run
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    # a device the evaluation cannot run on is a failure naming the error, not a pass
    broken = compare_evaluations(ckpt, ("cpu", "meta"))
    assert broken["status"] == "fail" and broken["error"], broken


def test_a_family_that_diverges_is_reported_as_a_failure_naming_the_term(tmp_path):
    family = next(f for f, choice in FAMILIES.items() if choice == ["model=qlae"])
    record = run_family(family, ["model.optimizer.lr=1e30", "model=qlae"], "cpu", "32-true", 3, tmp_path)
    assert record["status"] == "fail"
    assert "NonFiniteLossError" in record["error"] and "term" in record["error"], record["error"]


def test_one_paper_step_is_timed():
    (row,) = time_cases(["dvae_friede"], "cpu", ["32-true"], batch_size=8, repeats=1, warmup=0)
    assert row["status"] == "ok" and row["seconds"]["32-true"] > 0
    assert row["vs_qlae"] == {} and row["bf16_speedup"] is None  # no QLAE, no bf16 measured


def test_a_paper_step_is_timed_compiled_with_its_compile_cost():
    (row,) = time_cases(["dvae_friede"], "cpu", ["32-true"], batch_size=8, repeats=2, warmup=1,
                        compiled=["dvae_friede"])
    assert row["status"] == "ok", row["errors"]
    assert row["seconds"]["32-true compiled"] > 0
    assert row["compile_speedup"]["32-true"] == pytest.approx(row["seconds"]["32-true"]
                                                              / row["seconds"]["32-true compiled"])
    assert row["compile_s"]["32-true"] > row["seconds"]["32-true"]  # compiling costs more than a step
    console = Console(record=True, width=160)
    print_report({"devices": [], "families": [], "skipped": [], "ok": True, "timing": {"device": "cpu", "batch_size": 8, "resolution": 64,
                                                         "repeats": 2, "cases": [row]}},
                 console)
    text = console.export_text()
    assert "compiled (trainer.compile=true)" in text and f"{row['compile_speedup']['32-true']:.2f}" in text


def test_recommendation_is_the_fewest_runs_near_the_best_total_throughput():
    assert recommend_runs_per_gpu({1: 10.0, 2: 18.0, 4: 25.0, 8: 25.5}) == 4  # 8 adds 2%: not worth it
    assert recommend_runs_per_gpu({1: 10.0, 2: 19.0, 4: 30.0, 8: 40.0}) == 8
    assert recommend_runs_per_gpu({1: 10.0, 2: 9.0, 4: 8.0}) == 1  # sharing only slows it down
    assert recommend_runs_per_gpu({1: 10.0, 2: 18.0, 4: None}) == 2  # 4 ran out of memory
    assert recommend_runs_per_gpu({1: 10.0, 2: 10.4}, near_best=0.0) == 2
    with pytest.raises(ValueError, match="nothing to recommend"):
        recommend_runs_per_gpu({1: None})


def test_a_bad_option_fails_in_one_line(capsys):
    assert main(["--families", "qlae", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--families nope: not a family" in err and "qlae" in err


def test_every_family_has_a_distinct_name_and_is_what_it_claims():
    from conftest import compose_config
    from hydra.utils import instantiate

    names = [choice[-1].split("=", 1)[1] for choice in FAMILIES.values()]
    assert len(set(names)) == len(names)
    family, choice = next((f, c) for f, c in FAMILIES.items() if c == ["model=factorvae"])
    model = instantiate(compose_config([*choice, "model/arch=small"]).model, in_channels=3, resolution=64,
                        dataset_size=100)
    assert family_of(model) == family
