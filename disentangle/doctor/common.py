"""What the doctor's checks share: where their runs start, Lightning kept quiet, a run's logged losses."""
from __future__ import annotations

import contextlib
import csv
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

from ..runtime.paths import checkout_root

# runs start in the checkout when there is one (its copy of the package), else here (an installed wheel)
ROOT = checkout_root()


def read_losses(run_dir: Path) -> dict[str, list[float]]:
    """Every ``train/*`` term a run logged (``csv/metrics.csv``), column by column, in step order."""
    path = Path(run_dir) / "csv" / "metrics.csv"
    if not path.is_file():
        return {}
    terms: dict[str, list[float]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key and key.startswith("train/") and value not in ("", None):
                    terms.setdefault(key, []).append(float(value))
    return terms


_NOISE = (r".*isinstance\(treespec, LeafSpec\).*", "Using ModelCheckpoint with manual optimization")


@contextlib.contextmanager
def quiet() -> Iterator[list]:
    """Lightning's info lines off the terminal (they would scroll the table away); warnings recorded, not shown."""
    names = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for noise in _NOISE:  # known and harmless (pyproject's pytest filters drop them too)
                warnings.filterwarnings("ignore", message=noise)
            yield caught
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
