"""A checkpoint's stored config is only data (issue 43 item 5), and a file that is no checkpoint is named for what it
is (item 6). The payloads need no pickle: a stored config whose ``_target_`` writes a file, loads a pickle, runs a
hub module, a NumPy pickle, a command or a builtin. Each is refused in one line naming its key and target before
anything is built, nested in the model, the data, the optimizer, a regularizer or the evaluation callback, plain,
``_partial_``, inside ``_args_`` and through an interpolation; its marker file is never created. A positive control
shows each payload does create its marker when Hydra builds it, so the test can fail."""
from __future__ import annotations

import copy
import os
import random
import re
from pathlib import Path

import forked_cli
import numpy as np
import pytest
import torch
from conftest import CONF, ROOT, compose_config
from hydra.utils import instantiate
from omegaconf import OmegaConf

from disentangle.errors import ConfigError, UnsafeCheckpointError
from disentangle.runtime.checkpointing import load_checkpoint, read_checkpoint
from disentangle.runtime.stored_config import (
    EXTERNAL_TARGETS,
    FACTORY_TARGETS,
    TRUST_VARIABLE,
    check_stored_config,
    target_allowed,
)


class _Touch:
    """Unpickling this creates ``path``: what a pickle behind a payload would carry."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _payloads(tmp: Path) -> dict[str, tuple[dict, Path]]:
    """name -> (a config node that creates its marker when Hydra builds it, the marker)."""
    payloads = {}
    marker = tmp / "pathlib_ran"
    payloads["pathlib"] = ({"_target_": "pathlib.Path.write_text",
                            "_args_": [{"_target_": "pathlib.Path", "_args_": [str(marker)]}, "ran"]}, marker)
    marker = tmp / "torch_load_ran"
    torch.save({"x": _Touch(str(marker))}, tmp / "evil.pt")
    payloads["torch.load"] = ({"_target_": "torch.load", "f": str(tmp / "evil.pt"), "weights_only": False}, marker)
    marker = tmp / "hub_ran"
    hub = tmp / "hubrepo"
    hub.mkdir()
    (hub / "hubconf.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef entry():\n    return 1\n")
    payloads["torch.hub.load"] = ({"_target_": "torch.hub.load", "repo_or_dir": str(hub), "model": "entry",
                                   "source": "local", "trust_repo": True}, marker)
    marker = tmp / "numpy_ran"
    np.save(tmp / "evil.npy", np.array([_Touch(str(marker))], dtype=object), allow_pickle=True)
    payloads["numpy.load"] = ({"_target_": "numpy.load", "file": str(tmp / "evil.npy"), "allow_pickle": True},
                              marker)
    marker = tmp / "subprocess_ran"
    payloads["subprocess"] = ({"_target_": "subprocess.run", "args": f"touch {marker}", "shell": True}, marker)
    marker = tmp / "builtins_ran"
    payloads["builtins.open"] = ({"_target_": "builtins.open", "_args_": [str(marker), "w"]}, marker)
    marker = tmp / "exec_ran"
    payloads["builtins.exec"] = ({"_target_": "builtins.exec", "_args_": [f"open({str(marker)!r}, 'w').close()"]},
                                 marker)
    return payloads


# payloads Hydra's own blocklist stops as well (ours must refuse them first, naming the key)
HYDRA_BLOCKED = {"subprocess", "builtins.exec"}


@pytest.fixture(scope="module")
def stored_config():
    """What ``disentangle.train`` stores in a checkpoint (the composed config, resolved) for a small run."""
    cfg = compose_config(["model=qlae", "model/arch=small", "data=shapes2d", "+regularizer=nhp"], "/tmp/unused")
    return OmegaConf.to_container(cfg, resolve=True)


# where a payload goes: every part of the stored config a checkpoint opener builds
PLACES = ("model", "model.arch.encoder", "model.latent", "data", "model.optimizer", "model.regularizers.nhp",
          "callbacks.evaluation")
FORMS = ("plain", "partial", "args", "interpolation")


def _plant(config: dict, place: str, form: str, payload: dict) -> tuple[dict, str]:
    """``config`` with ``payload`` planted at ``place`` in ``form``; the key the refusal must name."""
    config = copy.deepcopy(config)
    node = config
    for part in place.split("."):
        node = node[part]
    if form == "plain":
        node["extra"] = payload
        return config, f"{place}.extra._target_"
    if form == "partial":
        node["extra"] = {**payload, "_partial_": True}
        return config, f"{place}.extra._target_"
    if form == "args":  # a harmless-looking outer target whose positional argument builds the payload
        node["extra"] = {"_target_": "disentangle.nn.SmallEncoder", "_args_": [payload]}
        return config, f"{place}.extra._args_[0]._target_"
    config.setdefault("paths", {})["evil"] = payload["_target_"]  # interpolation: the target lives elsewhere
    node["extra"] = {**payload, "_target_": "${paths.evil}"}
    return config, f"{place}.extra._target_"


def test_each_payload_runs_when_hydra_builds_it(tmp_path):
    """The positive control: built by Hydra as a stored config would be, each payload creates its marker."""
    for name, (payload, marker) in _payloads(tmp_path).items():
        try:
            instantiate(OmegaConf.create(payload))
            refused = None
        except Exception as exc:  # noqa: BLE001 - what it returns or raises afterwards does not matter
            refused = str(exc)
        if name in HYDRA_BLOCKED:
            assert refused and "blocklisted" in refused and not marker.exists(), name
        else:
            assert marker.exists(), f"{name}: the payload did not run, so refusing it would prove nothing"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("place", PLACES)
def test_every_payload_anywhere_in_any_form_is_refused_before_anything_is_built(stored_config, place, form,
                                                                               tmp_path):
    for name, (payload, marker) in _payloads(tmp_path).items():
        config, key = _plant(stored_config, place, form, payload)
        ckpt = tmp_path / f"{name}.ckpt"
        torch.save({"state_dict": {}, "global_step": 1, "disentangle_config": config}, ckpt)
        with pytest.raises(UnsafeCheckpointError) as exc:
            load_checkpoint(ckpt)
        message = str(exc.value)
        assert len(message.splitlines()) == 1, message
        if form == "interpolation":
            assert "paths.evil" in message or "interpolation" in message, message
        else:
            assert f"{key} is {payload['_target_']!r}" in message, message
        assert not marker.exists(), f"{name} at {place} ({form}) ran"


def test_the_checkpoint_openers_refuse_a_payload_and_build_nothing(stored_config, tmp_path):
    """evaluate, the claims' re-evaluation, select's measurement and the doctor's comparison all open through
    load_checkpoint; each refuses in one line, and the command never runs."""
    from disentangle.claims.runner import _evaluate
    from disentangle.doctor import compare_evaluations
    from disentangle.reporting.selection import measure_run

    payload, marker = _payloads(tmp_path)["subprocess"]
    config, _ = _plant(stored_config, "model", "plain", payload)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": {}, "global_step": 1, "disentangle_config": config}, ckpt)
    (run_dir / "metrics.json").write_text('{"step": 1}')  # what select needs before it opens the checkpoint
    assert "subprocess.run" in _evaluate(ckpt, 16, tmp_path / "claims")
    assert "subprocess.run" in compare_evaluations(ckpt, ("cpu", "cpu"))["error"]
    assert "subprocess.run" in measure_run(run_dir).error
    # the command line, with a data config given (the report): one line, exit 2
    done = forked_cli.run("disentangle.evaluate", f"ckpt={ckpt}", "data=shapes2d", timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().count("\n") == 0 and "model.extra._target_ is 'subprocess.run'" in done.stderr
    assert not marker.exists()


def test_the_allow_list_is_what_conf_uses():
    """Every ``_target_`` in conf/ (and in the sweeps) is allowed; the ones outside this package's classes are
    exactly EXTERNAL_TARGETS and FACTORY_TARGETS, so a new config target cannot be forgotten."""
    import inspect

    from hydra.utils import get_object

    targets = set()
    for path in [*CONF.rglob("*.yaml"), *(ROOT / "sweeps").rglob("*.yaml")]:
        targets |= set(re.findall(r"_target_:\s*([\w.]+)", path.read_text()))
    assert len(targets) > 40
    outside = {t for t in targets if not t.startswith("disentangle.")}
    factories = {t for t in targets if t.startswith("disentangle.") and not inspect.isclass(get_object(t))}
    assert outside == EXTERNAL_TARGETS
    assert factories == FACTORY_TARGETS
    assert all(target_allowed(t) for t in targets), [t for t in targets if not target_allowed(t)]


def test_what_is_allowed_and_what_is_not():
    allowed = ["disentangle.models.Autoencoder", "disentangle.nn.ConvEncoder", "pytorch_lightning.Trainer",
               "disentangle.runtime.loggers.csv_logger"]
    refused = ["pathlib.Path.write_text", "disentangle.runtime.checkpointing._write_atomic",  # private
               "disentangle.runtime.checkpointing.read_checkpoint",  # a function of ours, not a config's
               "disentangle.doctor.__main__", "disentangle.no_such_module.Thing", "os.system", "builtins.eval",
               "pytorch_lightning.Trainer.fit", "disentangle", ""]
    assert [t for t in allowed if not target_allowed(t)] == []
    assert [t for t in refused if target_allowed(t)] == []
    assert target_allowed("disentangle.metrics.accumulate.disentanglement_metrics", "metric_fn")
    assert not target_allowed("shutil.rmtree", "metric_fn")
    assert not target_allowed("disentangle.models.Autoencoder", "metric_fn")  # a metric_fn is a function
    # an old module name of a moved class is the class
    assert target_allowed("disentangle.runtime.precision.Island") == target_allowed(
        "disentangle.foundation.precision.Island")
    # the user's own extensions, trusted by name or by package
    assert not target_allowed("my_lab.MyDecoder")
    assert target_allowed("my_lab.MyDecoder", trusted=["my_lab."])
    assert target_allowed("my_lab.MyDecoder", trusted=["my_lab.MyDecoder"])
    assert not target_allowed("my_lab_evil.X", trusted=["my_lab."])


def test_a_trusted_target_is_built_and_the_variable_is_read(stored_config, monkeypatch):
    config = copy.deepcopy(stored_config)
    config["model"]["arch"]["encoder"]["_target_"] = "my_lab.MyEncoder"
    with pytest.raises(UnsafeCheckpointError, match=r"model.arch.encoder._target_ is 'my_lab.MyEncoder'"):
        check_stored_config(config, "ckpt=x")
    monkeypatch.setenv(TRUST_VARIABLE, "other.Thing, my_lab.")
    check_stored_config(config, "ckpt=x")  # no error


def test_a_real_stored_config_passes(trained_run):
    """A checkpoint disentangle.train wrote opens as before (the check refuses nothing of the project's own)."""
    ckpt = trained_run("model=tripod", "data=shapes2d") / "checkpoints" / "last.ckpt"
    model, run, datamodule, raw = load_checkpoint(ckpt)
    assert type(model).__name__ == "Autoencoder" and run.model.name == "tripod"


# -- item 6: files that are no checkpoint --------------------------------------------------------------------------
def _real_checkpoint_bytes(trained_run) -> bytes:
    return (trained_run("model=tripod", "data=shapes2d") / "checkpoints" / "last.ckpt").read_bytes()


def test_a_file_that_is_no_checkpoint_is_named_for_what_it_is(trained_run, tmp_path):
    import h5py

    real = _real_checkpoint_bytes(trained_run)
    rng = random.Random(0)
    files = {"random.ckpt": bytes(rng.getrandbits(8) for _ in range(100)),
             "truncated.ckpt": real[: len(real) // 2], "empty.ckpt": b"", "notes.ckpt": b"lr: 0.001\nsteps: 100\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with h5py.File(tmp_path / "keras.ckpt", "w") as f:
        f["kernel"] = np.ones(3)
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 3}, tmp_path / "other_torch.ckpt")
    np.savez(tmp_path / "arrays.npz", a=np.ones(2))
    (tmp_path / "arrays.npz").rename(tmp_path / "arrays.ckpt")
    expected = {"random.ckpt": "not a checkpoint: its 100 bytes are in no format torch writes",
                "truncated.ckpt": "truncated or damaged",
                "empty.ckpt": "an empty file (0 bytes)",
                "notes.ckpt": "a text file (it begins 'lr: 0.001')",
                "keras.ckpt": "an HDF5 file",
                "other_torch.ckpt": "a torch file written by something else (it holds no run config of "
                                    "disentangle.train: keys model, epoch)",
                "arrays.ckpt": "a zip archive written by something else"}
    for name, words in expected.items():
        with pytest.raises(ConfigError) as exc:
            load_checkpoint(tmp_path / name)
        message = str(exc.value)
        assert words in message and len(message.splitlines()) == 1, (name, message)
        assert "could run code" not in message and not isinstance(exc.value, UnsafeCheckpointError), name
    # a real pickle that would run code keeps its words
    torch.save({"payload": _Touch(str(tmp_path / "never"))}, tmp_path / "pickle.ckpt")
    with pytest.raises(UnsafeCheckpointError, match="could run code"):
        read_checkpoint(tmp_path / "pickle.ckpt", "ckpt=pickle.ckpt")
    assert not (tmp_path / "never").exists()
