"""The metric registry: every metric the evaluation can run, by name, and the functions that run a chosen set.

A metric is a function plus one :class:`MetricEntry` in :data:`REGISTRY` (:func:`register_metric` adds one at run
time); its options come from ``callbacks.evaluation.<name>.*`` in the config, passed to the function as keyword
arguments by the evaluation callback, which names no metric itself. Two kinds (Friede et al. §5 uses
both):

* **array metrics**: functions ``fn(factors, latents, **options) -> dict`` of one (latents, factors) evaluation
  set: InfoMEC, DCI (QLAE paper §4, App. C.5), MIG, SAP, Modularity (Friede et al. §5), Explicitness
  (Ridgeway & Mozer 2018), MCC (Cliff paper §3.1, App. E), the latent rotation angle of a 2-factor dataset
  (Friede et al. §3.3, Fig. 3; skipped with a logged reason on other data). :func:`array_metrics` runs them on
  numpy arrays, so it can run in a worker thread;
* **sampled metrics**: ``fn(datamodule, represent, **options) -> dict``: FactorVAE and BetaVAE scores draw their
  own batches with one factor fixed, so they need the data module and an encoder (:func:`sampled_metrics`).

Every result is flattened into one dict: the scalar keys of :data:`SCALAR_LABELS` (floats) plus a few arrays
(``nmi``, ``active``, ``dci_importance``, per-source values) for ``metrics.json`` and the figures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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
    "REGISTRY",
    "SAMPLED_METRICS",
    "SCALAR_KEYS",
    "SCALAR_LABELS",
    "MetricEntry",
    "ModelFacts",
    "array_metrics",
    "check_metric_names",
    "metric_names",
    "register_metric",
    "resolve_options",
    "sampled_metrics",
    "unregister_metric",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFacts:
    """What a metric's ``auto`` options may depend on: where the model ran and what its representation is."""

    device: str = "cpu"
    discrete: bool = False
    categorical: bool = False


@dataclass(frozen=True)
class MetricEntry:
    """One registered metric. Its fields:

    - ``fn``: the function (array: ``fn(factors, latents, **options)``; sampled:
      ``fn(datamodule, represent, **options)``) returning a dict.
    - ``outputs``: the function's keys -> the result's keys (what goes into ``metrics.json``).
    - ``labels``: the result's scalar keys -> their column labels, in table order (the other outputs are
      arrays).
    - ``sampled``: it draws its own batches (needs the data module and the model's ``represent``).
    - ``discrete``: it is told ``discrete_latents=`` (the representation's estimator choice).
    - ``applies``: ``(factors, latents) -> None`` when it applies, else the reason it is skipped (logged).
    - ``resolve``: ``(options, ModelFacts) -> options``: settles model-dependent ``auto`` values.
    """

    fn: Callable[..., Mapping[str, Any]]
    outputs: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)
    sampled: bool = False
    discrete: bool = False
    applies: Callable[[Any, Any], str | None] | None = None
    resolve: Callable[[dict, ModelFacts], dict] | None = None


def _rotation_applies(factors: Any, latents: Any) -> str | None:
    """The rotation angle needs exactly 2 factors and >= 2 latents (Friede et al. §3.3), so ``metrics: all``
    works everywhere."""
    n_s, n_z = (shape[1] if len(shape) == 2 else 1 for shape in (np.shape(factors), np.shape(latents)))
    if n_s == 2 and n_z >= 2:
        return None
    return f"it needs exactly 2 factors and at least 2 latent dimensions (got {n_s} factors, {n_z} latents)"


def _infomec_options(options: dict, model: ModelFacts) -> dict:
    """InfoMEC's ``auto`` options: ``device: auto`` is the model's device when that is a GPU and None (numpy/sklearn
    on the CPU) otherwise, so the discrete MI tables and InfoE's regressions run where the model does;
    ``infoe_features: auto`` is one-hot for unordered code indices (VQ-VAE), standardized values otherwise (as
    the QLAE authors' training code does)."""
    options = dict(options)
    if options.get("device") == "auto":
        options["device"] = model.device if not str(model.device).startswith("cpu") else None
    if options.get("infoe_features") == "auto":
        options["infoe_features"] = "onehot" if model.categorical else "standardize"
    return options


# The built-in metrics, in table order. A new metric: one function and one line here (or register_metric).
REGISTRY: dict[str, MetricEntry] = {
    "infomec": MetricEntry(infomec, {"infom": "infom", "infoe": "infoe", "infoc": "infoc", "nmi": "nmi",
                                     "active": "active"},
                           {"infom": "InfoM", "infoe": "InfoE", "infoc": "InfoC"}, discrete=True,
                           resolve=_infomec_options),
    "dci": MetricEntry(dci, {"d": "dci_d", "i": "dci_i", "c": "dci_c", "importance": "dci_importance"},
                       {"dci_d": "D", "dci_i": "I", "dci_c": "C"}),
    "mig": MetricEntry(mig, {"mig": "mig", "per_source": "mig_per_source"}, {"mig": "MIG"}),
    "sap": MetricEntry(sap, {"sap": "sap", "per_source": "sap_per_source"}, {"sap": "SAP"}),
    "modularity": MetricEntry(modularity, {"modularity": "modularity", "per_latent": "modularity_per_latent"},
                              {"modularity": "Mod"}),
    "explicitness": MetricEntry(explicitness, {"explicitness": "explicitness",
                                               "per_source": "explicitness_per_source"}, {"explicitness": "Expl"}),
    "mcc": MetricEntry(mcc, {"mcc": "mcc", "matching": "mcc_matching"}, {"mcc": "MCC"}),
    "rotation": MetricEntry(rotation, {"rotation": "rotation", "per_factor": "rotation_per_factor",
                                       "directions": "rotation_directions", "r2": "rotation_r2"},
                            {"rotation": "Rot (deg)"}, applies=_rotation_applies),
    "factorvae": MetricEntry(factorvae_score, {"factorvae": "factorvae"}, {"factorvae": "FactorVAE"}, sampled=True),
    "betavae": MetricEntry(betavae_score, {"betavae": "betavae"}, {"betavae": "BetaVAE"}, sampled=True),
}
QUALITY_LABELS = {"psnr": "PSNR (dB)", "mse": "MSE"}  # reconstruction quality, computed beside any metric

# Every scalar an evaluation can report, in table order, with its column label (kept current by register_metric).
SCALAR_LABELS: dict[str, str] = {}


def _relabel() -> None:
    SCALAR_LABELS.clear()
    for entry in REGISTRY.values():
        SCALAR_LABELS.update(entry.labels)
    SCALAR_LABELS.update(QUALITY_LABELS)


_relabel()
# The built-in names (``metric_names`` also sees metrics registered later).
ARRAY_METRICS = tuple(name for name, entry in REGISTRY.items() if not entry.sampled)
SAMPLED_METRICS = tuple(name for name, entry in REGISTRY.items() if entry.sampled)
METRICS = ARRAY_METRICS + SAMPLED_METRICS
SCALAR_KEYS = tuple(SCALAR_LABELS)


def metric_names(sampled: bool | None = None) -> tuple[str, ...]:
    """Every registered metric's name (array ones first), or only the sampled (``True``) or array (``False``) ones."""
    array = tuple(n for n, e in REGISTRY.items() if not e.sampled)
    drawn = tuple(n for n, e in REGISTRY.items() if e.sampled)
    return drawn if sampled else array if sampled is False else array + drawn


def register_metric(name: str, fn: Callable[..., Mapping[str, Any]], *, outputs: Mapping[str, str],
                    labels: Mapping[str, str] | None = None, sampled: bool = False, discrete: bool = False,
                    applies: Callable[[Any, Any], str | None] | None = None,
                    resolve: Callable[[dict, ModelFacts], dict] | None = None, replace: bool = False) -> MetricEntry:
    """Add a metric to :data:`REGISTRY` (see :class:`MetricEntry`); its options are then read from
    ``callbacks.evaluation.<name>``. ``labels`` defaults to every output, labelled by its key. A name already
    registered raises unless ``replace``."""
    if not name.isidentifier() or name == "all":
        raise ValueError(f"metric name {name!r} must be an identifier other than 'all'")
    if name in REGISTRY and not replace:
        raise ValueError(f"metric {name!r} is already registered (pass replace=True to replace it)")
    labels = dict(labels if labels is not None else {key: key for key in outputs.values()})
    unknown = [key for key in labels if key not in outputs.values()]
    if unknown:
        raise ValueError(f"metric {name!r}: labels {unknown} are not among its outputs {list(outputs.values())}")
    entry = MetricEntry(fn, dict(outputs), labels, sampled=sampled, discrete=discrete, applies=applies,
                        resolve=resolve)
    REGISTRY[name] = entry
    _relabel()
    return entry


def unregister_metric(name: str) -> MetricEntry:
    """Remove a metric added with :func:`register_metric` (a built-in one cannot be removed); returns its entry."""
    if name in METRICS:
        raise ValueError(f"metric {name!r} is built in and cannot be unregistered")
    if name not in REGISTRY:
        raise ValueError(f"metric {name!r} is not registered")
    entry = REGISTRY.pop(name)
    _relabel()
    return entry


def check_metric_names(names: Iterable[str] | str, *, key: str = "metrics") -> tuple[str, ...]:
    """The names as a tuple in the order given (``"all"`` = every metric); an unknown name raises one ValueError
    that names ``key`` and the allowed values."""
    if isinstance(names, str):
        names = metric_names() if names == "all" else (names,)
    names = tuple(str(n) for n in names)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"{key}: unknown {unknown}; choose from {list(metric_names())} (or all)")
    return tuple(dict.fromkeys(names))  # drop repeats, keep order


def resolve_options(options: Mapping[str, Mapping[str, Any]], model: ModelFacts) -> dict[str, dict]:
    """Each metric's options with its model-dependent ``auto`` values settled (:attr:`MetricEntry.resolve`)."""
    out = {}
    for name, opts in options.items():
        entry = REGISTRY.get(name)
        opts = dict(opts or {})
        out[name] = entry.resolve(opts, model) if entry is not None and entry.resolve is not None else opts
    return out


def _flatten(out: Mapping[str, Any], entry: MetricEntry) -> dict[str, Any]:
    return {dst: float(out[src]) if dst in entry.labels else np.asarray(out[src]) for src, dst in entry.outputs.items()}


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
    ``discrete_latents`` goes to the metrics that take it (InfoMEC). Returns the flattened results (see the module
    docstring).
    """
    options = options or {}
    out: dict[str, Any] = {}
    for name in check_metric_names(metrics):
        entry = REGISTRY[name]
        if entry.sampled:
            continue
        reason = entry.applies(factors, latents) if entry.applies is not None else None
        if reason is not None:
            log.warning("metric '%s' skipped: %s", name, reason)
            continue
        kwargs = dict(options.get(name) or {})
        if entry.discrete:
            kwargs["discrete_latents"] = discrete_latents
        out.update(_flatten(entry.fn(factors, latents, **kwargs), entry))
    return out


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
        entry = REGISTRY[name]
        if not entry.sampled:
            continue
        kwargs = {"device": device, "progress": progress, **dict(options.get(name) or {})}
        out.update(_flatten(entry.fn(datamodule, encode, **kwargs), entry))
    return out
