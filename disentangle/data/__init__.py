"""Ground-truth-factor datasets as LightningDataModules (nothing here imports models or metrics)."""
import importlib

from ..errors import DatasetNotFoundError

# Imported on first use (PEP 562), so that a command's config checks can read cache paths without torch and
# Lightning (disentangle.runtime.preflight); `from disentangle.data import X` and `_target_`s work as before.
_LAZY = {
    "FactorDataModule": ".base", "IndexStream": ".base",
    "PreparedDataModule": ".prepared", "PreparedDataset": ".prepared", "load_dataset": ".prepared",
    "open_prepared": ".prepared",
    "cache_path": ".cache", "default_root": ".cache",
    "ProceduralDataModule": ".procedural_module", "unravel": ".procedural_module",
    "BallsDataModule": ".synthetic", "Cliff2dDataModule": ".synthetic",
    "CausalChamberDataModule": ".causalchamber",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BallsDataModule",
    "Cliff2dDataModule",
    "DatasetNotFoundError",
    "FactorDataModule",
    "IndexStream",
    "PreparedDataModule",
    "PreparedDataset",
    "ProceduralDataModule",
    "cache_path",
    "default_root",
    "load_dataset",
    "open_prepared",
    "unravel",
]
