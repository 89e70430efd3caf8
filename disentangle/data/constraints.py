"""Train-time constraints on a factor grid (issue 46 item 1): held-out combinations (``data.split``) and correlated
factor pairs (``data.correlation``). Pure functions of a dataset's factor class table; the stream that samples by
them is :class:`disentangle.data.base.ConstrainedStream`.

**Splits** (Schott et al., ICLR 2022, §3; the rules of the supplementary code their benchmark's files were made with,
which the benchmark's own test pins at about 70% held out). ``r`` is the held-out fraction per factor (theirs:
dSprites 0.2, Shapes3D 0.15, MPI3D 0.1); ``keep`` names factors never held out (their categorical ones: dSprites'
shape, Shapes3D's object type, MPI3D's shape and size). Over the other factors V:

* ``extrapolation``: held out when any factor of V is among its top ``ceil(n·r)`` values;
* ``interpolation``: held out when any factor of V is at one of ``ceil(n·r)`` interior values, those that
  ``round(linspace(0, n-1, n - ceil(n·r)))`` skips;
* ``composition``: trained on when any factor of V is among its lowest ``floor(n·q)`` values, with
  ``q = 1 - (1 - (1-r)^|V|)^(1/|V|)``; held out otherwise (every factor of V high at once);
* ``random``: nothing held out (every combination trains: this project's default, unchanged).

**Recombination splits** (Montero et al., ICLR 2021; the held-out sets of their camera-ready code,
mmrl/disent-and-gen@9b34e90, ``scripts/configs/datasplits.py``, the variants ``scripts/analysis/conditions.yaml``
names). Defined for their three datasets only (:data:`MONTERO`); ``split_ratio`` and ``split_keep`` do not apply.
A combination is held out when every listed factor is at one of the listed classes:

* ``recombination_to_element``: one corner of the grid, every factor constrained (their ``leave1out``);
* ``recombination_to_range``: one value of a factor never seen with half the range of another (dSprites'
  ``shape2tx``, Shapes3D's ``shape_to_objh``, MPI3D's ``cylinder2horz20``).

Their filters compare raw latent values (MPI3D: class indices); here they are the class indices those values give:
dSprites' scale 0.5..1 step 0.1, orientation linspace(0, 2 pi, 40), position k/31; Shapes3D's hues k/10, scale
linspace(0.75, 1.25, 8), orientation linspace(-30, 30, 15). One bound sits on a grid value: dSprites' orientation
"> 2 pi/3" excludes class 13 (= 2 pi/3 exactly; in their float32 values it may fall either side). A thesis that
follows them (Tonnaer 2022, Table 5.1) prints other recombination-to-element thresholds; the code's are used.

**Correlations** (Roth et al., ICLR 2023, their code's sampling weights, after Träuble et al. 2021): each pair
``(i, j)`` with strength ``sigma`` weighs a sample by ``exp(-(c_i - c_j)² / (2 sigma²))`` with ``c = k/(n-1)`` (``1 - c_j``
when ``anti``); pairs multiply. Their settings: sigma 0.1 (standard), 0.4 (weak), 0.04 (strong). Training only: the
evaluation set keeps the full, uncorrelated distribution.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["MONTERO", "SPLITS", "correlation_weights", "heldout_mask", "montero_split", "parse_correlation"]

SPLITS = ("random", "composition", "interpolation", "extrapolation", "recombination_to_element",
          "recombination_to_range")
_R = lambda lo, hi: list(range(lo, hi + 1))
# dataset -> split -> {factor: held-out classes}; held out = every condition at once (module doc)
MONTERO: dict[str, dict[str, dict[str, list[int]]]] = {
    "dsprites": {
        # ellipse, scale > 0.6, 120 deg < orientation < 240 deg, x > 0.66, y > 0.66
        "recombination_to_element": {"shape": [1], "scale": _R(2, 5), "orientation": _R(14, 25),
                                     "pos_x": _R(21, 31), "pos_y": _R(21, 31)},
        # a square in the right half
        "recombination_to_range": {"shape": [0], "pos_x": _R(16, 31)},
    },
    "shapes3d": {
        # every hue >= 0.8, scale >= 1.1, cylinder, orientation > 20 deg
        "recombination_to_element": {"floor_hue": [8, 9], "wall_hue": [8, 9], "object_hue": [8, 9],
                                     "scale": _R(5, 7), "shape": [1], "orientation": _R(12, 14)},
        # a pill (capsule) with an object hue >= 0.5
        "recombination_to_range": {"shape": [3], "object_hue": _R(5, 9)},
    },
    "mpi3d": {
        # olive large cylinder, camera at the centre, sea-green background, arm past 35 on both axes
        "recombination_to_element": {"object_color": [5], "object_shape": [2], "object_size": [1],
                                     "camera_height": [1], "background_color": [1], "robot_x": _R(36, 39),
                                     "robot_y": _R(36, 39)},
        # a cylinder with the arm's horizontal axis below 20
        "recombination_to_range": {"object_shape": [2], "robot_x": _R(0, 19)},
    },
}


def _varying(names: Sequence[str], keep: Sequence[str], sizes: Sequence[int]) -> list[int]:
    """The factors a split may hold values of out: not kept, and with more than one class (holding out a constant
    factor's only value would hold out everything)."""
    unknown = sorted(set(keep) - set(names))
    if unknown:
        raise ValueError(f"data.split_keep names {unknown}, which are not factors; choose from {list(names)}")
    return [i for i, name in enumerate(names) if name not in set(keep) and int(sizes[i]) > 1]


def montero_split(dataset: str, split: str) -> dict[str, list[int]]:
    """Montero et al.'s held-out conditions of ``split`` on ``dataset`` (:data:`MONTERO`), or a one-line error."""
    if dataset not in MONTERO:
        raise ValueError(f"data.split={split} is Montero et al.'s, defined for {sorted(MONTERO)} (got data={dataset}); "
                         f"on this dataset use composition, interpolation or extrapolation")
    return MONTERO[dataset][split]


def heldout_mask(factors: np.ndarray, sizes: Sequence[int], names: Sequence[str], split: str, ratio: float,
                 keep: Sequence[str] = (), dataset: str | None = None) -> np.ndarray:
    """Boolean (N,) mask of the samples whose factor combination ``split`` holds out of training (see the module
    docstring for the rules); all False for ``random``. The recombination splits need ``dataset``'s name."""
    if split not in SPLITS:
        raise ValueError(f"data.split must be one of {list(SPLITS)} (got {split!r})")
    factors = np.asarray(factors)
    if split == "random":
        return np.zeros(len(factors), dtype=bool)
    if split.startswith("recombination_"):
        held = np.ones(len(factors), dtype=bool)
        for name, classes in montero_split(str(dataset), split).items():
            if name not in names:
                raise ValueError(f"data.split={split} constrains factor {name!r}, which data={dataset} lacks "
                                 f"(its factors: {list(names)})")
            i = list(names).index(name)
            if max(classes) >= int(sizes[i]):
                raise ValueError(f"data.split={split} holds out class {max(classes)} of {name}, which has "
                                 f"{sizes[i]} classes in this variant of data={dataset}")
            held &= np.isin(factors[:, i], classes)
        return held
    if not 0 < float(ratio) < 1:
        raise ValueError(f"data.split_ratio must be in (0, 1) (got {ratio})")
    varying = _varying(names, keep, sizes)
    if not varying:
        raise ValueError(f"data.split={split} holds nothing out: data.split_keep keeps every factor that varies")
    r = float(ratio)
    if split == "composition":
        q = 1 - (1 - (1 - r) ** len(varying)) ** (1 / len(varying))
        trained = np.zeros(len(factors), dtype=bool)
        for i in varying:
            trained |= factors[:, i] < math.floor(int(sizes[i]) * q)
        if not trained.any():
            raise ValueError(f"data.split=composition with data.split_ratio={r} trains on nothing: every varying factor "
                             f"has fewer than 1/q = {1 / q:.1f} values; lower the ratio")
        return ~trained
    held = np.zeros(len(factors), dtype=bool)
    for i in varying:
        n = int(sizes[i])
        pad = math.ceil(n * r)
        if split == "extrapolation":
            out = np.arange(n - pad, n)
        else:
            out = np.setdiff1d(np.arange(n), np.round(np.linspace(0, n - 1, n - pad)).astype(int))
        held |= np.isin(factors[:, i], out)
    return held


def parse_correlation(correlation, names: Sequence[str]) -> list[tuple[int, int, float, bool]]:
    """``data.correlation`` (a list of ``{factors: [a, b], sigma: s, anti: false}``) as ``(i, j, sigma, anti)``."""
    if not correlation:
        return []
    pairs = []
    for k, item in enumerate(correlation):
        where = f"data.correlation[{k}]"
        if not isinstance(item, Mapping) or set(item) - {"factors", "sigma", "anti"}:
            raise ValueError(f"{where} must be {{factors: [a, b], sigma: s, anti: false}} (got {item!r})")
        pair = list(item.get("factors") or [])
        if len(pair) != 2 or pair[0] == pair[1] or any(p not in names for p in pair):
            raise ValueError(f"{where}.factors must be two different factors of {list(names)} (got {pair})")
        sigma = item.get("sigma")
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0:
            raise ValueError(f"{where}.sigma must be > 0 (got {sigma!r})")
        pairs.append((list(names).index(pair[0]), list(names).index(pair[1]), float(sigma), bool(item.get("anti"))))
    return pairs


def correlation_weights(factors: np.ndarray, sizes: Sequence[int], pairs) -> np.ndarray:
    """(N,) float64 sampling weights of Roth et al.'s correlated pairs: the product over pairs of
    ``exp(-(c_i - c_j)² / (2 sigma²))``, ``c = k/(n-1)`` (``1 - c_j`` when anti-correlated)."""
    factors = np.asarray(factors, dtype=np.float64)
    weights = np.ones(len(factors))
    for i, j, sigma, anti in pairs:
        ci = factors[:, i] / max(int(sizes[i]) - 1, 1)
        cj = factors[:, j] / max(int(sizes[j]) - 1, 1)
        weights *= np.exp(-((ci - (1 - cj if anti else cj)) ** 2) / (2 * sigma ** 2))
    return weights
