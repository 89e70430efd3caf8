"""Grouping runs into (model, data, hyperparameters) and the per-group statistics the papers print.

* Hyperparameters are found, not declared: a config key (or command-line override) is one when its value differs
  between runs of the same (model, data). Seeds, paths, Hydra's own settings, logging and output locations are
  never hyperparameters; keys derived by interpolation (``data.seed: ${seed}``, ``data.batch_size:
  ${model.batch_size}``) are not either, since their written value is the same in every run. Keys that follow one
  group choice (``model/arch=small`` changes every ``model.arch.*`` key) appear once, as that choice.
* Statistics over the runs of a group, per metric (runs lacking a metric are left out of that metric's ``n``): the
  mean with the 95% confidence half-width ``t(0.975, n-1) * sd / sqrt(n)`` (Student's t; QLAE App. E, Tripod,
  FactorQVAE), the median with the 25th/75th percentiles (numpy's linear convention; Friede et al. Tables 5-7)
  and the standard error ``sd / sqrt(n)`` (Cliff paper App. E, F.4). ``sd`` uses ``ddof=1`` unless asked
  otherwise (the QLAE authors' tables script, ``scripts/tables_old.py`` in their public repository, uses
  ``ddof=0``).
* Across datasets (:func:`aggregate_across_data`; the "aggregated" column of QLAE Tables 1-2 and Tripod Table 1,
  data name ``aggregated``): per (model, hyperparameters that still separate its rows within a dataset after the
  selection), the mean over the k datasets of each metric's per-dataset mean (the papers' "mean over the 4
  datasets"; with equal seed counts the mean over all runs), median and quartiles likewise the mean of the
  per-dataset ones. The interval treats the per-dataset means as independent estimates and propagates their errors:
  standard error ``sqrt(sum_d se_d^2) / k`` (exact for a mean of independent means), 95% half-width
  ``sqrt(sum_d h_d^2) / k`` with each dataset's own Student-t half-width ``h_d`` (a little wider than a
  Welch-Satterthwaite interval would be). Neither paper prints an interval for this column; a t-interval over
  the k dataset means would measure how the datasets differ, not the seed noise, and the QLAE authors' script
  (``2.052 * mean_d se_d``, t for 27 degrees of freedom) is wider by about sqrt(k). Only groups present on every
  dataset of the report are aggregated; the others are named.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .runs import Run

STATS = ("mean", "ci95", "median", "q25", "q75", "se")
# never hyperparameters: exact keys, prefixes (a dot-separated path starts with them) and last components
_IGNORED_KEYS = frozenset({"seed", "print_summary", "model", "data", "hydra", "paths", "logger", "callbacks.progress",
                           "trainer.enable_progress_bar", "trainer.enable_model_summary", "callbacks.evaluation.progress",
                           "trainer.log_every_n_steps", "model.name", "data.name"})
_IGNORED_PREFIXES = ("hydra.", "paths.", "logger.", "callbacks.progress.")
_IGNORED_LAST = frozenset({"seed", "output_dir", "dirpath", "save_dir", "default_root_dir", "root", "_partial_"})


def is_ignored(key: str) -> bool:
    key = key.replace("/", ".")
    return key in _IGNORED_KEYS or key.startswith(_IGNORED_PREFIXES) or key.rsplit(".", 1)[-1] in _IGNORED_LAST


# -- statistics ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stats:
    n: int
    mean: float
    ci95: float      # half-width of the Student-t 95% interval (NaN for n < 2)
    median: float
    q25: float
    q75: float
    se: float        # standard error of the mean (NaN for n < 2)
    sd: float
    values: tuple[float, ...] = ()

    def center(self, stat: str) -> float:
        return self.median if stat == "quartiles" else self.mean

    def interval(self, stat: str) -> tuple[float, float]:
        """The interval a ``stat`` mode prints; a point when it is undefined (one run)."""
        if stat == "quartiles":
            return self.q25, self.q75
        half = self.ci95 if stat == "ci95" else self.se
        half = 0.0 if not math.isfinite(half) else half
        return self.mean - half, self.mean + half

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in STATS}


def summarize(values: Iterable[float], ddof: int = 1) -> Stats:
    """Mean, t-based 95% CI half-width, median, quartiles and standard error of ``values``."""
    from scipy.stats import t

    x = np.asarray([float(v) for v in values], dtype=float)
    n = len(x)
    if n == 0:
        nan = math.nan
        return Stats(0, nan, nan, nan, nan, nan, nan, nan)
    q25, median, q75 = (float(q) for q in np.percentile(x, [25, 50, 75]))
    if n - ddof > 0 and n > 1:
        sd = float(np.std(x, ddof=ddof))
        se = sd / math.sqrt(n)
        ci95 = float(t.ppf(0.975, n - 1)) * se
    else:
        sd = se = ci95 = math.nan
    return Stats(n, float(x.mean()), ci95, median, q25, q75, se, sd, tuple(x.tolist()))


# -- hyperparameters -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    key: str          # a dotted config key, or an override's key (``model/arch``, ``experiment``)
    source: str       # "config" | "override"

    def value(self, run: Run) -> Any:
        if self.source == "override":
            return run.overrides.get(self.key)
        return run.params.get(self.key)


def _bucket(run: Run) -> tuple[str, str]:
    return run.model, run.data


def _partition(param: Param, runs: Sequence[Run]) -> tuple:
    """Which runs share a value of ``param`` within their (model, data): a canonical label per run."""
    seen: dict[tuple, int] = {}
    labels = []
    for r in runs:
        key = (_bucket(r), _freeze(param.value(r)))
        labels.append(seen.setdefault(key, len(seen)))
    return tuple(labels)


def _varies(values_by_bucket: dict) -> bool:
    return any(len(v) > 1 for v in values_by_bucket.values())


def _freeze(value):
    return repr(value) if isinstance(value, float) and math.isnan(value) else value


def varying_params(runs: Sequence[Run], pool: Sequence[str] = ()) -> tuple[list[Param], list[Param]]:
    """(hyperparameters that vary within some (model, data), the ones among them pooled like seeds by ``pool``).

    A config key varies when both its resolved and its written value differ between runs of a (model, data);
    overrides that pick a config group (``model/arch=small``, ``+regularizer=...``, ``experiment=...``) stand for
    the keys they change, value overrides repeat a config key and are dropped."""
    if not runs:
        return [], []
    config_keys = list(dict.fromkeys(k for r in runs for k in r.params))
    override_keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    leaves = set(config_keys)
    group_overrides = [Param(k, "override") for k in override_keys
                       if k.replace("/", ".") not in leaves and not is_ignored(k)]
    value_overrides = [Param(k, "override") for k in override_keys
                       if k.replace("/", ".") in leaves and not is_ignored(k)]
    configs = [Param(k, "config") for k in config_keys if not is_ignored(k)]

    def varies(p: Param) -> bool:
        by_bucket: dict = {}
        for r in runs:
            by_bucket.setdefault(_bucket(r), set()).add(_freeze(p.value(r)))
        if not _varies(by_bucket):
            return False
        if p.source == "config":  # derived keys: same written value everywhere in a bucket
            written: dict = {}
            for r in runs:
                written.setdefault(_bucket(r), set()).add(_freeze(r.raw.get(p.key)))
            return _varies(written)
        return True

    kept: list[Param] = []
    partitions: dict[Param, tuple] = {}
    for p in [*group_overrides, *configs, *value_overrides]:
        if not varies(p):
            continue
        part = _partition(p, runs)
        same = [k for k in kept if partitions[k] == part]
        # a consequence of a group choice, or a value override repeating its config key: not a column of its own
        if same and (p.source == "override" or any(k.source == "override" for k in same)):
            continue
        kept.append(p)
        partitions[p] = part
    pooled = [p for p in kept if _matches(p, pool)]
    return [p for p in kept if p not in pooled], pooled


def _matches(param: Param, pool: Sequence[str]) -> bool:
    if "all" in pool:
        return True
    key = param.key.replace("/", ".")
    return any(key == q.replace("/", ".") or key.endswith("." + q.replace("/", ".")) for q in pool)


def short_names(params: Sequence[Param]) -> dict[Param, str]:
    """The shortest dotted suffix of each key that is unique among ``params`` (``weight_decay`` for
    ``model.optimizer.weight_decay``)."""
    out = {}
    for p in params:
        parts = p.key.split(".")
        for i in range(len(parts) - 1, -1, -1):
            name = ".".join(parts[i:])
            if not any(q is not p and (q.key == name or q.key.endswith("." + name)) for q in params):
                break
        out[p] = name
    return out


# -- groups --------------------------------------------------------------------------------------------------------
@dataclass
class Group:
    model: str
    data: str
    params: dict[str, Any]                 # hyperparameter key -> value (the group's own)
    runs: list[Run]
    stats: dict[str, Stats] = field(default_factory=dict)
    note: str = ""                         # e.g. which run a selection row holds
    over: tuple[str, ...] = ()             # an "aggregated" row: the datasets it is the mean over

    @property
    def n(self) -> int:
        return len(self.runs)

    def label(self, names: dict[str, str] | None = None) -> str:
        hp = ", ".join(f"{(names or {}).get(k, k)}={format_value(v)}" for k, v in self.params.items())
        return f"{self.model}/{self.data}" + (f" ({hp})" if hp else "")


def format_value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


@dataclass
class Aggregate:
    groups: list[Group]
    params: list[Param]          # the varying hyperparameters (columns)
    pooled: list[Param]          # varying ones merged like seeds (--pool)
    metrics: list[str]
    warnings: list[str]


def default_metrics(runs: Sequence[Run], order: Sequence[str] = ()) -> list[str]:
    """Every metric some run reports, the known ones first in ``order``."""
    present = dict.fromkeys(k for r in runs for k in r.metrics)
    return [m for m in order if m in present] + [m for m in present if m not in order]


def aggregate(runs: Sequence[Run], metrics: Sequence[str] | None = None, *, pool: Sequence[str] = (),
              ddof: int = 1, order: Sequence[str] = ()) -> Aggregate:
    """Group ``runs`` by (model, data, varying hyperparameters) and summarize each metric over each group."""
    params, pooled = varying_params(runs, pool)
    metrics = list(metrics) if metrics is not None else default_metrics(runs, order)
    buckets: dict[tuple, list[Run]] = {}
    for r in runs:
        key = (r.model, r.data, tuple(_freeze(p.value(r)) for p in params))
        buckets.setdefault(key, []).append(r)
    groups, warnings = [], []
    for (model, data, _), members in buckets.items():
        g = Group(model, data, {p.key: p.value(members[0]) for p in params}, members)
        for m in metrics:
            values = [r.metrics[m] for r in members if m in r.metrics]
            if not values:
                continue
            if len(values) < len(members):
                lacking = [r for r in members if m not in r.metrics]
                warnings.append(f"warning: group {g.label()}: metric {m} in {len(values)} of {len(members)} runs "
                                f"(aggregated over those; missing in {', '.join(str(r.path) for r in lacking)})")
            g.stats[m] = summarize(values, ddof=ddof)
        groups.append(g)
    # datasets and models in the order the sweep ran them (its job numbers), hyperparameter values ascending
    data_order = {d: i for i, d in enumerate(dict.fromkeys(r.data for r in runs))}
    model_order = {m: i for i, m in enumerate(dict.fromkeys(r.model for r in runs))}
    groups.sort(key=lambda g: (data_order[g.data], model_order[g.model],
                               tuple(_sort_key(v) for v in g.params.values())))
    return Aggregate(groups, params, pooled, metrics, warnings)


def _sort_key(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


# -- across datasets -----------------------------------------------------------------------------------------------
AGGREGATED = "aggregated"  # the data name of the rows averaged over datasets (the published rows' ``dataset``)


def mean_over_data(stats: Sequence[Stats]) -> Stats:
    """One metric's statistics over datasets from its per-dataset ``stats``: the mean (median, quartiles) of the
    per-dataset means (medians, quartiles); standard error and 95% half-width propagated as independent errors,
    ``sqrt(sum of squares) / k`` (NaN when a dataset has none); ``n`` counts every run, ``sd`` is undefined (NaN)
    and ``values`` are the per-dataset means."""
    k = len(stats)

    def mean_of(name: str) -> float:
        return sum(getattr(s, name) for s in stats) / k

    def propagated(name: str) -> float:
        return math.sqrt(sum(getattr(s, name) ** 2 for s in stats)) / k

    return Stats(sum(s.n for s in stats), mean_of("mean"), propagated("ci95"), mean_of("median"), mean_of("q25"),
                 mean_of("q75"), propagated("se"), math.nan, tuple(s.mean for s in stats))


def aggregate_across_data(groups: Sequence[Group]) -> tuple[list[Group], list[str]]:
    """The ``aggregated`` rows of ``groups`` (already selected) when they span several datasets, and lines about the
    groups and metrics left out; ``([], [])`` for a single dataset.

    A row stands for a model and the hyperparameters that still separate that model's rows within a dataset: after
    a selection (one row per model and dataset) the model alone, whatever configuration each dataset chose (its
    note names them); without one, each configuration. It is made only when the group is on every dataset of
    ``groups``; a metric only when every dataset's group has it. See :func:`mean_over_data` for the statistics."""
    groups = [g for g in groups if not g.over]
    datasets = list(dict.fromkeys(g.data for g in groups))
    if len(datasets) < 2:
        return [], []
    values: dict[tuple[str, str, str], set] = {}
    for g in groups:
        for key, value in g.params.items():
            values.setdefault((g.model, g.data, key), set()).add(_freeze(value))
    separating: dict[str, list[str]] = {}
    for (model, _, key), seen in values.items():
        if len(seen) > 1 and key not in separating.setdefault(model, []):
            separating[model].append(key)
    buckets: dict[tuple, dict[str, Group]] = {}
    for g in groups:
        key = (g.model, tuple((k, _freeze(g.params.get(k))) for k in separating.get(g.model, ())))
        buckets.setdefault(key, {})[g.data] = g
    out, lines = [], []
    for (model, key_params), by_data in buckets.items():
        hp = ", ".join(f"{k}={format_value(by_data[next(iter(by_data))].params.get(k))}" for k, _ in key_params)
        label = model + (f" ({hp})" if hp else "")
        missing = [d for d in datasets if d not in by_data]
        if missing:
            lines.append(f"note: {label} left out of the {AGGREGATED} rows: not on {', '.join(missing)} "
                         f"(only on {', '.join(by_data)})")
            continue
        members = [by_data[d] for d in datasets]
        keys = list(dict.fromkeys(k for m in members for k in m.params))
        params, differing = {}, []
        for k in keys:
            same = len({_freeze(m.params.get(k)) for m in members}) == 1
            params[k] = members[0].params.get(k) if same else None
            if not same:
                differing.append(k)
        note = ("per dataset: " + "; ".join(
            f"{m.data} " + ", ".join(f"{k}={format_value(m.params.get(k))}" for k in differing) for m in members)
            if differing else "")
        g = Group(model, AGGREGATED, params, [r for m in members for r in m.runs], note=note, over=tuple(datasets))
        metrics = list(dict.fromkeys(m for member in members for m in member.stats))
        for metric in metrics:
            if all(metric in m.stats for m in members):
                g.stats[metric] = mean_over_data([m.stats[metric] for m in members])
            else:
                lacking = [m.data for m in members if metric not in m.stats]
                lines.append(f"note: {label}: {metric} not {AGGREGATED} (not measured on {', '.join(lacking)})")
        out.append(g)
    return out, lines


# lower is better for these (bolding, selection); every other metric is higher-is-better
LOWER_IS_BETTER = frozenset({"mse", "ood_mse", "rotation", "delta_st", "delta_st_loss", "delta_st_elbo"})


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER
