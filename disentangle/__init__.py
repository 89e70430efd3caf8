"""disentangle: disentangled representation learning with quantized latents.

The package's layout (docs/index.md, "Layout"): the commands ``python -m disentangle.X`` (``train``,
``evaluate``, ``report``, ``select``, ``prepare``, ``chaos``, and the packages ``bench`` and ``doctor``) at the top,
beside ``errors`` and ``checks``, which every layer imports; ``foundation`` (precision, schedules, devices,
provenance), which the library and the runtime share; the training runtime in ``runtime``; the library in
``data``, ``metrics``, ``nn``, ``quantizers``, ``regularizers``, ``models``, ``callbacks`` and ``reporting``.

Modules that moved keep their old dotted names (:data:`MOVED`): a stored config's ``_target_:
disentangle.checkpointing.AtomicCheckpointIO`` or a script's ``import disentangle.loggers`` gets the very module at
its new place, with a :class:`DeprecationWarning`. The package's own code uses the new names only
(``tests/test_layering.py``).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

# the one place the version is written: pyproject.toml reads it (dynamic version), metrics.json records it
__version__ = "0.1.0"

# old module name -> where it lives now (issue 30 item 10, issue 42); old run configs and checkpoints name the old ones
MOVED = {
    "disentangle.run": "disentangle.runtime.run",
    "disentangle.checkpointing": "disentangle.runtime.checkpointing",
    "disentangle.precision": "disentangle.foundation.precision",
    "disentangle.devices": "disentangle.foundation.devices",
    "disentangle.multirun": "disentangle.runtime.multirun",
    "disentangle.loggers": "disentangle.runtime.loggers",
    "disentangle.schedules": "disentangle.foundation.schedules",
    "disentangle.families": "disentangle.runtime.families",
    "disentangle.config": "disentangle.runtime.config",
    "disentangle.paths": "disentangle.runtime.paths",
    "disentangle.provenance": "disentangle.foundation.provenance",
    "disentangle.wandb_log": "disentangle.runtime.wandb_log",
    "disentangle.figures": "disentangle.callbacks.figures",
    "disentangle.selection": "disentangle.reporting.selection",
    "disentangle.bench_seeds": "disentangle.bench.seeds",
    "disentangle.bench_tf32": "disentangle.bench.tf32",
    # issue 42: the leaves the library uses moved below it; a name's oldest alias comes first (former_name)
    "disentangle.runtime.precision": "disentangle.foundation.precision",
    "disentangle.runtime.devices": "disentangle.foundation.devices",
    "disentangle.runtime.schedules": "disentangle.foundation.schedules",
    "disentangle.runtime.provenance": "disentangle.foundation.provenance",
}


def current_name(dotted: str) -> str:
    """``dotted`` (a module or ``module.attribute`` path) with a moved module's old name replaced by its new one."""
    for old, new in MOVED.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old):]
    return dotted


def former_name(dotted: str) -> str:
    """The inverse of :func:`current_name`: ``dotted`` as it was written before the modules moved."""
    for old, new in MOVED.items():
        if dotted == new or dotted.startswith(new + "."):
            return old + dotted[len(new):]
    return dotted


class _MovedLoader(importlib.abc.Loader):
    """Loads an old name as the module at its new place: the same object, its own ``__spec__`` left as it is."""

    def __init__(self, new: str):
        self.new = new
        self.spec = None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.new}; the old name will go in a future release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__  # the import system sets __spec__ to the alias's next: put it back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec

    def get_code(self, fullname):
        """``python -m <old name>`` runs the module at its new place as ``__main__``."""
        warnings.warn(f"{fullname} moved to {self.new}; the old name will go in a future release",
                      DeprecationWarning, stacklevel=2)
        return compile(f"import runpy\nrunpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{fullname}: moved to {self.new}>", "exec")


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED` (nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(MOVED[fullname]))


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
