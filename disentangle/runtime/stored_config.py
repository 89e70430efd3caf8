"""A checkpoint's stored config is data (issue 43 item 5). Opening a checkpoint (``evaluate``, ``select``, the claims'
re-evaluation, the doctor) builds its model, data and evaluation from the config stored in it, with Hydra's
``instantiate``, which would call whatever a ``_target_`` names (``pathlib.Path.write_text``, ``torch.load``,
``subprocess.run``...). So before anything is built, :func:`check_stored_config` walks the whole stored config and
allows only:

* a public class of this package (``disentangle.*``, moved names included);
* what this project's own configs name outside that: :data:`EXTERNAL_TARGETS` and the factory functions
  :data:`FACTORY_TARGETS` (``tests/test_checkpoint_safety.py`` derives both from ``conf/``);
* a ``metric_fn`` that is a public function of ``disentangle.metrics``;
* targets the user names in ``DISENTANGLE_TRUSTED_TARGETS`` (comma-separated; an entry ending in ``.`` trusts a
  whole package), for checkpoints of their own extensions.

A stored config is saved resolved (``disentangle.train``), so an interpolation in one is refused too: resolving it
could make a target after the check. Anything else is one :class:`~disentangle.errors.UnsafeCheckpointError` line
naming the key and the target, raised before any object is built.
"""
from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterator, Sequence

from ..errors import UnsafeCheckpointError

# classes outside this package that conf/ names (the trainer and Lightning's callbacks)
EXTERNAL_TARGETS = frozenset({
    "pytorch_lightning.Trainer",
    "pytorch_lightning.callbacks.ModelCheckpoint",
    "pytorch_lightning.callbacks.TQDMProgressBar",
})
# functions of this package that conf/ names as targets (the loggers' factories)
FACTORY_TARGETS = frozenset({
    "disentangle.runtime.loggers.csv_logger",
    "disentangle.runtime.loggers.wandb_logger",
})
TRUST_VARIABLE = "DISENTANGLE_TRUSTED_TARGETS"
METRIC_FUNCTIONS = "disentangle.metrics."


def trusted_targets() -> tuple[str, ...]:
    """The targets the user trusts beyond the project's (``DISENTANGLE_TRUSTED_TARGETS``)."""
    return tuple(t.strip() for t in os.environ.get(TRUST_VARIABLE, "").split(",") if t.strip())


def _locate(name: str):
    """The object at dotted ``name`` inside this package (importing only modules of this package), else None."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute, None)
            if obj is None:
                return None
        return obj
    return None


def target_allowed(name: str, key: str = "_target_", trusted: Sequence[str] = ()) -> bool:
    """Whether the stored config may build ``name`` at a ``key`` (``_target_`` or ``metric_fn``)."""
    from .. import current_name

    if any(name == t or (t.endswith(".") and name.startswith(t)) for t in trusted):
        return True
    name = current_name(name)
    if key == "_target_" and (name in EXTERNAL_TARGETS or name in FACTORY_TARGETS):
        return True
    parts = name.split(".")
    if parts[0] != "disentangle" or any(not p.isidentifier() or p.startswith("_") for p in parts):
        return False
    if key == "metric_fn" and not name.startswith(METRIC_FUNCTIONS):
        return False
    obj = _locate(name)
    if obj is None or not str(getattr(obj, "__module__", "")).startswith("disentangle."):
        return False
    return inspect.isfunction(obj) if key == "metric_fn" else inspect.isclass(obj)


def _walk(node, path: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every leaf and every mapping entry under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            yield child, value
            yield from _walk(value, child)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            child = f"{path}[{index}]"
            yield child, value
            yield from _walk(value, child)


def check_stored_config(config, what: str, trusted: Sequence[str] | None = None) -> None:
    """Refuse (one :class:`UnsafeCheckpointError` line, ``what`` first) a stored ``config`` (plain containers, as
    ``torch.load`` gives it) that names a target this project would not build, or holds an interpolation."""
    trusted = trusted_targets() if trusted is None else tuple(trusted)
    for key, value in _walk(config):
        if isinstance(value, str) and "${" in value:
            raise UnsafeCheckpointError(
                f"{what}: refused: the stored config's {key} holds an interpolation ({value!r}), which no config "
                f"saved by disentangle.train does (they are saved resolved); nothing of it was built")
        leaf = key.rsplit(".", 1)[-1]
        if leaf in ("_target_", "metric_fn") and value is not None and not (
                isinstance(value, str) and target_allowed(value, leaf, trusted)):
            raise UnsafeCheckpointError(
                f"{what}: refused: the stored config's {key} is {value!r}; opening a checkpoint builds only this "
                f"project's classes and what its configs use (docs/runs.md; trust more with {TRUST_VARIABLE}), "
                f"so nothing of it was built")
