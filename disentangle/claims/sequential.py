"""``--seeds auto``: more seeds only where a claim is still undecided, with a correction for looking more than once.

The rule (docs/claims.md, "More seeds where a claim is undecided"): every claim starts with seeds 0-4. After each
round, a claim whose interval still spans 0 gets the next seed, up to :data:`MAX_SEEDS`; a claim stops as soon as
its interval lies on one side of 0. Looking again after every seed would inflate the chance of a false verdict, so
every look uses the Bonferroni level over the :data:`LOOKS` possible looks (n = 5, 6, ..., 10): the interval is the
``1 - alpha / LOOKS`` t interval (99.17% for alpha 0.05) and the p-value is ``LOOKS x p``, capped at 1, before Holm's
adjustment within each paper. Whatever the number of looks a claim takes, its chance of a false verdict stays at
most alpha.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from .catalog import Claim, RunSpec

__all__ = ["FIRST_SEEDS", "LOOKS", "MAX_SEEDS", "correct_for_looks", "look_confidence", "sequential"]

FIRST_SEEDS = 5
MAX_SEEDS = 10
LOOKS = MAX_SEEDS - FIRST_SEEDS + 1


def look_confidence(confidence: float, looks: int = LOOKS) -> float:
    """The level of every look's interval: Bonferroni over ``looks`` looks."""
    return 1.0 - (1.0 - confidence) / looks


def correct_for_looks(row: dict) -> dict:
    """A ``--seeds auto`` row's p-value at the Bonferroni level over the looks (``LOOKS x p``, capped at 1), the
    correction its interval already carries; rows of a fixed number of seeds (no ``sequential``) as they are."""
    looks = (row.get("sequential") or {}).get("max_looks")
    if looks and row.get("p_value") is not None:
        row["p_value"] = min(1.0, looks * row["p_value"])
    return row


def sequential(claims: Sequence[Claim], results: dict, confidence: float,
               train: Callable[[list[tuple[RunSpec, int]]], dict],
               assess: Callable[[Claim, dict, Sequence[int], float], dict]) -> list[dict]:
    """Add seeds to undecided claims (module doc) and return each claim's row at its last look.

    ``results`` holds the first seeds' runs {(run key, seed): RunResult}; ``train(tasks)`` trains more
    (run spec, seed) tasks and returns their results; ``assess`` is :func:`disentangle.claims.assess.assess`."""
    level = look_confidence(confidence)
    seeds = {c.name: list(range(FIRST_SEEDS)) for c in claims}
    rows = {c.name: assess(c, results, seeds[c.name], level) for c in claims}
    while True:
        pending = [c for c in claims
                   if rows[c.name]["verdict"] == "inconclusive" and len(seeds[c.name]) < MAX_SEEDS]
        if not pending:
            break
        tasks: dict[tuple[str, int], tuple[RunSpec, int]] = {}
        for claim in pending:
            seed = len(seeds[claim.name])
            seeds[claim.name].append(seed)
            for spec in claim.runs():
                if (spec.key, seed) not in results:
                    tasks[(spec.key, seed)] = (spec, seed)
        results.update(train(list(tasks.values())))
        for claim in pending:
            rows[claim.name] = assess(claim, results, seeds[claim.name], level)
    out = []
    for claim in claims:
        row = rows[claim.name]
        row["sequential"] = {"looks": len(seeds[claim.name]) - FIRST_SEEDS + 1, "max_looks": LOOKS,
                             "confidence": level, "family_confidence": confidence}
        out.append(correct_for_looks(row))
    return out
