"""Shared test helpers: compose the real Hydra config in-process, with fast settings for CPU."""
from __future__ import annotations

import gc
import hashlib
import os
import shutil
from pathlib import Path

# Inductor compiles in the compiling process rather than in a pool of compile workers, each of which imports torch
# afresh: with the cores already shared by the xdist workers the pool buys no parallelism, and it cost about 5 CPU-s
# per compiling process (one compiled first step, cold cache, 57.5 against 61.4 and 63.5 against 70.2 CPU-s on the
# 2-core AMD EPYC). Set before anything imports Inductor's config, which reads it; every process a test starts
# inherits it. The compiled code is the same.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import forked_cli  # tests/: the command lines forked from a preloaded interpreter
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import disentangle.runtime.config  # noqa: F401  (resolvers)

ROOT = Path(__file__).resolve().parents[1]
# the raw fixtures (tests/raw_fixtures.py) are reduced grids in the official formats, not the published files: convert
# them without checking them against sources.yaml (tests/test_download.py turns the check back on where it is tested)
os.environ["DISENTANGLE_UNVERIFIED_RAW"] = "1"
# headless figures, as the documented commands run them (tests/test_doc_commands.py): matplotlib reads this while
# importing, so the preloaded interpreter of tests/forked_cli.py and the commands it forks must agree on it
os.environ.setdefault("MPLBACKEND", "Agg")
# a test stopped by the global timeout (pyproject: [tool.pytest.ini_options] timeout) leaves no process behind
pytest_plugins = ["process_cleanup", "cpu_budget"]
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
    # the figures cost about 1 s of a 2.5 s run: a test that looks at them turns them on (FIGURES)
    "callbacks.evaluation.figures=false",
]
FIGURES = "callbacks.evaluation.figures=true"

# under pytest-xdist (make test: -n workers) the workers share the cores: each takes its share of them, and so do the
# processes a test starts (OMP_NUM_THREADS), so that a run in a subprocess computes as its twin in the test process
# does (a killed-and-resumed run must equal its uninterrupted twin bit for bit)
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))
torch.set_num_threads(THREADS)
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(THREADS)


def compose_config(overrides, output_dir=None):
    """The composed job config, exactly as the CLI would build it (output dir set explicitly)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        extra = [f"paths.output_dir={output_dir}"] if output_dir else ["paths.output_dir=/tmp/unused"]
        return compose("train", overrides=list(overrides) + extra)


def run_cli(*args, env=None, timeout=600):
    """Run `python -m disentangle.train ARGS` in a process of its own (forked from a preloaded interpreter unless
    ``env`` adds variables: tests/forked_cli.py); returns CompletedProcess."""
    return forked_cli.run("disentangle.train", *args, env=env, timeout=timeout)


@pytest.fixture
def fast_overrides():
    return list(FAST)


def shared_dir(tmp_path_factory, name: str) -> Path:
    """A directory shared by every xdist worker of this test run (the run's base temp directory; without xdist,
    this process's), for setup built once and read by many tests."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "shared" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """``trained_run(*overrides)``: the directory of a run of ``FAST + overrides`` trained once per test run and shared
    by every test (and xdist worker) that asks for the same overrides; built under a file lock by the first to ask.
    It is read-only to the tests: one that writes into a run copies it first."""
    from filelock import FileLock

    from disentangle.runtime.run import train

    root = shared_dir(tmp_path_factory, "runs")

    def get(*overrides: str) -> Path:
        key = hashlib.sha1("\0".join(overrides).encode()).hexdigest()[:16]
        out = root / key
        with FileLock(str(out) + ".lock"):
            if not (out / "metrics.json").is_file():
                shutil.rmtree(out, ignore_errors=True)
                train(compose_config(FAST + list(overrides), output_dir=out))
        return out

    return get


# The files holding the suite's longest single tests, longest first (each file's longest, measured on a fresh clone on
# the 2-core AMD EPYC Zen 5, 2026-12-08: 184 s down to 20 s). Collected first, so that the workers start them early and
# the run ends on many short tests: in collection order the last long ones (the wheel, wandb) ran on one worker while
# the other two had finished, 60-80 s of a core left idle.
LONG_FIRST = ("test_gpu_check.py", "test_compile.py", "test_claims.py", "test_wheel.py", "test_gpu_node.py",
              "test_cli_errors.py", "test_wandb.py", "test_doctor.py", "test_doc_commands.py", "test_ddp_metrics.py",
              "test_ddp_adversarial.py", "test_report.py", "test_ddp_negatives.py", "test_launch.py",
              "test_cluster_path.py", "test_training.py", "test_resume_families.py", "test_resume.py")


def long_first(items) -> None:
    """Reorder ``items`` in place: the files of :data:`LONG_FIRST` in its order, then every other file as collected;
    within a file the collected order stays (its module fixtures, its parametrizations)."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable


def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (make test), the tests that share a module-scoped fixture of their own module (a
    trained run, a built wheel and its venv, a logged sweep) run on one worker, so the fixture is built once; the
    files with the longest tests are handed out first (:func:`long_first`)."""
    long_first(items)
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        if definitions is None:
            continue
        for defs in definitions.name2fixturedefs.values():
            if defs and defs[-1].scope == "module" and defs[-1].baseid.endswith(".py"):
                item.add_marker(pytest.mark.xdist_group(defs[-1].baseid))
                break


def pytest_collection_finish(session):
    """Each worker holds torch, Lightning and every collected test for its whole life: frozen after collection, the
    garbage collector never scans them again, and with larger thresholds it runs less often amid the many small
    objects Hydra's compositions make. Measured on test_training + test_constraints in one process: 8% less CPU
    (324 -> 297 s), no test changed."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)

