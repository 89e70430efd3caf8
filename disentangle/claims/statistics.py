"""The claims' statistics: a paired Student-t interval over seeds and the four verdicts (issue 31).

Per seed s the claim's difference is d_s = better_s - worse_s (same seed on both sides; sign flipped for a metric
where lower is better), so the seed-to-seed variation both sides share cancels. The interval is
mean(d) ± t_{(1+confidence)/2, n-1} · sd(d) / √n, the one-sample t interval of scipy.stats.ttest_1samp.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

VERDICTS = ("holds", "direction", "reversed", "contradicted")


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int
    sd: float


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
    return Interval(mean, mean - half, mean + half, n, sd)


def verdict(interval: Interval) -> str:
    """``holds``: the interval lies above 0; ``contradicted``: below 0; otherwise ``direction`` when the mean is above
    0 and ``reversed`` when it is not (a tie counts as reversed: the claim says strictly better)."""
    if interval.low > 0:
        return "holds"
    if interval.high < 0:
        return "contradicted"
    return "direction" if interval.mean > 0 else "reversed"
