"""One line for every command-line mistake, and quiet runs.

The real CLIs run in subprocesses from a directory outside the checkout; the sweep over every config group runs
in-process through the same entry function (``cli()``), which saves a process start per group.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from disentangle import evaluate, prepare, train
from disentangle.errors import ConfigError
from disentangle.runtime import config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
GROUPS = sorted({str(p.parent.relative_to(CONF)) for p in CONF.rglob("*.yaml") if p.parent != CONF})


def _defaults_groups() -> set[str]:
    """The groups train.yaml's defaults list holds (the others are added with ``+group=name``)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", return_hydra_config=True, overrides=["paths.output_dir=/tmp/unused"])
    GlobalHydra.instance().clear()
    return set(cfg.hydra.runtime.choices)


DEFAULTS = _defaults_groups()


def _misspell(name: str, options: list[str]) -> str:
    wrong = name[:-2] + name[-1] + name[-2]  # the last two letters swapped
    return wrong if wrong != name and wrong not in options else name + "x"


def _suggested(line: str) -> list[str]:
    match = re.search(r"did you mean (.+?)\?", line)
    return match.group(1).split(" or ") if match else []


def _one_error_line(stderr: str) -> str:
    """The single line on stderr, which must be an ``error:`` line."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]


def _run_in_process(entry, args, monkeypatch, capsys) -> str:
    """``entry()`` (a CLI's function) with ``args``: it must exit 2 with one line on stderr."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["prog", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        entry()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    return _one_error_line(err)


def _cli(module: str, *args, cwd: Path, env: dict | None = None, code: str | None = None, timeout: int = 300):
    """``python -m disentangle.<module> ARGS`` (or ``python -c CODE ARGS``) from ``cwd``, outside the checkout."""
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update(env or {})
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", f"disentangle.{module}", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
                          check=False)


def test_the_walk_finds_the_nested_groups():
    assert {"model", "data", "experiment", "regularizer", "trainer", "logger", "callbacks", "hydra/launcher",
            "model/latent", "model/arch"} <= set(GROUPS)


@pytest.mark.parametrize("group", GROUPS)
def test_a_misspelt_config_name_in_any_group_gets_one_line_naming_the_right_one(group, monkeypatch, capsys):
    options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    name = options[0]
    wrong = _misspell(name, options)
    plus = "" if group in DEFAULTS else "+"
    line = _run_in_process(train.cli, [f"{plus}{group}={wrong}", "--cfg", "job"], monkeypatch, capsys)
    assert line.startswith(f"error: {group}={wrong}: no such config; did you mean "), line
    assert name in _suggested(line), line



@pytest.mark.parametrize("entry", [evaluate.cli, prepare.cli], ids=["evaluate", "prepare"])
def test_evaluate_and_prepare_name_the_closest_dataset(entry, monkeypatch, capsys):
    line = _run_in_process(entry, ["data=shapes3", "--cfg", "job"], monkeypatch, capsys)
    assert "shapes3d" in _suggested(line), line


RAY = importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None
JOB = ["--cfg", "job"]  # compose and print, never train: these must fail while composing


@pytest.mark.parametrize(("args", "expected"), [
    (["model.optimizer.lrr=0.1", *JOB],
     "error: model.optimizer.lrr=0.1: no such key; did you mean model.optimizer.lr?"),
    (["modle=qlae", *JOB], "error: modle=qlae: no such key; did you mean model?"),
    (["modle/latent=gaussian", *JOB],
     "error: modle/latent=gaussian: no config group modle/latent; did you mean model/latent?"),
    (["+regularizr=klm", *JOB],
     "error: +regularizr=klm: no config group regularizr; did you mean +regularizer=klm?"),
    (["regularizer=klm", *JOB],
     "error: regularizer=klm: regularizer is not in the defaults list; add it with +regularizer=klm"),
    pytest.param(["hydra/launcher=ray", *JOB],
                 "error: hydra/launcher=ray needs the ray extra: pip install '.[ray]' in the project's clone (once released: pip install 'disentangle-quantized[ray]')",
                 marks=pytest.mark.skipif(RAY, reason="the ray extra is installed")),
    (["-cn", "qlae_tabel2", *JOB], "qlae_table2"),
    (["-m", "model=qlae,tripd", "seed=0,1"], "tripod"),  # before the qlae jobs train, not after
])
def test_other_mistakes_get_one_line(args, expected, monkeypatch, capsys):
    line = _run_in_process(train.cli, args, monkeypatch, capsys)
    if expected.startswith("error: "):
        assert line == expected
    else:
        assert expected in _suggested(line), line


def test_the_extra_of_each_optional_plugin():
    assert config.install_hint("hydra/sweeper/optuna") == \
        "needs the optuna extra: pip install '.[optuna]' in the project's clone (once released: pip install 'disentangle-quantized[optuna]')"
    assert config.install_hint("hydra/launcher/ray") == "needs the ray extra: pip install '.[ray]' in the project's clone (once released: pip install 'disentangle-quantized[ray]')"
    assert config.install_hint("hydra/launcher/basic") is None


def test_progress_bars_are_on_only_in_a_terminal():
    assert config.progress_enabled("auto") is False  # pytest captures stdout and stderr
    assert config.progress_enabled(True) is True and config.progress_enabled(False) is False
    with pytest.raises(ConfigError, match="choose auto, true or false"):
        config.progress_enabled("sometimes", "trainer.enable_progress_bar")


def test_the_real_clis_answer_in_one_line(tmp_path):
    """A single run, a paper's sweep (``-cd sweeps`` from another directory), an unknown key, evaluate without a
    checkpoint and prepare: exit 2 and one line each."""
    res = _cli("train", "model=tripd", cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    line = _one_error_line(res.stderr)
    assert line.startswith("error: model=tripd: no such config; did you mean tripod") and "(choose from model: " in line

    res = _cli("train", "-m", "-cd", "sweeps", "-cn", "qlae_table2", "model=tripd", cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "tripod" in _suggested(_one_error_line(res.stderr))

    res = _cli("train", "trainer.max_step=5", cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert _one_error_line(res.stderr) == "error: trainer.max_step=5: no such key; did you mean trainer.max_steps?"

    res = _cli("evaluate", cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert _one_error_line(res.stderr).startswith("error: ckpt=PATH is required: ")

    res = _cli("evaluate", f"ckpt={tmp_path / 'nothing.ckpt'}", cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "no such checkpoint file" in _one_error_line(res.stderr)


# hides the installed Optuna sweeper from Hydra's plugin scan and from imports: as if the extra were not installed
WITHOUT_OPTUNA = textwrap.dedent("""
    import importlib.abc, pkgutil, runpy, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "optuna" or name.startswith("hydra_plugins.hydra_optuna_sweeper"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    walk = pkgutil.walk_packages
    pkgutil.walk_packages = lambda *a, **k: (m for m in walk(*a, **k)
                                             if not m.name.startswith("hydra_plugins.hydra_optuna_sweeper"))
    runpy.run_module("disentangle.train", run_name="__main__", alter_sys=True)
""")


def test_the_optuna_sweep_without_its_extra_names_the_extra(tmp_path):
    res = _cli("train", "-cn", "optuna_infom", "--cfg", "hydra", code=WITHOUT_OPTUNA, cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert _one_error_line(res.stderr) == \
        "error: hydra/sweeper=optuna needs the optuna extra: pip install '.[optuna]' in the project's clone (once released: pip install 'disentangle-quantized[optuna]')"


FAILING = textwrap.dedent("""
    import runpy, sys
    import disentangle.runtime.run

    def train(cfg):
        raise RuntimeError("a bug")

    disentangle.runtime.run.train = train  # an unexpected failure inside the job
    runpy.run_module("disentangle.train", run_name="__main__", alter_sys=True)
""")


def test_a_failed_single_run_writes_error_txt(tmp_path):
    run_dir = tmp_path / "run"
    res = _cli("train", f"resume={tmp_path / 'missing.ckpt'}", f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    line = _one_error_line(res.stderr)
    assert line.startswith("error: resume=") and (run_dir / "error.txt").read_text() == line + "\n"

    run_dir = tmp_path / "bug"
    res = _cli("train", f"hydra.run.dir={run_dir}", code=FAILING, cwd=tmp_path, timeout=120)
    assert res.returncode == 1 and "RuntimeError: a bug" in res.stderr  # a bug keeps its traceback
    assert (run_dir / "error.txt").read_text() == "error: RuntimeError: a bug\n"


QUICK = ["experiment=quickstart", "data.resolution=16", "model.batch_size=16", "trainer.log_every_n_steps=1",
         "callbacks.evaluation.n_samples=256", "callbacks.evaluation.every_n_steps=2",
         "callbacks.evaluation.dci.max_depth=4", "callbacks.evaluation.dci.n_estimators=10",
         "callbacks.evaluation.n_interventions=3", "callbacks.checkpoint.every_n_train_steps=2"]


def test_a_normal_run_and_its_resumption_print_no_warnings(tmp_path):
    """Model summary, checkpoints, figures, W&B (offline) and progress bars as configured by default; the output
    goes to a pipe, as in a log file, so no progress bar either. The second start resumes in the same directory."""
    run_dir = tmp_path / "run"
    env = {"WANDB_MODE": "offline"}
    outputs = []
    for steps, extra in ((4, []), (6, ["auto_resume=true"])):
        res = _cli("train", *QUICK, f"trainer.max_steps={steps}", "logger=wandb", f"hydra.run.dir={run_dir}",
                   *extra, cwd=tmp_path, env=env, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        outputs.append(res.stdout + res.stderr)
    text = "\n".join(outputs)
    assert "final evaluation" in outputs[0] and "resuming from" in outputs[1]
    noisy = [line for line in text.splitlines() if re.search(r"warn|flops|tip:", line, re.IGNORECASE)]
    assert not noisy, "\n".join(noisy)
    assert "it/s]" not in text and "\r" not in text  # no progress bar in a pipe
    assert not (run_dir / "error.txt").exists()
