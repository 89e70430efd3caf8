"""The package's preloaded launcher (disentangle.runtime.launch): a command forked from it is the command a fresh
interpreter runs (its arguments, directory, environment, exit code, output and numbers), without re-importing torch."""
from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import FAST

from disentangle.runtime import launch

PROBE = """
import json, os, sys
preloaded = "torch" in sys.modules            # before this module imports anything
import torch
print(json.dumps({"preloaded": preloaded, "argv": sys.argv[1:], "cwd": os.getcwd(), "threads": torch.get_num_threads(),
                  "omp": os.environ.get("OMP_NUM_THREADS"), "name": __name__}))
sys.stderr.write("to the log too\\n")
raise SystemExit(int(sys.argv[1]))
"""


def _probe(tmp_path, *argv, **kwargs):
    (tmp_path / "launch_probe.py").write_text(PROBE)
    log = tmp_path / "probe.log"
    code = launch.run_module("launch_probe", list(argv), log, cwd=tmp_path, **kwargs)
    lines = log.read_text().splitlines()
    return code, json.loads(lines[0]), lines[1:]


def test_a_forked_command_gets_its_arguments_directory_threads_and_exit_code_without_importing_torch(tmp_path):
    code, seen, rest = _probe(tmp_path, "3", "a b", threads=1)
    assert code == 3 and rest == ["to the log too"]
    assert seen == {"preloaded": True, "argv": ["3", "a b"], "cwd": str(tmp_path), "threads": 1, "omp": "1",
                    "name": "__main__"}


def test_an_environment_read_while_importing_starts_a_fresh_interpreter(tmp_path):
    """A variable the preloaded imports may have read (here an Inductor setting) cannot be forked into effect."""
    env = {**os.environ, "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}
    assert not launch.forkable(env) and launch.forkable({**os.environ, "OMP_NUM_THREADS": "7"})
    code, seen, _ = _probe(tmp_path, "0", env=env)
    assert code == 0 and seen["preloaded"] is False


def test_a_killed_command_reports_the_signal(tmp_path):
    (tmp_path / "launch_killed.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert launch.run_module("launch_killed", [], tmp_path / "log", cwd=tmp_path) == -signal.SIGKILL


@pytest.fixture(scope="module")
def forked_and_fresh_runs(tmp_path_factory):
    """The same tiny training run forked from the launcher and in a fresh interpreter (``DISENTANGLE_FORK=0``)."""
    out = tmp_path_factory.mktemp("launched")
    metrics = {}
    for how in ("forked", "fresh"):
        args = [*FAST, "seed=1", f"hydra.run.dir={out / how}", "logger=csv"]
        if how == "fresh":   # the switch is read when launching, never while importing
            os.environ["DISENTANGLE_FORK"] = "0"
        try:
            code = launch.run_module("disentangle.train", args, out / f"{how}.log", threads=1)
        finally:
            os.environ.pop("DISENTANGLE_FORK", None)
        assert code == 0, (out / f"{how}.log").read_text()[-3000:]
        metrics[how] = json.loads((out / how / "metrics.json").read_text())
    return metrics


def test_a_forked_training_run_computes_what_a_fresh_interpreter_does(forked_and_fresh_runs):
    forked, fresh = forked_and_fresh_runs["forked"], forked_and_fresh_runs["fresh"]
    numbers = {k: v for k, v in fresh.items() if isinstance(v, float) and "seconds" not in k}   # timings aside
    assert numbers and {k: forked[k] for k in numbers} == numbers


EXITING = """
import atexit, json, sys, threading, time
from joblib import Parallel, delayed
log = open(sys.argv[1], "a")
def note(text):
    log.write(json.dumps(text) + "\\n"); log.flush()
note(str(Parallel(n_jobs=2, backend="loky")(delayed(abs)(-i) for i in range(4))))   # loky's executor stays alive
threading.Thread(target=lambda: (time.sleep(0.5), note("thread done"))).start()
atexit.register(note, "atexit ran")
"""


@pytest.mark.timeout(120)
def test_a_forked_command_exits_as_the_interpreter_does_with_executors_threads_and_atexit(tmp_path):
    """The interpreter's exit steps in order: threading's shutdown (executors stopped, non-daemon threads joined),
    then atexit. A manual thread join instead waited forever on loky's manager (the first real claims runs hung)."""
    (tmp_path / "launch_exiting.py").write_text(EXITING)
    notes = tmp_path / "notes"
    assert launch.run_module("launch_exiting", [str(notes)], tmp_path / "log", cwd=tmp_path, threads=1) == 0
    assert [json.loads(line) for line in notes.read_text().splitlines()] == ["[0, 1, 2, 3]", "thread done",
                                                                            "atexit ran"]


def test_forkable_compares_with_the_environment_the_server_imported_under(monkeypatch):
    """A caller's environment changed after the server started differs from what the server imported under."""
    launch._context()
    assert "TORCHINDUCTOR_MAX_AUTOTUNE" not in launch._SERVER_ENV
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")   # read while importing Inductor: the server's is unset
    assert not launch.forkable(dict(os.environ))
