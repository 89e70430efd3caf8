"""``make gpu-check`` (issue 42 item 4): the prepared script for a lent GPU, rehearsed here on the CPU with tiny budgets
so that it runs at the first try on a GPU; the rendering of its results into docs/benchmarks.md; its cases cover every
paper network; a stage past its time is stopped with everything it started."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from disentangle import gpu_check
from disentangle.bench import STEP_CASES, bench_model
from disentangle.runtime.compilation import EXPECTED, MEASURED_SPEEDUP, MIN_GAIN


@pytest.mark.timeout(900)
def test_make_gpu_check_device_cpu_runs_every_stage_and_renders_its_results(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text((ROOT / "docs" / "benchmarks.md").read_text())
    venv = Path(sys.executable).parent.parent
    args = (f"--workdir {tmp_path / 'work'} --out {tmp_path / 'cpu.json'} --docs {page} --budget 600 "
            f"--claims-seconds 20")
    # -o: the venv running these tests is the one to use, installed as it is (make would not reinstall it anyway)
    done = subprocess.run(["make", "-C", str(ROOT), "-o", str(venv / ".installed"), "gpu-check", "DEVICE=cpu",
                           f"VENV={venv}", f"GPU_CHECK_ARGS={args}"], capture_output=True, text=True, timeout=850,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "cpu.json").read_text())
    env = results["environment"]
    assert env["device_type"] == "cpu" and env["torch"] and env["python"] and env["cpu"] and "driver" in env
    stages = results["stages"]
    assert list(stages) == list(gpu_check.STAGES)
    assert [stages[s]["status"] for s in ("doctor", "steps", "runs_per_gpu")] == ["ok"] * 3, stages
    assert [(f["family"], f["precision"], f["status"]) for f in stages["doctor"]["families"]] == [
        ("qlae", "32-true", "ok"), ("qlae", "bf16-mixed", "ok")]
    (row,) = stages["steps"]["rows"]
    assert row["case"] == "qlae" and set(row["median_s"]) == {"32-true", "32-true compiled", "bf16-mixed",
                                                               "bf16-mixed compiled"}
    assert all(v > 0 for v in row["median_s"].values()) and row["compile_cold_s"] >= 0
    assert row["networks"] == ["SmallEncoder", "SmallDecoder"]  # the rehearsal's model/arch=small
    concurrency = stages["runs_per_gpu"]["concurrency"]
    assert [lv["runs"] for lv in concurrency["levels"]] == [1, 2] and concurrency["runs_per_gpu"] in (1, 2)
    claims = stages["claims"]  # stopped at its 20 s, or done; either way with the runs it started on record
    assert claims["status"] in ("ok", "timeout") and claims["runs_started"] >= 1 and claims["jobs"] in (1, 2)
    assert claims["timeout_s"] <= 20
    assert set(results["proposed"]["MEASURED_SPEEDUP"]) == {"SmallEncoder", "SmallDecoder"}
    section = gpu_check.rendered_section(page)
    assert section == gpu_check.render(results)
    assert "| qlae |" in section and "recommended `runs_per_gpu=" in section and "driver" in section


def test_the_benchmarks_page_shows_the_committed_results():
    """docs/benchmarks.md's gpu-check section is the rendering of docs/gpu-check.json (or says it has not run)."""
    results_file = ROOT / gpu_check.RESULTS
    results = json.loads(results_file.read_text()) if results_file.is_file() else None
    assert gpu_check.rendered_section(ROOT / gpu_check.DOCS) == gpu_check.render(results), \
        "docs/benchmarks.md is stale: python -m disentangle.gpu_check --render"


def test_the_cases_cover_every_paper_network():
    """Every network class (or model:network key) the compile rule has a CPU measurement for is compiled by one of
    the check's cases, so the CUDA table it proposes has the same keys."""
    keys = set()
    for case in gpu_check.CASES:
        model = bench_model(dict(STEP_CASES)[case], batch_size=8)
        for net in model.compilable_network_classes():
            keyed = f"{type(model).__name__}:{net}"
            keys.add(keyed if keyed in MEASURED_SPEEDUP["cpu"] else net)
    assert set(MEASURED_SPEEDUP["cpu"]) <= keys, sorted(set(MEASURED_SPEEDUP["cpu"]) - keys)


def test_proposed_constants_take_the_least_speed_up_per_network_and_a_margin_on_the_compile():
    rows = [{"case": "a", "model_class": "Autoencoder", "networks": ["ConvEncoder", "StyleDecoder"],
             "median_s": {"32-true": 0.20, "32-true compiled": 0.10}, "compile_cold_s_by_precision": {"32-true": 31}},
            {"case": "b", "model_class": "Autoencoder", "networks": ["ConvEncoder", "DlibDecoder"],
             "median_s": {"32-true": 0.30, "32-true compiled": 0.25}, "compile_cold_s_by_precision": {"32-true": 9}},
            {"case": "gan", "model_class": "InfoWGAN", "networks": ["StyleDecoder"],
             "median_s": {"32-true": 0.10, "32-true compiled": 0.125}, "compile_cold_s_by_precision": {}}]
    proposed = gpu_check.proposed_constants(rows, "cuda")
    assert proposed["MEASURED_SPEEDUP"] == {"ConvEncoder": 1.2, "DlibDecoder": 1.2, "InfoWGAN:StyleDecoder": 0.8,
                                            "StyleDecoder": 2.0}
    assert proposed["EXPECTED_cost_s"] == 50.0  # 1.3 x 31 s = 40.3, up to the next 10 s


def test_the_cuda_compile_rule_takes_what_the_committed_check_proposed():
    """MEASURED_SPEEDUP['cuda'] and EXPECTED['cuda'].cost_s are docs/gpu-check.json's proposal, once it has rows."""
    results = json.loads((ROOT / gpu_check.RESULTS).read_text())
    proposed = results["proposed"]
    assert proposed["MEASURED_SPEEDUP"], "the committed check measured no step case"
    assert MEASURED_SPEEDUP["cuda"] == proposed["MEASURED_SPEEDUP"]
    assert EXPECTED["cuda"].cost_s == proposed["EXPECTED_cost_s"]
    measured_gains = [v for v in MEASURED_SPEEDUP["cuda"].values() if v >= MIN_GAIN]
    assert EXPECTED["cuda"].speedup <= min(measured_gains)  # an unmeasured network expects no more than the least gain


def test_a_call_goes_on_from_what_earlier_calls_left():
    """The plan keeps a passed doctor and runs-per-GPU stage and the measured step cases; the stages left share the
    budget; results of another GPU or torch are not mixed in."""
    assert gpu_check.stage_plan({}) == (list(gpu_check.STAGES), list(gpu_check.CASES))
    row = {"case": "qlae", "median_s": {"32-true": 0.02, "32-true compiled": 0.018}}
    eager_only = {"case": "tripod", "median_s": {"32-true": 0.1}}  # no compiled time: still to measure
    before = {"doctor": {"status": "ok"}, "steps": {"status": "timeout", "rows": [row, eager_only]},
              "runs_per_gpu": {"status": "timeout"}, "claims": {"status": "ok"}}
    todo, cases = gpu_check.stage_plan(before)
    assert todo == ["steps", "runs_per_gpu", "claims"] and cases == list(gpu_check.CASES[1:])
    every_case = {"steps": {"rows": [{"case": c, "median_s": {"32-true compiled": 1.0}} for c in gpu_check.CASES]},
                  "runs_per_gpu": {"status": "ok"}, "doctor": {"status": "fail"}}
    assert gpu_check.stage_plan(every_case) == (["doctor", "claims"], [])
    # shares among the stages left (the claims keep theirs): steps alone with the claims get 0.45 / 0.60
    claims_share = 1 - sum(gpu_check.SHARES.values())
    assert gpu_check.stage_timeout("steps", ["steps", "claims"], 1e9, 480) == pytest.approx(
        480 * gpu_check.SHARES["steps"] / (gpu_check.SHARES["steps"] + claims_share))
    assert gpu_check.stage_timeout("steps", list(gpu_check.STAGES), 1e9, 480) == pytest.approx(
        480 * gpu_check.SHARES["steps"])
    assert gpu_check.stage_timeout("doctor", list(gpu_check.STAGES), 10, 480) == 10  # never past what is left
    assert gpu_check.stage_timeout("claims", ["claims"], 100, 480, claims_seconds=20) == 20
    env = {"device": "NVIDIA H200", "torch": "2.11.0"}
    previous = {"schema": gpu_check.SCHEMA, "environment": dict(env), "stages": before}
    assert gpu_check.carried_over(previous, env) == (before, None)
    kept, why = gpu_check.carried_over(previous, {**env, "device": "NVIDIA H100 80GB HBM3"})
    assert kept == {} and "device" in why and "H100" in why
    kept, why = gpu_check.carried_over({**previous, "schema": 0}, env)
    assert kept == {} and "schema" in why


def test_a_resumed_check_runs_only_what_is_left_and_records_each_call(tmp_path):
    """The CPU rehearsal resumed from a results file whose doctor, steps and runs-per-GPU passed: only the claims
    run; the kept stages say which call made them, and the calls are listed and rendered."""
    from disentangle.gpu_check import check, environment

    env = environment("cpu")
    kept = {"doctor": {"status": "ok", "seconds": 14.0, "families": []},
            "steps": {"status": "ok", "seconds": 60.0, "rows": [
                {"case": "qlae", "median_s": {"32-true": 0.02, "32-true compiled": 0.01}, "networks": ["SmallEncoder"],
                 "model_class": "Autoencoder", "compile_cold_s_by_precision": {"32-true": 20.0}}]},
            "runs_per_gpu": {"status": "ok", "seconds": 20.0, "concurrency": {"runs_per_gpu": 2, "levels": []}}}
    out = tmp_path / "cpu.json"
    out.write_text(json.dumps({"schema": gpu_check.SCHEMA, "started": "2026-01-01T00:00:00+00:00", "budget_s": 150,
                               "wall_s": 150, "environment": env, "stages": kept}))
    lines = []
    results = check("cpu", 60, out, tmp_path / "work", ["qlae_above_ae_infom"], "0", claims_seconds=15,
                    progress=lines.append)
    assert [c["call"] for c in results["calls"]] == [1, 2]
    assert results["calls"][1]["stages"] == {"doctor": "kept", "steps": "kept", "runs_per_gpu": "kept",
                                             "claims": results["stages"]["claims"]["status"]}
    assert all(results["stages"][s]["call"] == 1 for s in ("doctor", "steps", "runs_per_gpu"))
    assert results["stages"]["claims"]["call"] == 2 and results["stages"]["claims"]["jobs"] == 2
    assert results["proposed"]["MEASURED_SPEEDUP"] == {"SmallEncoder": 2.0}
    assert "gpu-check: doctor kept from call 1" in lines
    assert json.loads(out.read_text()) == results
    text = gpu_check.render(results)
    assert "in 2 call(s)" in text and "\n1. 2026-01-01" in text and "| doctor | ok | 14 | 1 |" in text
    # --fresh (resume=False) starts over: nothing kept
    fresh_plan = gpu_check.carried_over({}, env)
    assert fresh_plan == ({}, None)


def test_a_stage_past_its_time_is_stopped_with_everything_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "print('started', flush=True)\ntime.sleep(120)\n")
    start = time.perf_counter()
    record = gpu_check.run_stage([sys.executable, "-c", code], 3, tmp_path / "stage.log")
    assert record["status"] == "timeout" and record["exit_code"] is None and time.perf_counter() - start < 30
    assert record["log_tail"] == ["started"]
    child = int(pid_file.read_text())
    for _ in range(50):  # the grandchild got the group's SIGTERM too (a zombie awaiting its reaper is gone as well)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the stage's child {child} outlived the stage")


def test_bad_options_stop_in_one_line():
    done = subprocess.run([sys.executable, "-m", "disentangle.gpu_check", "--device", "cpu", "--budget", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--budget must exceed" in done.stderr.strip().splitlines()[-1]
