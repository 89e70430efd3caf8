"""Reader of the causal chamber's real light-tunnel photographs with their measured factors: the ``lt_crl_benchmark_v1``
dataset of Gamella, Bing and Runge (ICML 2025; data CC BY 4.0), as its owners' zip holds it (the layout the
``causalchamber`` package reads, juangamella/causal-chamber-package @9fb5d82, ``causalchamber/datasets/main.py``):

* ``lt_crl_benchmark_v1/<experiment>/<experiment>.csv``: one row per photograph, with the actuators' set values
  ``red``, ``green``, ``blue`` (0–255) and ``pol_1``, ``pol_2`` (degrees) among ~50 sensor columns, and ``image_file``;
* ``lt_crl_benchmark_v1/<experiment>/images_64/<image_file>``: the 64×64 RGB JPEG photograph.

An experiment is a ``data.variant`` (``uniform``, the default: 2,000 photographs of i.i.d. uniform settings;
``buchholz_1_obs`` etc.: 10,000 each from a linear SCM). The measured values are continuous, so each factor is cut
into ``factor_sizes[i]`` equal-frequency bins (quantiles of that experiment's values; our choice), which the metrics
read as classes. Read from the zip directly or from its extracted folder.
"""
from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

FACTORS = ("red", "green", "blue", "pol_1", "pol_2")
FOLDER = "lt_crl_benchmark_v1"
EXPERIMENTS = ("uniform", "buchholz_1_obs", "buchholz_1_red", "buchholz_1_green", "buchholz_1_blue",
               "buchholz_1_pol_1", "buchholz_1_pol_2", "citris_1")
SIZE = 64


class LayoutError(ValueError):
    """The file is not in the owners' layout; ``formats`` reports it as a ``FormatError`` (one line naming it)."""


def _format_error(message: str) -> LayoutError:
    return LayoutError(message)


class _Source:
    """The experiment's files, in the zip or in the extracted folder."""

    def __init__(self, path: Path, experiment: str):
        self.path, self.experiment = Path(path), experiment
        self.zip = zipfile.ZipFile(self.path) if self.path.is_file() else None
        names = self.zip.namelist() if self.zip is not None else None
        csv_name = f"{experiment}/{experiment}.csv"
        if names is not None:
            found = [n for n in names if n == csv_name or n.endswith("/" + csv_name)]
            if not found:
                experiments = sorted({n.split("/")[-2] for n in names if n.endswith(".csv") and "/" in n})
                raise _format_error(f"{self.path}: no {csv_name} (experiments in it: {experiments}); "
                                    f"expected the owners' {FOLDER}.zip")
            self.base = found[0][: -len(csv_name)]
        else:
            base = self.path if (self.path / experiment).is_dir() else self.path / FOLDER
            if not (base / csv_name).is_file():
                raise _format_error(f"{self.path}: no {csv_name}; expected the extracted {FOLDER}/ folder")
            self.base = base

    def where(self, member: str) -> str:
        return f"{self.path}:{member}" if self.zip is not None else str(self.base / member)

    def read(self, member: str) -> bytes:
        try:
            if self.zip is not None:
                return self.zip.read(self.base + member)
            return (self.base / member).read_bytes()
        except (KeyError, FileNotFoundError) as exc:
            raise _format_error(f"{self.where(member)}: missing (the csv names it)") from exc

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()


def _rows(source: _Source) -> tuple[np.ndarray, list[str]]:
    member = f"{source.experiment}/{source.experiment}.csv"
    text = source.read(member).decode("utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in (*FACTORS, "image_file") if c not in (reader.fieldnames or ())]
    if missing:
        raise _format_error(f"{source.where(member)}: missing columns {missing}")
    values, files = [], []
    for i, row in enumerate(reader):
        try:
            values.append([float(row[c]) for c in FACTORS])
        except ValueError as exc:
            raise _format_error(f"{source.where(member)}: row {i + 1}: {exc}") from exc
        files.append(row["image_file"])
    if not files:
        raise _format_error(f"{source.where(member)}: no rows")
    return np.asarray(values), files


def quantile_classes(values: np.ndarray, bins: int) -> np.ndarray:
    """Classes 0..bins-1 of a column cut at its ``bins``-quantiles (ties stay in one class; empty classes are not
    renumbered, so the class count is exactly ``bins``)."""
    edges = np.quantile(values, np.arange(1, bins) / bins)
    return np.searchsorted(edges, values, side="right").astype(np.int64)


def read(path: Path, expected: tuple[int, ...], experiment: str):
    """One experiment: ``(classes, iterate)``, the binned measured factors (N, 5) and ``iterate(chunk)`` yielding
    ``(start, images)`` of the decoded 64-px photographs, uint8 (b, 3, 64, 64)."""
    from PIL import Image

    if experiment not in EXPERIMENTS:
        raise _format_error(f"unknown data.variant {experiment!r}; expected one of {list(EXPERIMENTS)}")
    source = _Source(path, experiment)
    values, files = _rows(source)
    classes = np.stack([quantile_classes(values[:, i], int(b)) for i, b in enumerate(expected)], axis=1)
    n = len(files)

    def decode(i: int) -> np.ndarray:
        member = f"{experiment}/images_{SIZE}/{files[i]}"
        try:
            with Image.open(io.BytesIO(source.read(member))) as im:
                if im.size != (SIZE, SIZE):
                    raise _format_error(f"{source.where(member)}: expected {SIZE}x{SIZE}, got {im.size[0]}x{im.size[1]}")
                return np.asarray(im.convert("RGB")).transpose(2, 0, 1)
        except OSError as exc:
            raise _format_error(f"{source.where(member)}: unreadable image ({exc})") from exc

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        try:
            for start in range(0, n, chunk):
                yield start, np.stack([decode(i) for i in range(start, min(n, start + chunk))])
        finally:
            source.close()

    return classes, iterate
