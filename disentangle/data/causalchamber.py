"""The light tunnel of Gamella et al., *Causal chambers as a real-world physical testbed for AI methodology* (Nature
Machine Intelligence 2025), simulated offline by their ``causalchamber`` package (MIT): a factor-indexed dataset of a
dataset nobody here wrote.

The tunnel's camera sees an LED's light through two linear polarizers. The package's image simulators
``causalchamber.simulators.lt.ModelF1``–``ModelF3`` (the paper's models F1–F3, App. IV.2.2) render it as a coloured
hexagon on black whose colour is the LED's (R, G, B) through the sensor model, times Malus' law
``cos²(pol_1 − pol_2)`` (F3 adds the polarizers' per-colour transmission). The five simulator inputs are the factors:

* ``red``, ``green``, ``blue``: LED brightness, evenly spaced levels over [0, 255] (the firmware's range);
* ``pol_1``, ``pol_2``: polarizer angles in degrees, evenly spaced over ``pol_range`` (default [0, 75], 15° apart).

The images depend on the angles only through ``|pol_1 − pol_2|`` (cos² is even and 180°-periodic): the two angles are
not separately identifiable from an image, by the physics of the tunnel, which the metrics show. F2 and F3 clip
bright colours (exposure), so the top brightness levels may merge.

The whole grid is rendered once, on first use, at ``resolution`` px (the simulators' ``image_size``) in chunks, and
kept as uint8. The simulators' parameters are the authors' (their tutorial ``tutorial_ModelsF.py`` in
juangamella/causal-chamber-package @9fb5d82, the values of the paper's case study). Needs the ``causalchamber``
extra: ``pip install 'disentangle-quantized[causalchamber]'``.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import threading
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from ..checks import CAUSALCHAMBER_MISSING
from ..errors import ConfigError
from .base import FactorDataModule
from .procedural_module import unravel

__all__ = ["FACTOR_NAMES", "SIMULATORS", "CausalChamberDataModule", "factor_values", "simulator"]

FACTOR_NAMES = ("red", "green", "blue", "pol_1", "pol_2")
SIMULATORS = ("F1", "F2", "F3")
# The authors' parameters (tutorial_ModelsF.py): sensor response S, white balance, exposure, transmission rates.
_S = [[0.2995802, 0.06920322, 0.028159], [0.04017132, 0.9209918, 0.31265], [0.00217392, 0.2071558, 0.75763]]
_WHITE_BALANCE = {"w_r": 2.65625, "w_g": 1.0, "w_b": 1.77344}
_EXPOSURE = {"F2": 0.8, "F3": 2.5}
_TP, _TC = [0.29, 0.35, 0.33], [0.02, 0.08, 0.18]  # column vectors (3, 1): a flat (3,) broadcasts wrongly
_GEOMETRY = {"center_x": 0.5, "center_y": 0.5, "radius": 0.22, "offset": 0}
_CHUNK = 256  # images per simulator call (it returns float64 (N, R, R, 3))


def _import_lt():
    """``causalchamber.simulators.lt.image.models_f``, quietly: importing the package prints a citation banner and,
    without torchvision, a warning about a simulator not used here."""
    if importlib.util.find_spec("causalchamber") is None:
        raise ConfigError(CAUSALCHAMBER_MISSING)
    with contextlib.redirect_stdout(io.StringIO()):
        from causalchamber.simulators.lt.image import models_f
    return models_f


def simulator(name: str, resolution: int):
    """The package's image model ``name`` (F1, F2, F3) with the authors' parameters, rendering ``resolution`` px."""
    if name not in SIMULATORS:
        raise ValueError(f"data.simulator must be one of {list(SIMULATORS)} (got {name!r})")
    models_f = _import_lt()
    geometry = {**_GEOMETRY, "image_size": int(resolution)}
    if name == "F1":
        return models_f.ModelF1(**geometry)
    common = {"S": np.array(_S), **_WHITE_BALANCE, "exposure": _EXPOSURE[name], **geometry}
    if name == "F2":
        return models_f.ModelF2(**common)
    return models_f.ModelF3(**common, Tp=np.array([_TP]).T, Tc=np.array([_TC]).T)


def factor_values(factor_sizes: Sequence[int], pol_range: Sequence[float]) -> list[np.ndarray]:
    """Each factor's values: brightness levels rounded to integers over [0, 255]; angles evenly over ``pol_range``."""
    lo, hi = (float(v) for v in pol_range)
    values = [np.round(np.linspace(0.0, 255.0, int(n))) for n in factor_sizes[:3]]
    values += [np.linspace(lo, hi, int(n)) for n in factor_sizes[3:]]
    return values


class CausalChamberDataModule(FactorDataModule):
    """``data=causalchamber``: the light tunnel's image simulator over a full grid of its five inputs."""

    def __init__(self, name: str = "causalchamber", simulator: str = "F3", resolution: int = 64,
                 factor_names: Sequence[str] | None = None, factor_sizes: Sequence[int] = (6, 6, 6, 6, 6),
                 pol_range: Sequence[float] = (0.0, 75.0), **kwargs):
        super().__init__(**kwargs)
        if simulator not in SIMULATORS:
            raise ValueError(f"data.simulator must be one of {list(SIMULATORS)} (got {simulator!r})")
        if int(resolution) < 8:
            raise ValueError(f"data.resolution must be >= 8 (got {resolution})")
        sizes = tuple(int(s) for s in factor_sizes)
        if len(sizes) != len(FACTOR_NAMES) or min(sizes) < 2:
            raise ValueError(f"data.factor_sizes must give {len(FACTOR_NAMES)} sizes >= 2, one per "
                             f"{', '.join(FACTOR_NAMES)} (got {list(factor_sizes)})")
        if len(pol_range) != 2 or not -180 <= float(pol_range[0]) < float(pol_range[1]) <= 180:
            raise ValueError(f"data.pol_range must be [low, high] degrees within [-180, 180] (got {list(pol_range)})")
        if importlib.util.find_spec("causalchamber") is None:
            raise ConfigError(CAUSALCHAMBER_MISSING)  # at the build, not at the first batch
        self.name = name
        self.simulator = simulator
        self.resolution = int(resolution)
        self.factor_names = FACTOR_NAMES
        self.factor_sizes = sizes
        self.num_channels = 3
        self.num_samples = int(np.prod(sizes))
        self.values = factor_values(sizes, pol_range)
        self._images: torch.Tensor | None = None
        self._lock = threading.Lock()
        self._check_metadata(factor_names, None)

    def render(self, factors: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, R, R) images of factor classes (B, 5), from the package's simulator."""
        import pandas as pd

        model = simulator(self.simulator, self.resolution)
        classes = factors.cpu().numpy()
        out = torch.empty(len(classes), 3, self.resolution, self.resolution, dtype=torch.uint8)
        for start in range(0, len(classes), _CHUNK):
            block = classes[start:start + _CHUNK]
            inputs = pd.DataFrame({n: v[block[:, i]] for i, (n, v) in enumerate(zip(FACTOR_NAMES, self.values))})
            with warnings.catch_warnings():
                # the simulator's np.cross on 2-D vectors, deprecated in NumPy 2 (their code, not ours)
                warnings.filterwarnings("ignore", message="Arrays of 2-dimensional vectors", category=DeprecationWarning)
                images = model.simulate_from_inputs(inputs)  # float64 (N, R, R, 3) in [0, 1]
            out[start:start + len(block)] = torch.from_numpy(
                np.rint(np.clip(images, 0.0, 1.0) * 255.0).astype(np.uint8)).permute(0, 3, 1, 2)
        return out

    def _table(self) -> torch.Tensor:
        with self._lock:
            if self._images is None:
                self._images = self.render(unravel(torch.arange(self.num_samples), self.factor_sizes))
        return self._images

    def setup(self, stage: str | None = None) -> None:
        self._table()  # rendered before training starts, not inside the first step

    def factor_table(self) -> torch.Tensor:
        return unravel(torch.arange(self.num_samples), self.factor_sizes)

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = self._table()[indices.cpu()].to(indices.device, non_blocking=True)
        return images.float().div_(255.0), unravel(indices, self.factor_sizes)
