"""Ground-truth-factor datasets as LightningDataModules (nothing here imports models or metrics)."""
from .base import FactorDataModule, IndexStream
from .prepared import DatasetNotFoundError, PreparedDataModule, default_root
from .procedural_module import ProceduralDataModule, unravel

__all__ = [
    "DatasetNotFoundError",
    "FactorDataModule",
    "IndexStream",
    "PreparedDataModule",
    "ProceduralDataModule",
    "default_root",
    "unravel",
]
