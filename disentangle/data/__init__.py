"""Ground-truth-factor datasets as LightningDataModules (nothing here imports models or metrics)."""
from ..errors import DatasetNotFoundError
from .base import FactorDataModule, IndexStream
from .prepared import (
    PreparedDataModule,
    PreparedDataset,
    cache_path,
    default_root,
    load_dataset,
    open_prepared,
)
from .procedural_module import ProceduralDataModule, unravel
from .synthetic import BallsDataModule, Cliff2dDataModule

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
