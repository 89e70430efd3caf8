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
from disentangle.runtime.compilation import MEASURED_SPEEDUP


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
