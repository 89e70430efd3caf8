"""``dry_run=true`` (issue 45 item 2): the real CLI lists the jobs of a run or a sweep with their estimated times and
output directories, and runs, launches and writes nothing, without importing torch. Its job list is the sweep file's
grid; its estimates are steps x the benchmark tables' figures, which are checked against docs/benchmarks.md and
docs/gpu-check.json; each bench case's signature is what its overrides compose to; and its shortcut composition (a
copy per job that only changes values) gives what Hydra composes."""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, compose_config
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from disentangle.runtime import dry_run
from disentangle.runtime.step_figures import (
    DISCRETE_LATENTS,
    EVALUATION,
    SIGNATURES,
    STEP_TABLES,
    signature,
)

SWEEP = ROOT / "sweeps" / "tripod_table1.yaml"
HEAVY = ("torch", "lightning", "pytorch_lightning")


def _cli(*args: str, cwd: Path, importtime: bool = False, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m disentangle.train ARGS`` from ``cwd``, seeing no GPU (the CPU figures, whatever this machine has)
    and no terminal (lines of at most 120 characters)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "COLUMNS")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "disentangle.train", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def _rows(stdout: str) -> list[list[str]]:
    """The cells of the job table (the lines after its ``#`` header, up to the blank line)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^\s+#\s{2}", line))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def _flat(text: str) -> str:
    """The report with its wrapped lines joined, to find a phrase wherever a line broke."""
    return " ".join(text.split())


def _only_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _figure(label: str, device: str = "cpu", precision: str = "32-true", compiled: bool = False) -> float:
    table = next(t for t in STEP_TABLES if (t.device, t.precision, t.compiled) == (device, precision, compiled))
    return table.seconds[label]


def test_the_sweep_lists_every_job_of_its_grid_and_writes_nothing(tmp_path):
    """84 jobs: the product of the sweep file's params, each once, with its output dir and its estimate from the
    measured figures; no directory appears and torch is never imported."""
    grid = {key: str(values).split(",") for key, values in
            yaml.safe_load(SWEEP.read_text())["hydra"]["sweeper"]["params"].items()}
    expected = set(itertools.product(*grid.values()))
    assert len(expected) == 84  # the sweep file's header: 7 models x 4 datasets x 3 seeds

    res = _cli("-m", "-cd", "sweeps", "-cn", "tripod_table1", "dry_run=true", cwd=tmp_path, importtime=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert out.splitlines()[0].startswith(f"{len(expected)} jobs "), out[:500]
    flat = _flat(out)
    for key, values in grid.items():
        assert f"{key} ({len(values)}): {', '.join(values)}" in flat
    rows = _rows(out)
    assert len(rows) == len(expected)
    columns = list(grid)
    found = set()
    for row in rows:
        num, *values = row[: 1 + len(columns)]
        _step, est, out_dir = row[1 + len(columns):]
        found.add(tuple(values))
        model, data = dict(zip(columns, values))["model"], dict(zip(columns, values))["data"]
        assert out_dir == f"{num}_{model}_{data}"  # hydra.sweep.subdir
        assert est not in ("–", "error"), row
    assert found == expected
    tripod = next(r for r in rows if r[1] == "tripod")
    evaluations = 200_000 // 10_000 + 1  # every 10k steps and at the end (the sweep file)
    assert tripod[-2] == dry_run.duration(200_000 * _figure("tripod") + evaluations * EVALUATION.seconds[True])
    assert "measured on a 2-core Intel Xeon" in flat and "nothing was run or written" in out
    assert all(len(line) <= 120 for line in out.splitlines())

    assert list(tmp_path.iterdir()) == []  # no multirun/, no outputs/, no .hydra
    imported = [line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time")]
    assert "hydra" in imported  # -X importtime did report
    assert not [m for m in imported if m.split(".")[0] in HEAVY]


def test_an_extra_override_is_in_every_job_and_changes_the_estimate(tmp_path):
    narrowed = ["-m", "-cd", "sweeps", "-cn", "tripod_table1", "data=isaac3d", "seed=0", "dry_run=true"]
    full = _cli(*narrowed, cwd=tmp_path)
    short = _cli(*narrowed, "trainer.max_steps=5", cwd=tmp_path)
    assert full.returncode == 0 and short.returncode == 0, short.stderr[-3000:]
    assert short.stdout.splitlines()[0].startswith("7 jobs ")
    assert "every job: data=isaac3d, seed=0, trainer.max_steps=5" in _flat(short.stdout)
    assert "trainer.max_steps" not in full.stdout
    before, after = _rows(full.stdout), _rows(short.stdout)
    assert [r[1] for r in before] == [r[1] for r in after]
    assert all(b[-2] != a[-2] for b, a in zip(before, after))
    tripod = next(r for r in after if r[1] == "tripod")
    assert tripod[-2] == dry_run.duration(5 * _figure("tripod") + EVALUATION.seconds[True])  # one final evaluation
    assert list(tmp_path.iterdir()) == []


def test_any_launcher_only_lists_the_jobs(tmp_path):
    """joblib, the GPU node's and Slurm's launchers: the same jobs, their concurrency, and nothing launched; on
    Slurm each job has a GPU, so the estimate takes the GPU figure where there is one and says where there is none."""
    base = ["-m", "-cd", "sweeps", "-cn", "tripod_table1", "data=isaac3d", "seed=0", "model=tripod,qlae",
            "dry_run=true"]
    for launcher in ("joblib", "gpu_node", "slurm"):
        res = _cli(*base, f"hydra/launcher={launcher}", cwd=tmp_path)
        assert res.returncode == 0, (launcher, res.stderr[-3000:])
        assert res.stdout.startswith("2 jobs ") and f"hydra/launcher={launcher}" in res.stdout, res.stdout[:300]
        assert [r[1] for r in _rows(res.stdout)] == ["tripod", "qlae"]
        assert list(tmp_path.iterdir()) == [], launcher
    rows = _rows(res.stdout)  # slurm
    assert rows[0][-2] == dry_run.duration(200_000 * _figure("tripod", "cuda"))
    assert rows[1][-2] == "–"
    assert "no measured figure on cuda, 32-true, eager: qlae, tripod arch" in _flat(res.stdout)


def test_without_m_it_shows_the_single_run(tmp_path):
    res = _cli("model=qlae", "model.batch_size=64", "trainer.max_steps=100", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("1 job ")
    (row,) = _rows(res.stdout)
    assert row[-1].startswith("outputs/qlae/shapes2d/")  # hydra.run.dir
    every = 5000  # conf/callbacks/default.yaml
    assert row[-2] == dry_run.duration(100 * _figure("qlae") + (100 // every + 1) * EVALUATION.seconds[True])
    assert list(tmp_path.iterdir()) == []


def test_a_mistake_on_the_command_line_is_the_usual_one_line(tmp_path):
    res = _cli("-m", "-cd", "sweeps", "-cn", "tripod_table1", "model=qlae,tripd", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and not res.stdout
    assert "did you mean tripod?" in _only_error_line(res.stderr)
    res = _cli("trainer.max_step=5", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2
    assert _only_error_line(res.stderr) == "error: trainer.max_step=5: no such key; did you mean trainer.max_steps?"
    res = _cli("-m", "model=qlae,tripod", "dry_run=true,false", cwd=tmp_path)
    assert res.returncode == 2 and "choose dry_run=true" in _only_error_line(res.stderr)
    assert list(tmp_path.iterdir()) == []


def test_a_job_that_would_not_compose_is_named_in_one_line(tmp_path):
    """Tripod's NHP weight is no key of QLAE's config: the QLAE job fails, named by its overrides, the other is
    listed, and the exit status says so."""
    res = _cli("-m", "model=qlae,tripod", "model.regularizers.nhp.weight=0.5", "trainer.max_steps=5", "dry_run=true",
               cwd=tmp_path)
    assert res.returncode == 2
    line = _only_error_line(res.stderr)
    assert line.startswith("error: job 0 (model=qlae model.regularizers.nhp.weight=0.5 trainer.max_steps=5): "), line
    assert "no such key" in line
    qlae, tripod = _rows(res.stdout)
    assert qlae[-1] == "error" and tripod[-1] == "1_tripod_shapes2d"  # no output dir for a job that fails
    assert list(tmp_path.iterdir()) == []


def test_an_optuna_search_lists_its_trials_and_what_it_searches(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    res = _cli("-m", "-cd", "sweeps", "-cn", "optuna_infom", "hydra.sweeper.n_trials=3", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("3 jobs ") and len(_rows(res.stdout)) == 3
    assert "searched: model.optimizer.lr: tag(log, interval(0.0001, 0.01))" in _flat(res.stdout)
    assert list(tmp_path.iterdir()) == []


def test_dry_run_is_a_config_key_and_only_true_asks_for_it():
    assert compose_config([]).dry_run is False and compose_config(["dry_run=true"]).dry_run is True
    assert dry_run.requested(["-m", "dry_run=true"]) and dry_run.requested(["dry_run=True"])
    assert dry_run.requested(["dry_run=true,false"])  # refused by main rather than run for real
    assert not dry_run.requested(["dry_run=false"]) and not dry_run.requested(["model=qlae"])
    assert not dry_run.requested(["dry_run=true", "dry_run=false"])  # the last one wins, as in Hydra
    assert not dry_run.requested(["--cfg", "job", "dry_run=true"])  # Hydra shows the config with dry_run: true


def test_the_shortcut_composes_what_hydra_composes():
    """Jobs that differ only in values share one composition, copied, with their values applied by Hydra's own
    override step: the config equals Hydra's load_sweep_config of the job, additions and deletions included."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.types import RunMode

    search_path = create_config_search_path(str(ROOT / "conf"))
    search_path.prepend(provider="command-line", path=f"file://{ROOT / 'sweeps'}",
                        anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2(task_name="train", config_search_path=search_path)
        primary = hydra.compose_config("tripod_table1", ["trainer.max_steps=5", "+note=1"], RunMode.MULTIRUN)
        common = ["trainer.max_steps=5", "+note=1"]
        jobs = [["model=qlae", "seed=0", *common, "+regularizer=klm"], ["model=qlae", "seed=1", *common,
                                                                         "+regularizer=klm"],
                ["seed=2", "model=tripod", "~callbacks.progress", *common]]
        composer = dry_run.JobComposer(hydra.config_loader, primary, jobs)
        for job in jobs:
            assert OmegaConf.to_yaml(composer(job)) == OmegaConf.to_yaml(
                hydra.config_loader.load_sweep_config(primary, job)), job
        assert len(composer.bases) == 0  # two compositions served three jobs, each handed over at its last use
    finally:
        GlobalHydra.instance().clear()


# ---- the figures --------------------------------------------------------------------------------------------

def _markdown_rows(section: str, until: str) -> dict[str, list[str]]:
    """``label -> cells`` of the table rows of docs/benchmarks.md between ``section`` and ``until`` (a label's
    backticks and its trailing note such as ``(3)`` dropped)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    start = text.index(section)
    rows = {}
    for line in text[start:text.index(until, start)].splitlines():
        match = re.match(r"^\| `([^`]+)`[^|]*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


# docs/benchmarks.md's bf16 table names some cases by their overrides, the bench by its labels
BF16_LABELS = {"qlae +regularizer=klm": "qlae + klm", "qlae model/arch=tripod": "qlae, tripod arch",
               "betatcvae model/arch=tripod": "betatcvae, tripod arch", "tripod_no_nhp": "tripod w/o nhp",
               "dvae_friede_masked +regularizer=supervision": "dvae_friede_masked + sup",
               "betavae +regularizer=cliff": "betavae + cliff", "betavae +regularizer=hfs": "betavae + hfs",
               "ae +regularizer=ioss": "ae + ioss", "experiment=cliff_shapes3d": "cliff_shapes3d"}


def test_the_cpu_figures_are_the_benchmark_tables():
    compiled = _markdown_rows("## Compiled steps", "How much compiling saves")
    assert _figure_table("cpu", "32-true", False) == {label: float(cells[0]) for label, cells in compiled.items()}
    assert _figure_table("cpu", "32-true", True) == {label: float(cells[1]) for label, cells in compiled.items()}
    bf16 = _markdown_rows("## Mixed precision", "The QLAE paper's networks gain")
    assert _figure_table("cpu", "bf16-mixed", False) == {BF16_LABELS.get(label, label): float(cells[1])
                                                          for label, cells in bf16.items()}
    metrics = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for discrete, name in ((True, "discrete (plug-in MI)"), (False, "continuous (`--continuous`, KSG)")):
        assert f"| {name} | {EVALUATION.seconds[discrete]} s |" in metrics


def _figure_table(device: str, precision: str, compiled: bool) -> dict[str, float]:
    return next(t.seconds for t in STEP_TABLES if (t.device, t.precision, t.compiled) == (device, precision, compiled))


def test_the_gpu_figures_are_the_committed_gpu_check():
    """The H200 figures are the medians docs/gpu-check.json holds (to the 0.1 ms the table shows), every one."""
    measured = {(row["case"], key): seconds for row in
                json.loads((ROOT / "docs" / "gpu-check.json").read_text())["stages"]["steps"]["rows"]
                for key, seconds in row["median_s"].items()}
    held = {(label, table.precision + (" compiled" if table.compiled else "")): seconds
            for table in STEP_TABLES if table.device == "cuda" for label, seconds in table.seconds.items()}
    assert set(held) == set(measured), f"copy into step_figures: {sorted(set(measured) - set(held))}"
    assert all(abs(measured[key] - held[key]) < 5e-5 for key in held), {k: round(v, 4) for k, v in measured.items()}


def test_each_signature_is_what_its_bench_case_composes_to():
    """A job gets the figure of the bench case with its model and regularizer choices: each case's overrides
    (bench.steps.STEP_CASES) compose to the signature held here, no two cases share one, and every figure names a
    bench case."""
    from disentangle.bench import STEP_CASES

    cases = dict(STEP_CASES)
    labels = {label for table in STEP_TABLES for label in table.seconds}
    assert labels <= set(cases), labels - set(cases)
    assert set(cases) - set(SIGNATURES) == {"factorqvae, 6-layer disc."}  # a value override only
    assert len(set(SIGNATURES.values())) == len(SIGNATURES)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for label, expected in SIGNATURES.items():
            cfg = compose("train", overrides=[*cases[label], "data=shapes2d"], return_hydra_config=True)
            assert signature(cfg.hydra.runtime.choices) == expected, label
    GlobalHydra.instance().clear()


def test_the_discrete_latents_are_the_quantizers_that_say_so():
    from disentangle import quantizers

    classes = [getattr(quantizers, name) for name in quantizers.__all__]
    said = {cls.__name__ for cls in classes if isinstance(cls, type) and getattr(cls, "discrete", None) is True}
    assert said == DISCRETE_LATENTS
