"""The claims' statistics: a paired Student-t interval over seeds, the three verdicts (issue 44), the two-sided
p-value of the same t test, Holm's adjustment within a paper, and the difference in units of the seeds' SD.

Per seed s the claim's difference is d_s = better_s - worse_s (same seed on both sides; sign flipped for a metric
where lower is better), so the seed-to-seed variation both sides share cancels. The interval is
mean(d) ± t_{(1+confidence)/2, n-1} · sd(d) / √n, the one-sample t interval of scipy.stats.ttest_1samp, and p its
two-sided p-value for mean 0. A verdict reads the interval only: ``holds`` above 0, ``contradicted`` below 0,
``inconclusive`` across it, with the mean's sign as a ``lean`` (not a verdict). Claims files written before issue 44
said ``direction`` and ``reversed`` for the inconclusive ones; :func:`normalise` reads them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

VERDICTS = ("holds", "inconclusive", "contradicted")
# the verdicts of claims files written before issue 44: both were inconclusive, leaning one way
OLD_VERDICTS = {"direction": "positive", "reversed": "negative"}


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int
    sd: float
    p: float = math.nan  # two-sided, for mean 0 (nan for one seed)


def paired_interval(differences, confidence: float = 0.95) -> Interval:
    """The t interval of the mean of per-seed differences. One difference gives an unbounded interval; equal ones a
    point."""
    from scipy import stats

    d = [float(x) for x in differences]
    if not d:
        raise ValueError("paired_interval: no differences (no seed has both sides)")
    if any(not math.isfinite(x) for x in d):
        raise ValueError(f"paired_interval: non-finite difference in {d}")
    n = len(d)
    mean = sum(d) / n
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, math.nan)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    if sd > 0:
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    else:  # equal differences: certain, unless all are 0
        p = 1.0 if mean == 0 else 0.0
    return Interval(mean, mean - half, mean + half, n, sd, p)


def verdict(interval: Interval) -> str:
    """``holds``: the interval lies above 0; ``contradicted``: below 0; ``inconclusive``: it spans 0 (a tie too: the
    claim says strictly better)."""
    if interval.low > 0:
        return "holds"
    if interval.high < 0:
        return "contradicted"
    return "inconclusive"


def lean(interval: Interval) -> str:
    """The sign of the mean difference: ``positive`` (the paper's way), ``negative`` or ``none`` (a tie)."""
    return "positive" if interval.mean > 0 else "negative" if interval.mean < 0 else "none"


def effect_in_sd(interval: Interval) -> float | None:
    """The mean difference in units of the seeds' standard deviation of the differences (Cohen's d_z); None when
    the SD is 0 or undefined."""
    return interval.mean / interval.sd if interval.n > 1 and interval.sd > 0 else None


def holm(pvalues) -> list[float]:
    """Holm's step-down adjustment of ``pvalues`` (a missing or nan p counts as 1): the i-th smallest becomes
    max over j <= i of min(1, (m - j + 1) p_(j)), so that the family-wise error rate stays at the level."""
    p = [1.0 if v is None or not math.isfinite(v) else float(v) for v in pvalues]
    m = len(p)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def normalise(row: dict) -> dict:
    """A claims.json object with the current verdict words: an older file's ``direction`` / ``reversed`` become
    ``inconclusive`` with its ``lean`` (other fields as they were)."""
    old = row.get("verdict")
    if old in OLD_VERDICTS:
        return {**row, "verdict": "inconclusive", "lean": row.get("lean") or OLD_VERDICTS[old]}
    return row
