"""Run a chosen set of metrics by name: what the evaluation callback and ``python -m disentangle.evaluate`` call.

Two kinds (spec ``shared/specs/categorical_vae.md`` §12 lists both):

* **array metrics** — functions of one (latents, factors) evaluation set: InfoMEC, DCI (qlae.md §8), MIG, SAP,
  Modularity, Explicitness (categorical_vae.md §12), MCC (cliff.md §7.1), the latent rotation angle of a 2-factor
  dataset (categorical_vae.md §16; skipped with a logged reason on other data). :func:`array_metrics` runs them on
  numpy arrays, so it can run in a worker thread;
* **sampled metrics** — FactorVAE and BetaVAE scores draw their own batches with one factor fixed, so they need
  the data module and an encoder (:func:`sampled_metrics`).

Every result is flattened into one dict: the scalar keys of :data:`SCALAR_KEYS` (floats) plus a few arrays
(``nmi``, ``active``, ``dci_importance``, per-source values) for ``metrics.json`` and the figures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from disentangle.metrics.dci import dci
from disentangle.metrics.infomec import infomec
from disentangle.metrics.mcc import mcc
from disentangle.metrics.mig import mig
from disentangle.metrics.modularity import explicitness, modularity
from disentangle.metrics.rotation import rotation
from disentangle.metrics.sampled import betavae_score, factorvae_score
from disentangle.metrics.sap import sap

__all__ = [
    "ARRAY_METRICS",
    "METRICS",
    "SAMPLED_METRICS",
    "SCALAR_KEYS",
    "SCALAR_LABELS",
    "array_metrics",
    "check_metric_names",
    "sampled_metrics",
]

# name -> what the function returns, flattened into the result (key in the function's dict -> result key)
_ARRAY: dict[str, tuple[Callable[..., dict], dict[str, str]]] = {
    "infomec": (infomec, {"infom": "infom", "infoe": "infoe", "infoc": "infoc", "nmi": "nmi", "active": "active"}),
    "dci": (dci, {"d": "dci_d", "i": "dci_i", "c": "dci_c", "importance": "dci_importance"}),
    "mig": (mig, {"mig": "mig", "per_source": "mig_per_source"}),
    "sap": (sap, {"sap": "sap", "per_source": "sap_per_source"}),
    "modularity": (modularity, {"modularity": "modularity", "per_latent": "modularity_per_latent"}),
    "explicitness": (explicitness, {"explicitness": "explicitness", "per_source": "explicitness_per_source"}),
    "mcc": (mcc, {"mcc": "mcc", "matching": "mcc_matching"}),
    "rotation": (rotation, {"rotation": "rotation", "per_factor": "rotation_per_factor",
                            "directions": "rotation_directions", "r2": "rotation_r2"}),
}
_SAMPLED: dict[str, tuple[Callable[..., dict], dict[str, str]]] = {
    "factorvae": (factorvae_score, {"factorvae": "factorvae"}),
    "betavae": (betavae_score, {"betavae": "betavae"}),
}
ARRAY_METRICS = tuple(_ARRAY)
SAMPLED_METRICS = tuple(_SAMPLED)
METRICS = ARRAY_METRICS + SAMPLED_METRICS

# Every scalar a full evaluation can report, in table order, with its column label.
SCALAR_LABELS = {
    "infom": "InfoM", "infoe": "InfoE", "infoc": "InfoC", "dci_d": "D", "dci_i": "I", "dci_c": "C",
    "mig": "MIG", "sap": "SAP", "modularity": "Mod", "explicitness": "Expl", "mcc": "MCC", "rotation": "Rot (deg)",
    "factorvae": "FactorVAE", "betavae": "BetaVAE", "psnr": "PSNR (dB)", "mse": "MSE",
}
SCALAR_KEYS = tuple(SCALAR_LABELS)

log = logging.getLogger(__name__)


def check_metric_names(names: Iterable[str] | str, *, key: str = "metrics") -> tuple[str, ...]:
    """The names as a tuple in the order given (``"all"`` = every metric); an unknown name raises one ValueError
    that names ``key`` and the allowed values."""
    if isinstance(names, str):
        names = METRICS if names == "all" else (names,)
    names = tuple(str(n) for n in names)
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"{key}: unknown {unknown}; choose from {list(METRICS)} (or all)")
    return tuple(dict.fromkeys(names))  # drop repeats, keep order


def _flatten(name: str, out: Mapping[str, Any], keys: Mapping[str, str]) -> dict[str, Any]:
    flat = {}
    for src, dst in keys.items():
        value = out[src]
        flat[dst] = float(value) if dst in SCALAR_LABELS else np.asarray(value)
    return flat


def array_metrics(
    latents: Any,
    factors: Any,
    *,
    discrete_latents: bool,
    metrics: Iterable[str] = ("infomec", "dci"),
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the array metrics among ``metrics`` (sampled ones are ignored here) on one evaluation set.

    ``options[name]`` are keyword arguments of that metric's function (e.g. ``{"dci": {"max_depth": 8}}``);
    ``discrete_latents`` goes to InfoMEC. Returns the flattened results (see the module docstring).
    """
    options = options or {}
    out: dict[str, Any] = {}
    for name in check_metric_names(metrics):
        if name not in _ARRAY:
            continue
        fn, keys = _ARRAY[name]
        if name == "rotation" and not _rotation_applies(factors, latents):
            continue
        kwargs = dict(options.get(name) or {})
        if name == "infomec":
            kwargs["discrete_latents"] = discrete_latents
        out.update(_flatten(name, fn(factors, latents, **kwargs), keys))
    return out


def _rotation_applies(factors: Any, latents: Any) -> bool:
    """The rotation angle needs exactly 2 factors and >= 2 latents (categorical_vae.md §16); on other data it is
    skipped with a logged reason (so ``metrics: all`` works everywhere)."""
    n_s, n_z = (shape[1] if len(shape) == 2 else 1 for shape in (np.shape(factors), np.shape(latents)))
    if n_s == 2 and n_z >= 2:
        return True
    log.warning("metric 'rotation' skipped: it needs exactly 2 factors and at least 2 latent dimensions "
                "(got %d factors, %d latents)", n_s, n_z)
    return False


def sampled_metrics(
    datamodule: Any,
    encode: Callable[[Any], Any],
    *,
    metrics: Iterable[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    device: Any = "cpu",
    progress: bool = False,
) -> dict[str, Any]:
    """Run the sampled metrics among ``metrics`` (FactorVAE, BetaVAE scores; array ones are ignored here) with
    ``encode`` on images drawn from ``datamodule``; ``options[name]`` are keyword arguments of the score
    function (sample sizes, seed)."""
    options = options or {}
    out: dict[str, Any] = {}
    for name in check_metric_names(metrics):
        if name not in _SAMPLED:
            continue
        fn, keys = _SAMPLED[name]
        kwargs = {"device": device, "progress": progress, **dict(options.get(name) or {})}
        out.update(_flatten(name, fn(datamodule, encode, **kwargs), keys))
    return out
