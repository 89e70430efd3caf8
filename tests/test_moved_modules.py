"""Old module names keep working (issue 30 item 10, issue 42): the modules that moved into ``disentangle.runtime``,
``disentangle.foundation``, ``disentangle.bench``, ``callbacks`` and ``reporting`` are still found under their old
names (``disentangle.MOVED``),
as the very same module objects, so that an old run's ``.hydra/config.yaml`` or a checkpoint's stored config
(``_target_: disentangle.checkpointing.AtomicCheckpointIO``) still instantiates and a configuration keeps its
``config_key``. That the package itself uses only the new names is checked in ``tests/test_layering.py``."""
from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from disentangle import MOVED, current_name, former_name


def _forget(monkeypatch, old: str) -> None:
    """As in a fresh process: the alias not imported yet (the module at its new place may be)."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    parent, _, child = old.rpartition(".")
    monkeypatch.delattr(sys.modules[parent], child, raising=False)


def test_a_stored_target_with_an_old_name_is_the_class_at_its_new_place(monkeypatch):
    from disentangle.runtime.checkpointing import AtomicCheckpointIO

    _forget(monkeypatch, "disentangle.checkpointing")
    with pytest.warns(DeprecationWarning, match="disentangle.checkpointing moved to disentangle.runtime.checkpointing"):
        cls = get_class("disentangle.checkpointing.AtomicCheckpointIO")
    assert cls is AtomicCheckpointIO


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_name_imports_the_very_module_at_its_new_place(old, monkeypatch):
    new = MOVED[old]
    module = importlib.import_module(new)
    spec = module.__spec__
    _forget(monkeypatch, old)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is module
        exec(f"import {old} as alias\nassert alias is module", {"module": module})  # noqa: S102
        parent, _, child = old.rpartition(".")
        exec(f"from {parent} import {child} as alias\nassert alias is module", {"module": module})  # noqa: S102
    # the module keeps its own identity: name, spec (pickling, reload, python -m use it)
    assert module.__name__ == new and module.__spec__ is spec and module.__spec__.name == new
    # a module that moved twice (the package's top, then runtime, then foundation) is written as its oldest name
    oldest = next(name for name, target in MOVED.items() if target == new)
    assert current_name(old) == new and former_name(new) == oldest


def test_names_that_never_moved_are_not_aliased():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("disentangle.no_such_module")
    assert current_name("disentangle.runtime.run.train") == "disentangle.runtime.run.train"
    assert current_name("disentangle.models.Autoencoder") == "disentangle.models.Autoencoder"
    assert current_name("disentangle.run.train") == "disentangle.runtime.run.train"
    assert current_name("disentangle.runtime_x") == "disentangle.runtime_x"
    assert former_name("disentangle.runtime.loggers.wandb_logger") == "disentangle.loggers.wandb_logger"


def _with_old_names(tree):
    if isinstance(tree, dict):
        return {k: former_name(v) if k == "_target_" and isinstance(v, str) else _with_old_names(v)
                for k, v in tree.items()}
    if isinstance(tree, list):
        return [_with_old_names(v) for v in tree]
    return tree


def test_an_old_runs_config_instantiates_and_keeps_its_config_key(tmp_path):
    from conftest import compose_config

    from disentangle.runtime.checkpointing import AtomicCheckpointIO, RngState
    from disentangle.runtime.loggers import config_key

    cfg = compose_config(["logger=csv"], tmp_path)
    new = OmegaConf.to_container(cfg, resolve=False)
    old = _with_old_names(new)
    assert old["trainer"]["plugins"][0]["_target_"] == "disentangle.checkpointing.AtomicCheckpointIO"
    assert old["logger"]["_target_"] == "disentangle.loggers.csv_logger"
    assert config_key(old) == config_key(new)

    stored = OmegaConf.create(old)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert isinstance(instantiate(stored.trainer.plugins[0]), AtomicCheckpointIO)
        assert isinstance(instantiate(stored.callbacks.rng_state), RngState)
        logger = instantiate(OmegaConf.to_container(stored.logger, resolve=True))
    from pytorch_lightning.loggers import CSVLogger

    assert isinstance(logger, CSVLogger)


def test_importing_every_module_of_the_package_imports_no_old_name():
    """In a fresh process: every module of the package at its new place (``pkgutil.walk_packages``) is imported and
    none of the old names is then in ``sys.modules``."""
    code = ("import importlib, pkgutil, sys, disentangle\n"
            "names = [i.name for i in pkgutil.walk_packages(disentangle.__path__, 'disentangle.')\n"
            "         if not i.name.endswith('__main__')]\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "print(len(names), sorted(set(disentangle.MOVED) & set(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    count, aliases = done.stdout.split(maxsplit=1)
    assert int(count) > 100 and aliases.strip() == "[]", done.stdout


def test_python_dash_m_with_an_old_name_runs_the_module_at_its_new_place():
    """``python -m disentangle.devices 4`` and ``python -m disentangle.runtime.devices 4`` (docs of older releases)
    print the node's layout as ``python -m disentangle.foundation.devices 4`` does."""
    runs = [subprocess.run([sys.executable, "-m", name, "4"], capture_output=True, text=True, timeout=120, check=False)
            for name in ("disentangle.devices", "disentangle.runtime.devices", "disentangle.foundation.devices")]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr[-1000:] for r in runs]
    assert runs[0].stdout == runs[1].stdout == runs[2].stdout and "run(s) per GPU" in runs[0].stdout
