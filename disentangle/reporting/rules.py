"""The papers' selection rules, applied to aggregated groups.

* ``best``: per (model, data), the hyperparameter configuration with the best mean of a metric (InfoM:
  Tripod paper §4; the QLAE paper's §5 says only "best performing", InfoM there is our choice) among those
  passing the reconstruction filter; ``by="best-seed"`` ranks configurations by their best single run instead
  (Cliff paper App. F.4: "the best seed is selected based on the D score").
* The reconstruction filter (:class:`PsnrFilter`): a configuration passes when its mean PSNR reaches the
  threshold of its dataset. Tripod's thresholds are the paper's (App. B.1: Shapes3D 38, MPI3D 42, Falcor3D 34,
  Isaac3D 40 dB). The QLAE paper only says autoencoders are "filtered for near-perfect data reconstruction"
  (Table 1 caption); we read it as "not clearly below the AE baseline" (our choice), which ``ae-MARGIN``
  implements: the threshold is the best mean PSNR of the ``ae`` configurations on that dataset minus
  MARGIN dB.
* ``delta_st`` (Friede et al. §3.4, §6.3, Table 1 "Selection"): per dataset, pooling every run that has
  ``delta_st`` in its ``metrics.json`` (``python -m disentangle.select DIR`` stores it), the single run with
  the smallest gap. It adds a ``selection:<model>`` row per dataset to the table.
* ``labels`` (Friede et al. §6.4, after Locatello et al. 2020: semi-supervised models are selected on the
  labelled examples held out of training, 10% as in disentanglement_lib; the paper's percentages are missing
  from its text): per group (model, data and the hyperparameters not pooled; pool ω and the seeds with
  ``--pool``), the run with the highest ``label_validation_mig``
  (``python -m disentangle.select DIR --rule labels`` stores it), as a ``labels:<model>`` row after its group.

The per-run rule (which evaluation of a run counts) is :mod:`.checkpoints`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .aggregate import Aggregate, Group, Param, format_value, higher_is_better, summarize
from .runs import Run

TRIPOD_PSNR = {"shapes3d": 38.0, "mpi3d": 42.0, "falcor3d": 34.0, "isaac3d": 40.0}
_BASELINE = re.compile(r"^([A-Za-z_][\w]*?)(?:-(\d+(?:\.\d*)?))?$")


@dataclass
class PsnrFilter:
    """Minimum mean PSNR (dB) per dataset: one number, ``data=dB,...``, ``tripod`` (the Tripod paper's thresholds)
    or ``MODEL-MARGIN`` (MARGIN dB below MODEL's best mean PSNR on the dataset, e.g. ``ae-1``)."""

    text: str
    fixed: float | None = None
    per_data: dict[str, float] = field(default_factory=dict)
    baseline: str | None = None
    margin: float = 0.0

    @classmethod
    def parse(cls, text: str) -> PsnrFilter:
        text = str(text).strip()
        try:
            return cls(text, fixed=float(text))
        except ValueError:
            pass
        if text.lower() == "tripod":
            return cls(text, per_data=dict(TRIPOD_PSNR))
        if "=" in text:
            per = {}
            for item in filter(None, (t.strip() for t in text.split(","))):
                name, _, value = item.partition("=")
                try:
                    per[name.strip()] = float(value)
                except ValueError:
                    raise ValueError(f"--psnr-min: {item!r} is not DATA=DB") from None
            return cls(text, per_data=per)
        match = _BASELINE.match(text)
        if match:
            return cls(text, baseline=match.group(1), margin=float(match.group(2) or 0.0))
        raise ValueError(f"--psnr-min: {text!r}: give a number of dB, DATA=DB,..., 'tripod' or MODEL-MARGIN (e.g. ae-1)")

    def thresholds(self, groups: Sequence[Group]) -> tuple[dict[str, float | None], list[str]]:
        """The threshold of every dataset of ``groups`` and lines about datasets the filter cannot judge."""
        datasets = list(dict.fromkeys(g.data for g in groups))
        notes = []
        if self.fixed is not None:
            return {d: self.fixed for d in datasets}, notes
        if self.baseline is None:
            out = {d: self.per_data.get(d) for d in datasets}
            notes += [f"note: --psnr-min {self.text}: no threshold for {d}; its configurations are not filtered"
                      for d, v in out.items() if v is None]
            return out, notes
        out = {}
        for d in datasets:
            base = [g.stats["psnr"].mean for g in groups
                    if g.data == d and g.model == self.baseline and "psnr" in g.stats]
            out[d] = max(base) - self.margin if base else None
            if not base:
                notes.append(f"note: --psnr-min {self.text}: no {self.baseline} run with PSNR on {d}; "
                             f"its configurations are not filtered")
        return out, notes


def select_best(agg: Aggregate, metric: str = "infom", psnr: PsnrFilter | None = None,
                by: str = "mean") -> tuple[list[Group], list[str]]:
    """Per (model, data): the configuration with the best ``metric`` among those passing ``psnr``; returns the
    chosen groups (in table order) and one line per choice or exclusion."""
    if by not in ("mean", "best-seed"):
        raise ValueError(f"--select-by: unknown {by!r}; choose from mean, best-seed")
    thresholds, notes = psnr.thresholds(agg.groups) if psnr else ({}, [])
    sign = 1.0 if higher_is_better(metric) else -1.0
    buckets: dict[tuple[str, str], list[Group]] = {}
    for g in agg.groups:
        buckets.setdefault((g.model, g.data), []).append(g)
    chosen = []
    for (model, data), cands in buckets.items():
        thr = thresholds.get(data)
        passing, failing = [], []
        for g in cands:
            ok = thr is None or ("psnr" in g.stats and g.stats["psnr"].mean >= thr)
            (passing if ok else failing).append(g)
        scored = [g for g in passing if metric in g.stats]
        described = [f"{_hp(g)} {g.stats['psnr'].mean:.1f} dB" if "psnr" in g.stats else f"{_hp(g)} no PSNR"
                     for g in failing]
        if not scored:
            why = (f"none of {len(cands)} configuration(s) reaches PSNR >= {thr:.1f} dB ({'; '.join(described)})"
                   if failing else f"no configuration reports {metric}")
            notes.append(f"warning: {model}/{data} left out of the selection: {why}")
            continue

        def score(g: Group) -> float:
            s = g.stats[metric]
            value = max(s.values, key=lambda v: sign * v) if by == "best-seed" and s.values else s.mean
            return sign * value if math.isfinite(value) else -math.inf

        best = max(scored, key=score)
        chosen.append(best)
        if len(cands) > 1 or failing:
            line = f"{model}/{data}: chose {_hp(best) or 'its only configuration'} ({metric} " \
                   f"{'best run' if by == 'best-seed' else 'mean'} {sign * score(best):.3f}) of {len(cands)}"
            if failing:
                line += f"; below PSNR {thr:.1f} dB: {'; '.join(described)}"
            notes.append(line)
    return chosen, notes


def _hp(g: Group) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in g.params.items())


def select_delta_st(runs: Sequence[Run], params: Sequence[Param], metrics: Sequence[str],
                    ddof: int = 1) -> tuple[list[Group], list[str]]:
    """Per dataset, the run with the smallest Δ_ST among all runs that have one, as a one-run group
    ``selection:<model>``; raises ValueError when no run has Δ_ST."""
    pools: dict[str, list[Run]] = {}
    for r in runs:
        if math.isfinite(r.metrics.get("delta_st", math.nan)):
            pools.setdefault(r.data, []).append(r)
    if not pools:
        raise ValueError("--select delta_st: no run has delta_st in its metrics.json; measure it first with "
                         "`python -m disentangle.select DIR`")
    groups, notes = [], []
    for data, pool in pools.items():
        best = min(pool, key=lambda r: r.metrics["delta_st"])
        g = Group(f"selection:{best.model}", data, {p.key: p.value(best) for p in params}, [best],
                  note=f"Δ_ST = {best.metrics['delta_st']:.4g}, smallest of {len(pool)} runs: {best.path}")
        g.stats = {m: summarize([best.metrics[m]], ddof=ddof) for m in metrics if m in best.metrics}
        groups.append(g)
        notes.append(f"{data}: Δ_ST selection picked {best.path} ({best.model}, Δ_ST {best.metrics['delta_st']:.4g}) "
                     f"from {len(pool)} runs")
    lacking = [r for r in runs if r.data in pools and r not in pools[r.data]]
    if lacking:
        notes.append(f"note: {len(lacking)} run(s) have no delta_st and are not in the Δ_ST pool")
    return groups, notes


LABEL_KEY = "label_validation_mig"


def select_labels(agg: Aggregate, ddof: int = 1) -> tuple[list[Group], list[str]]:
    """Every group of ``agg``, each followed by a one-run group ``labels:<model>`` holding its run with the highest
    held-out-label MIG (Friede et al. §6.4; Locatello et al. 2020's semi-supervised model selection); raises
    ValueError when no run has it."""
    if not any(LABEL_KEY in r.metrics for g in agg.groups for r in g.runs):
        raise ValueError(f"--select labels: no run has {LABEL_KEY} in its metrics.json; measure it first with "
                         f"`python -m disentangle.select DIR --rule labels`")
    groups, notes = [], []
    for g in agg.groups:
        groups.append(g)
        pool = [r for r in g.runs if math.isfinite(r.metrics.get(LABEL_KEY, math.nan))]
        if not pool:
            notes.append(f"note: {g.label()}: no run has {LABEL_KEY}; no labels row")
            continue
        best = max(pool, key=lambda r: r.metrics[LABEL_KEY])
        row = Group(f"labels:{g.model}", g.data, dict(g.params), [best],
                    note=f"held-out-label MIG {best.metrics[LABEL_KEY]:.4g}, highest of {len(pool)} runs: {best.path}")
        row.stats = {m: summarize([best.metrics[m]], ddof=ddof) for m in agg.metrics if m in best.metrics}
        groups.append(row)
        notes.append(f"{g.label()}: held-out-label selection picked {best.path} "
                     f"({LABEL_KEY} {best.metrics[LABEL_KEY]:.4g}) from {len(pool)} runs")
    return groups, notes
