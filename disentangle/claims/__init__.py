"""Each paper's headline claims, checked at laptop scale (issue 31; docs/claims.md).

``claims.yaml`` lists the comparisons (:mod:`.catalog`); ``python -m disentangle.claims`` trains the runs they need
(:mod:`.runner`), and each claim gets the paired difference over seeds with its interval and one of three verdicts (holds, inconclusive, contradicted) with a Holm-adjusted p-value within its paper
(:mod:`.statistics`, :mod:`.assess`), written as claims.json, claims.md and claims.png (:mod:`.report`).
"""
from .catalog import Claim, RunSpec, Setting, Side, load_claims, select_claims, unique_runs
from .command import main
from .statistics import VERDICTS, Interval, holm, normalise, paired_interval, verdict

__all__ = ["VERDICTS", "Claim", "Interval", "RunSpec", "Setting", "Side", "holm", "load_claims", "main", "normalise",
           "paired_interval", "select_claims", "unique_runs", "verdict"]
