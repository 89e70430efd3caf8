"""One claim's verdict from its runs' metrics (:func:`assess`): per seed the difference the claim predicts to be
positive, its paired interval and verdict (:mod:`.statistics`), beside the paper's values."""
from __future__ import annotations

import math
import statistics as stats

from .catalog import Claim
from .statistics import effect_in_sd, holm, lean, paired_interval, verdict

# the fields of every claims.json object (issue 31), then the extra ones (issue 44 added lean, p_value, p_holm and
# effect_sd; its verdicts are holds, inconclusive and contradicted)
FIELDS = ("name", "paper", "metric", "better", "worse", "better_mean", "worse_mean", "diff_mean", "ci_low", "ci_high",
          "n_seeds", "verdict", "wall_s")


def _value(result, metric: str) -> float | None:
    if result is None or result.error:
        return None
    v = result.metrics.get(metric)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _per_seed(claim: Claim, results: dict, seeds) -> tuple[list[int], list[float], list[float], list[str]]:
    """Seeds with both sides, each side's value per such seed, and notes (what the selection picked)."""
    used, better, worse, notes = [], [], [], []
    if claim.kind == "selection":
        for seed in seeds:
            pool = [(side.label, results.get((side.run(claim.setting).key, seed))) for side in claim.pool]
            scored = [(label, _value(r, claim.metric), _value(r, "delta_st")) for label, r in pool]
            if any(v is None or g is None for _, v, g in scored):
                continue
            label, picked, _ = min(scored, key=lambda t: t[2])
            used.append(seed)
            better.append(picked)
            worse.append(stats.median(v for _, v, _ in scored))
            notes.append(f"seed {seed}: {label}")
        return used, better, worse, notes
    b_run = claim.better.run(claim.setting)
    w_run = claim.worse.run(claim.setting)
    for seed in seeds:
        b = _value(results.get((b_run.key, seed)), claim.metric)
        w = claim.worse.value if w_run is None else _value(results.get((w_run.key, seed)), claim.metric)
        if b is None or w is None:
            continue
        used.append(seed)
        better.append(b)
        worse.append(w)
    return used, better, worse, notes


def assess(claim: Claim, results: dict, seeds, confidence: float = 0.95) -> dict:
    """The claims.json object of ``claim`` given ``results`` {(run key, seed): RunResult}. A claim with no seed on
    both sides gets verdict ``incomplete`` and the runs' errors."""
    used, better, worse, notes = _per_seed(claim, results, seeds)
    sign = -1.0 if claim.lower_is_better else 1.0
    diffs = [sign * (b - w) for b, w in zip(better, worse)]
    runs = {r.key for r in claim.runs()}
    mine = [r for (key, seed), r in results.items() if key in runs and seed in seeds]
    published = claim.published_values()
    out = {
        "name": claim.name, "paper": claim.paper, "table": claim.table, "dataset": claim.dataset, "data": claim.data,
        "metric": claim.metric, "kind": claim.kind, "lower_is_better": claim.lower_is_better,
        "better": claim.better.label, "worse": claim.worse.label,
        "better_mean": stats.mean(better) if better else None, "worse_mean": stats.mean(worse) if worse else None,
        "diff_mean": None, "ci_low": None, "ci_high": None, "n_seeds": len(used), "verdict": "incomplete",
        "lean": None, "p_value": None, "p_holm": None, "effect_sd": None,
        "wall_s": sum(r.wall_s for r in mine),
        "seeds": used, "better_values": better, "worse_values": worse, "differences": diffs,
        "confidence": confidence, "published_better": published["better"], "published_worse": published["worse"],
        "published_source": published["source"], "setting": claim.setting.name,
        "runs": sorted(runs), "why": claim.why, "notes": notes,
        "errors": sorted({r.error for r in mine if r.error}),
    }
    return with_interval(out, confidence)


def with_interval(row: dict, confidence: float = 0.95) -> dict:
    """``row`` with its interval, verdict, lean, p-value and effect size computed from its per-seed ``differences``
    (what :func:`assess` does after collecting them, and what ``--render`` redoes from stored results)."""
    diffs = row.get("differences") or []
    if diffs:
        interval = paired_interval(diffs, confidence)
        row.update(diff_mean=interval.mean, ci_low=interval.low, ci_high=interval.high, verdict=verdict(interval),
                   lean=lean(interval), p_value=None if math.isnan(interval.p) else interval.p,
                   effect_sd=effect_in_sd(interval), confidence=confidence)
    return row


def adjust_within_papers(rows: list[dict]) -> list[dict]:
    """Each row's ``p_holm``: Holm's adjustment of the p-values of its paper's assessed claims (a claim with no
    p-value counts as p = 1 in its paper's family and gets none)."""
    by_paper: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("diff_mean") is not None:
            by_paper.setdefault(row["paper"], []).append(row)
    for family in by_paper.values():
        for row, adjusted in zip(family, holm([r.get("p_value") for r in family])):
            row["p_holm"] = adjusted if row.get("p_value") is not None else None
    return rows
