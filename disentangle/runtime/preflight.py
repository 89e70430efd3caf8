"""The checks a training run's composed config allows before torch and Lightning are imported, so that a mistake
costs about a second rather than the ten the imports take (``python -m disentangle.bench errors`` times them).

Each check says what the full build would say, in the same words; anything it cannot decide from the config alone
(a device's bf16, a model's optimizer count, an incomplete cache) is left to the build
(:func:`disentangle.runtime.run.build`), which checks everything again.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .. import current_name
from ..checks import CAUSALCHAMBER_MISSING, FP16_OFF_CUDA, PRECISION_ALIASES, PRECISIONS
from ..errors import ConfigError, DatasetNotFoundError

__all__ = ["check_training_config", "cuda_impossible"]

PREPARED_TARGET = "disentangle.data.PreparedDataModule"
CAUSALCHAMBER_TARGET = "disentangle.data.CausalChamberDataModule"


def check_training_config(cfg: DictConfig) -> None:
    """Learning rates, batch size, step count, precision and the dataset's file, from ``cfg`` alone: a
    :class:`ConfigError` (or :class:`DatasetNotFoundError`) with the build's one line."""
    for key, value in _learning_rates(_value(cfg, "model")):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
            raise ConfigError(f"{key} must be > 0 (got {float(value)})")
    for key in ("model.batch_size", "data.batch_size"):
        batch = _value(cfg, key)
        if isinstance(batch, int) and not isinstance(batch, bool) and batch < 1:
            raise ConfigError(f"{key} must be >= 1 (got {batch})")
    steps = _value(cfg, "trainer.max_steps")
    if isinstance(steps, int) and steps < 1:
        raise ConfigError(f"trainer.max_steps must be >= 1 (got {steps})")
    _check_precision(cfg)
    _check_split(cfg)
    _check_constraints(cfg)
    _check_dataset(cfg)


def cuda_impossible() -> bool:
    """True where no CUDA device can exist for this process, known without torch: macOS, a Linux machine with no
    NVIDIA driver loaded, or ``CUDA_VISIBLE_DEVICES`` hiding every GPU. False means "maybe" (torch decides)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return True
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not Path("/proc/driver/nvidia/version").exists()


def _check_precision(cfg: DictConfig) -> None:
    requested = _value(cfg, "trainer.precision", "auto")
    value = PRECISION_ALIASES.get(str(requested), str(requested))
    if value not in PRECISIONS:
        raise ConfigError(f"trainer.precision={requested!r} is not supported; choose one of {list(PRECISIONS)}")
    accelerator = str(_value(cfg, "trainer.accelerator", "auto")).lower()
    if value == "16-mixed" and (accelerator == "cpu" or (accelerator == "auto" and cuda_impossible())):
        raise ConfigError(FP16_OFF_CUDA.format(device="CPU"))


def _check_split(cfg: DictConfig) -> None:
    """Montero et al.'s recombination splits exist for their datasets only, with their classes."""
    split = _value(cfg, "data.split")
    if not (isinstance(split, str) and split.startswith("recombination_")):
        return
    import numpy as np

    from ..data.constraints import heldout_mask  # numpy only

    names, sizes = _value(cfg, "data.factor_names"), _value(cfg, "data.factor_sizes")
    try:
        if not (isinstance(names, list) and isinstance(sizes, list)):
            raise ValueError(f"data.split={split} needs a dataset with named factors")  # noqa: TRY004
        heldout_mask(np.zeros((1, len(names)), dtype=np.int64), sizes, names, split, 0.0, (),
                     dataset=str(_value(cfg, "data.name")))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_constraints(cfg: DictConfig) -> None:
    """``data.correlation`` names two factors of the dataset with a positive sigma; a Schott et al. split holds
    something out and trains on something (checked on the full grid of the configured factor sizes)."""
    names, sizes = _value(cfg, "data.factor_names"), _value(cfg, "data.factor_sizes")
    if not (isinstance(names, list) and isinstance(sizes, list) and len(names) == len(sizes)):
        return  # the dataset's own metadata decides, when it is built
    import math

    import numpy as np

    from ..data.constraints import heldout_mask, parse_correlation  # numpy only

    split, correlation = _value(cfg, "data.split"), _value(cfg, "data.correlation")
    try:
        if correlation:
            parse_correlation(correlation, names)
        if split in ("composition", "interpolation", "extrapolation") and math.prod(sizes) <= 5_000_000:
            grid = np.stack(np.meshgrid(*[np.arange(int(n)) for n in sizes], indexing="ij"), -1).reshape(-1, len(sizes))
            keep = _value(cfg, "data.split_keep") or []
            held = heldout_mask(grid, sizes, names, split, float(_value(cfg, "data.split_ratio", 0.15)), list(keep))
            if held.all():
                raise ValueError(f"data.split={split} holds out every combination of data={_value(cfg, 'data.name')}"
                                 f"; lower data.split_ratio")
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


def _check_dataset(cfg: DictConfig) -> None:
    """The causalchamber data without its package; a prepared dataset whose cache is missing and whose official raw file is not in the data root either (the
    build would convert that): the reader's line, naming the file and the prepare command."""
    data = _value(cfg, "data")
    target = current_name(str(data.get("_target_", ""))) if isinstance(data, dict) else ""
    if target == CAUSALCHAMBER_TARGET:
        import importlib.util

        if importlib.util.find_spec("causalchamber") is None:
            raise ConfigError(CAUSALCHAMBER_MISSING)
        return
    if target != PREPARED_TARGET:
        return
    from ..data.cache import cache_path, not_prepared, resolve_root  # torch-free (the package imports lazily)

    name = str(data.get("cache_name") or data.get("name"))
    variant, root = data.get("variant"), data.get("root")
    path = cache_path(name, root, variant)
    if path.is_file():
        return
    resolved = resolve_root(root)
    if resolved.is_dir():
        from ..data.formats import find_raw

        if find_raw(name, resolved, variant) is not None:
            return
    raise DatasetNotFoundError(not_prepared(name, path, variant, str(data.get("raw") or "")))


def _value(cfg: DictConfig, key: str, default=None):
    """``key`` resolved to plain data, or ``default`` where it is absent or does not resolve here (the build then
    reports it)."""
    try:
        node = OmegaConf.select(cfg, key, default=default, throw_on_missing=False)
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except OmegaConfBaseException:
        return default


def _learning_rates(model, prefix: str = "model"):
    """Every ``lr`` key under the model's config (its optimizer's, a regularizer's discriminator's): (dotted key,
    value)."""
    if isinstance(model, dict):
        for key, value in model.items():
            path = f"{prefix}.{key}"
            if key == "lr":
                yield path, value
            else:
                yield from _learning_rates(value, path)
    elif isinstance(model, list):
        for i, value in enumerate(model):
            yield from _learning_rates(value, f"{prefix}[{i}]")
