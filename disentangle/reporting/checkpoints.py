"""The per-run rule: which evaluation of a run the report takes (``--select-checkpoint``).

* ``final`` (the default): the final evaluation, ``metrics.json``. The QLAE, Friede et al. and Cliff papers
  name no checkpoint rule (the end of training is our choice); the FactorQVAE authors' code evaluates the
  final checkpoint.
* ``best-METRIC`` (``best-infom``: Tripod paper §4, "report for each run the results given by the checkpoint
  with the best InfoM" among the checkpoints that pass the reconstruction filter): among the run's evaluations
  in ``metrics_history.jsonl`` (periodic and final) whose PSNR reaches the dataset's threshold
  (``--psnr-min``; every evaluation when there is none), the one with the best METRIC (highest; lowest for
  lower-is-better metrics such as ``mse``; on a tie the later step); the report takes *all* of that
  evaluation's metrics. The final evaluation is ``metrics.json`` itself (its record is the fuller one); a
  periodic one holds what the history line holds (its ``periodic_metrics``).

A run without a usable history has its final evaluation as its only candidate (a warning says so); a run none of
whose evaluations passes the threshold, or reports METRIC, is left out of the table with that reason (listed under
"Runs left out"), not dropped silently.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .aggregate import higher_is_better
from .runs import HISTORY_FILE, Evaluation, Run, read_history

FINAL = "final"
_BEST = re.compile(r"^best-([A-Za-z_]\w*)$")


@dataclass(frozen=True)
class CheckpointRule:
    """``final`` or ``best-METRIC``; ``metric`` is None for ``final``."""

    metric: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> CheckpointRule:
        text = FINAL if text in (None, "") else str(text).strip()
        if text == FINAL:
            return cls()
        match = _BEST.match(text)
        if not match:
            raise ValueError(f"--select-checkpoint: {text!r}: give 'final' or 'best-METRIC' (e.g. best-infom)")
        return cls(match.group(1))

    @property
    def text(self) -> str:
        return FINAL if self.metric is None else f"best-{self.metric}"

    def describe(self, thresholds: dict[str, float | None] | None = None) -> str:
        """One line for the report: which evaluation each run contributes."""
        if self.metric is None:
            return "per run: the final evaluation (metrics.json)"
        word = "highest" if higher_is_better(self.metric) else "lowest"
        line = f"per run: the evaluation in {HISTORY_FILE} with the {word} {self.metric}"
        given = {d: t for d, t in (thresholds or {}).items() if t is not None}
        if given:
            line += " among those with PSNR >= " + ", ".join(f"{t:g} dB ({d})" for d, t in given.items())
        else:
            line += " over every evaluation (no PSNR threshold)"
        return line + ("; Tripod paper §4" if self.metric == "infom" else "")


def select_evaluation(run: Run, rule: CheckpointRule, threshold: float | None) -> tuple[Run, list[str]]:
    """``run`` with the metrics of the evaluation ``rule`` picks (or with ``error`` set when none qualifies) and the
    warnings about it. ``threshold``: the minimum PSNR (dB) of an admissible evaluation, None for none."""
    if rule.metric is None:
        return run, []
    metric, warnings = rule.metric, []
    final = Evaluation(run.step, True, dict(run.metrics))
    history, note = read_history(run.path / HISTORY_FILE)
    if history is None:
        candidates = [final]
        warnings.append(f"warning: {run.path}: {note}; its final evaluation (metrics.json) is the only candidate "
                        f"for --select-checkpoint {rule.text}")
    else:
        candidates = [e for e in history if not e.final] + [final]
        if note:
            warnings.append(f"warning: {run.path}: {note}")
    scored = [e for e in candidates if math.isfinite(e.metrics.get(metric, math.nan))]
    if not scored:
        return dataclasses.replace(run, error=f"--select-checkpoint {rule.text}: no evaluation reports {metric} "
                                              f"({len(candidates)} evaluation(s))"), warnings
    admissible = [e for e in scored if threshold is None or e.metrics.get("psnr", -math.inf) >= threshold]
    if not admissible:
        with_psnr = [e for e in scored if math.isfinite(e.metrics.get("psnr", math.nan))]
        best = max(with_psnr, key=lambda e: e.metrics["psnr"], default=None)
        closest = (f"the best {best.metrics['psnr']:.2f} dB at step {best.step}" if best is not None
                   else "none reports psnr")
        return dataclasses.replace(run, error=f"--select-checkpoint {rule.text}: no evaluation reaches PSNR >= "
                                              f"{threshold:g} dB ({closest}; {len(scored)} evaluation(s))"), warnings
    sign = 1.0 if higher_is_better(metric) else -1.0
    chosen = max(admissible, key=lambda e: (sign * e.metrics[metric], -1 if e.step is None else e.step))
    psnr = chosen.metrics.get("psnr")
    text = (f"step {chosen.step}{' (final)' if chosen is final else ''}: {metric} {chosen.metrics[metric]:.3f}"
            + (f", PSNR {psnr:.1f} dB" if psnr is not None else "")
            + f"; best of {len(admissible)} admissible of {len(candidates)} evaluation(s)")
    return dataclasses.replace(run, metrics=dict(chosen.metrics), step=chosen.step, evaluation=text), warnings


def select_checkpoints(runs: Sequence[Run], rule: CheckpointRule, thresholds: dict[str, float | None]
                       ) -> tuple[list[Run], list[Run], list[str]]:
    """:func:`select_evaluation` on every run with its dataset's threshold: (runs kept, runs left out, warnings)."""
    kept, left_out, warnings = [], [], []
    for run in runs:
        chosen, lines = select_evaluation(run, rule, thresholds.get(run.data))
        warnings += lines
        (kept if chosen.ok else left_out).append(chosen)
    return kept, left_out, warnings


def evaluation_note(runs: Sequence[Run]) -> str:
    """A group's note under a ``best-*`` rule: which step each of its runs contributes."""
    steps = [f"{r.step}" + ("" if r.seed is None else f" (seed {r.seed})") for r in runs if r.evaluation]
    return "evaluations at step " + ", ".join(steps) if steps else ""
