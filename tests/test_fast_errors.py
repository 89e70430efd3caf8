"""Mistakes fail before torch is imported (issue 45 item 3): every error case and every ``--help`` of
``python -m disentangle.bench errors`` runs in a fresh interpreter without importing torch or Lightning, and ends
in the same one line the full build would print. Times are the benchmark's business, not a test's."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from disentangle.bench.latency import CASES
from disentangle.checks import FP16_OFF_CUDA
from disentangle.errors import ConfigError, DatasetNotFoundError
from disentangle.runtime.paths import config_dir
from disentangle.runtime.preflight import check_training_config, cuda_impossible

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pytorch_lightning", "lightning", "sklearn", "matplotlib")


def _imported(stderr: str) -> set[str]:
    """Top-level packages named in ``-X importtime``'s report."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize(("label", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_mistake_and_help_answers_without_torch(label, args, expected, tmp_path):
    env = {**os.environ, "DISENTANGLE_DATA": str(tmp_path / "data"), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
    imported = _imported(done.stderr)
    messages = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert done.returncode == expected, (label, done.stdout[-500:], messages[-5:])
    assert not imported & set(HEAVY), f"{label}: imported {sorted(imported & set(HEAVY))}"
    if expected == 0:
        assert "usage" in done.stdout.lower() or "powered by hydra" in done.stdout.lower(), done.stdout[:300]
    else:  # one line, the error
        assert len(messages) == 1 and messages[0].startswith("error: "), messages
    assert not (tmp_path / "data").exists()  # nothing prepared


def test_the_benchmark_covers_every_command():
    """``bench errors`` times every console script's --help, and select's and gpu_check's (python -m forms)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    commands = {target.split(":")[0].removeprefix("disentangle.") for target in scripts.values()}
    helped = {args[0].removeprefix("disentangle.") for _, args, _ in CASES if args[-1] == "--help"}
    assert commands | {"select", "gpu_check"} <= helped


@pytest.fixture(scope="module")
def compose_train():
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        yield lambda *overrides: compose("train", overrides=list(overrides))


def _message(fn) -> str:
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        fn()
    return str(caught.value)


def test_preflight_says_what_the_build_says(compose_train, tmp_path):
    """Each early refusal has the words of the check it runs ahead of (the optimizer's, the precision's, the
    prepared-data reader's)."""
    from disentangle.data.prepared import open_prepared
    from disentangle.foundation.precision import resolve_precision
    from disentangle.models.base import optimizer_config

    cases = [
        (("model=qlae", "model.optimizer.lr=-1"), lambda: optimizer_config({"lr": -1})),
        (("model=qlae", "trainer.accelerator=cpu", "trainer.precision=16-mixed"),
         lambda: resolve_precision("16-mixed", "cpu")),
        (("model=qlae", "data=shapes3d", f"data.root={tmp_path}"),
         lambda: open_prepared("shapes3d", tmp_path, None, "3dshapes.h5")),
        (("model=qlae", "trainer.precision=fp8"), lambda: resolve_precision("fp8", "cpu")),
    ]
    for overrides, build in cases:
        assert _message(lambda o=overrides: check_training_config(compose_train(*o))) == _message(build), overrides


@pytest.mark.parametrize(("overrides", "error", "words"), [
    (("model=qlae", "model.batch_size=0"), ConfigError, "model.batch_size must be >= 1 (got 0)"),
    (("model=qlae", "trainer.max_steps=0"), ConfigError, "trainer.max_steps must be >= 1 (got 0)"),
    (("model=factorqvae", "model.regularizers.tc_discriminator.optimizer.lr=0"),
     ConfigError, "must be > 0 (got 0.0)"),
    (("model=qlae", "data=mpi3d", "data.variant=toy"), DatasetNotFoundError, "data.variant=toy"),
])
def test_preflight_refuses(compose_train, tmp_path, overrides, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_training_config(compose_train(*overrides, f"paths.data_root={tmp_path}"))


def test_preflight_leaves_to_the_build_what_it_cannot_know(compose_train, tmp_path):
    """A raw official file in the data root (the build converts it), a prepared cache, procedural data, a GPU
    accelerator, and the defaults all pass."""
    (tmp_path / "3dshapes.h5").write_bytes(b"")  # found by name: converting (and checking) it is the build's work
    check_training_config(compose_train("model=qlae", "data=shapes3d", f"data.root={tmp_path}"))
    other = tmp_path / "prepared"
    other.mkdir()
    (other / "dsprites.h5").write_bytes(b"")
    check_training_config(compose_train("model=qlae", "data=dsprites", f"data.root={other}"))
    check_training_config(compose_train())
    check_training_config(compose_train("model=qlae", "trainer.accelerator=gpu", "trainer.precision=16-mixed"))
    assert FP16_OFF_CUDA.format(device="CPU").startswith("trainer.precision=16-mixed")


def test_cuda_impossible_when_every_gpu_is_hidden(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_impossible()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert cuda_impossible() == (sys.platform == "darwin" or (
        sys.platform.startswith("linux") and not Path("/proc/driver/nvidia/version").exists()))


def test_lazy_packages_keep_their_names():
    """``disentangle.data``, ``disentangle.bench`` and ``disentangle.evaluate`` import their heavy parts on first
    use; every name they exported still resolves, and an unknown one is an AttributeError."""
    code = ("import sys, disentangle.data as d, disentangle.bench as b, disentangle.evaluate as e; "
            "assert 'torch' not in sys.modules; "
            "[getattr(d, n) for n in d.__all__]; [getattr(b, n) for n in b.__all__]; e.load_checkpoint; "
            "from disentangle.callbacks import EvaluationError; from disentangle.errors import EvaluationError as E; "
            "assert EvaluationError is E\n"
            "try:\n    d.nothing\nexcept AttributeError:\n    print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr[-800:]
