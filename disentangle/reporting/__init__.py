"""Turning sweeps into the papers' tables: read runs, group, aggregate over seeds, select, average over datasets
(the "aggregated" column), compare with the published numbers, render (md / csv / LaTeX), draw, and log to W&B.
The command line is :mod:`disentangle.report`.

Modules: :mod:`.runs` (finding and reading run directories), :mod:`.checkpoints` (the per-run rule: which
evaluation of a run counts), :mod:`.aggregate` (hyperparameters, groups and statistics), :mod:`.rules` (the
per-configuration selection rules and the PSNR filter), :mod:`.sweeps` (the rule a sweep file carries),
:mod:`.compare` (published numbers), :mod:`.tables` (rendering), :mod:`.figures` (the figure).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .aggregate import (
    AGGREGATED,
    Aggregate,
    Group,
    Stats,
    aggregate,
    aggregate_across_data,
    mean_over_data,
    summarize,
)
from .checkpoints import CheckpointRule, evaluation_note, select_checkpoints
from .compare import METHOD_NAMES, PAPER_AGGREGATE_DATA, Published, load_rows, parse_tables
from .rules import PsnrFilter, select_best, select_delta_st, select_labels
from .runs import Run, read_runs
from .tables import METRIC_ORDER, RENDERERS, Report

STAT_MODES = ("ci95", "quartiles", "se")


class ReportError(ValueError):
    """A problem that stops the report, in one line; ``code`` is the exit status (2: bad option or a directory
    without runs, 1: runs found but none usable)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def build_report(dirs: Sequence[Path | str], *, stat: str = "ci95", select: str = "none", select_by: str = "mean",
                 psnr_min: str | None = None, metrics: Sequence[str] | None = None, pool: Sequence[str] = (),
                 ddof: int = 1, compare: Sequence[str] = (), published: Path | str | None = None,
                 title: str | None = None, across_data: bool = True, select_checkpoint: str = "final",
                 rule_lines: Sequence[str] = ()) -> tuple[Report, list[str]]:
    """The report of the runs under ``dirs`` and the lines about given directories that hold no runs.

    ``select_checkpoint``: the per-run rule, ``final`` (``metrics.json``) or ``best-METRIC`` (the evaluation
    of ``metrics_history.jsonl`` with the best METRIC among those whose PSNR reaches ``psnr_min``; Tripod
    paper §4), see :mod:`.checkpoints`. Under a ``best-*`` rule ``psnr_min`` is the threshold of each
    evaluation; otherwise it filters configurations by their mean PSNR. ``select``: the per-configuration rule
    (:mod:`.rules`).
    ``across_data``: when the selected groups span several datasets, add the ``aggregated`` rows (the mean over the
    datasets, :func:`.aggregate.aggregate_across_data`), compared with the papers' ``aggregated`` rows.
    ``rule_lines``: lines about where the rule came from (a sweep file's), printed with it.

    Raises :class:`ReportError` for a bad option or when no run at all can be aggregated."""
    if stat not in STAT_MODES:
        raise ReportError(f"--stat: unknown {stat!r}; choose from {', '.join(STAT_MODES)}")
    if ddof not in (0, 1):
        raise ReportError(f"--ddof: {ddof}; choose 0 or 1")
    try:
        psnr = PsnrFilter.parse(psnr_min) if psnr_min not in (None, "") else None
        checkpoint = CheckpointRule.parse(select_checkpoint)
        rows = load_rows(parse_tables(compare), published) if compare else None
    except ValueError as exc:
        raise ReportError(str(exc)) from None

    found = read_runs(dirs)
    if not found.runs:
        lines = [*found.empty, *(f"left out: {r.path}: {r.error}" for r in found.left_out)]
        raise ReportError("nothing to report: " + ("; ".join(lines) or "no runs"), code=2 if found.empty else 1)
    warnings: list[str] = []
    rules = [*rule_lines]
    config_psnr = psnr  # the reconstruction filter on configurations' mean PSNR
    if checkpoint.metric is not None:
        thresholds, threshold_notes = ({}, []) if psnr is None else psnr.thresholds(
            aggregate(found.runs, ["psnr"]).groups)  # MODEL-MARGIN: from the baseline's final evaluations
        runs, dropped, lines = select_checkpoints(found.runs, checkpoint, thresholds)
        rules.append(checkpoint.describe(thresholds))
        warnings += [*threshold_notes, *lines]
        if dropped:
            warnings.append(f"warning: --select-checkpoint {checkpoint.text}: {len(dropped)} run(s) have no "
                            f"admissible evaluation and are left out (listed under the runs left out)")
        found.left_out = [*found.left_out, *dropped]
        found.runs = runs
        config_psnr = None  # every evaluation taken passed the threshold already
        if not runs:
            reasons = "; ".join(f"{r.path}: {r.error}" for r in dropped[:3])
            raise ReportError(f"nothing to report: no run has an admissible evaluation ({reasons})", code=1)
    else:
        rules.append(checkpoint.describe())
    if metrics:
        absent = [m for m in metrics if not any(m in r.metrics for r in found.runs)]
        warnings += [f"warning: metric {m}: no run reports it" for m in absent]
        metrics = [m for m in metrics if m not in absent]
        if not metrics:
            raise ReportError(f"--metrics: none of {', '.join(absent)} is reported by any run")
    agg = aggregate(found.runs, metrics or None, pool=pool, ddof=ddof, order=METRIC_ORDER)
    warnings += agg.warnings
    unmatched = [q for q in pool if q != "all" and not any(_pool_match(p.key, q) for p in agg.pooled)]
    warnings += [f"warning: --pool {q}: no varying hyperparameter of that name" for q in unmatched]
    if checkpoint.metric is not None:
        for g in agg.groups:
            g.note = evaluation_note(g.runs)
    rules.append(_configuration_rule(stat, select, select_by, config_psnr, pool))

    groups, notes = list(agg.groups), []
    if select == "delta_st":
        try:
            extra, notes = select_delta_st(found.runs, agg.params, agg.metrics, ddof=ddof)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        groups += extra
        if config_psnr:
            notes.append("note: --psnr-min is not applied with --select delta_st (the paper's selection is unfiltered)")
    elif select == "labels":
        try:
            groups, notes = select_labels(agg, ddof=ddof)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        if config_psnr:
            notes.append("note: --psnr-min is not applied with --select labels")
    elif select != "none" or config_psnr:
        metric = select if select != "none" else None
        if metric is not None and not any(metric in g.stats for g in agg.groups):
            known = ", ".join(["none", "delta_st", "labels", *agg.metrics])
            raise ReportError(f"--select: {select!r} is not a metric of these runs; choose from {known}")
        try:
            groups, notes = (select_best(agg, metric, config_psnr, by=select_by) if metric
                             else _filter_only(agg, config_psnr))
        except ValueError as exc:
            raise ReportError(str(exc)) from None
    if not groups:
        raise ReportError("nothing to report: no group is left after the selection: " + "; ".join(notes), code=1)
    combined, aggregation = aggregate_across_data(groups) if across_data else ([], [])
    rep = Report(groups + combined, agg.params, agg.metrics, stat=stat, published=Published(rows) if rows else None,
                 left_out=found.left_out, notes=notes, warnings=warnings, pooled=agg.pooled,
                 title=title or "Report: " + ", ".join(str(d) for d in dirs), aggregation=aggregation, rules=rules)
    compared = {rep.groups[i].over for i, _ in rep.comparisons if rep.groups[i].over}
    for over in compared:
        if sorted(over) != sorted(PAPER_AGGREGATE_DATA):
            rep.aggregation.append(f"note: the published {AGGREGATED} values are means over "
                                   f"{', '.join(PAPER_AGGREGATE_DATA)}; these rows are over {', '.join(over)}")
    return rep, found.empty


def _configuration_rule(stat: str, select: str, select_by: str, psnr: PsnrFilter | None,
                        pool: Sequence[str]) -> str:
    """One line for the report: how the runs of a configuration are summarised and which configurations count."""
    line = "per configuration: " + {"ci95": "mean ± 95% CI (Student's t)", "se": "mean ± standard error",
                                    "quartiles": "median [25%, 75%]"}[stat] + " over the seeds"
    if pool:
        line += f" pooled with {', '.join(pool)}"
    if select == "delta_st":
        line += "; per dataset, the run with the smallest Δ_ST added (Friede et al. Table 1 'Selection')"
    elif select == "labels":
        line += "; per group, the run with the highest held-out-label MIG added (Friede et al. §6.4)"
    elif select != "none":
        by = "best single run" if select_by == "best-seed" else "mean"
        line += f"; per (model, data), the configuration with the best {by} {select}"
    if psnr is not None and select not in ("delta_st", "labels"):
        line += f" among those whose mean PSNR reaches --psnr-min {psnr.text}"
    return line


def _pool_match(key: str, query: str) -> bool:
    key, query = key.replace("/", "."), query.replace("/", ".")
    return key == query or key.endswith("." + query)


def _filter_only(agg: Aggregate, psnr: PsnrFilter) -> tuple[list[Group], list[str]]:
    """The reconstruction filter without a selection: every configuration that passes."""
    thresholds, notes = psnr.thresholds(agg.groups)
    kept = []
    for g in agg.groups:
        thr = thresholds.get(g.data)
        if thr is None or ("psnr" in g.stats and g.stats["psnr"].mean >= thr):
            kept.append(g)
        else:
            value = f"{g.stats['psnr'].mean:.1f} dB" if "psnr" in g.stats else "no PSNR"
            notes.append(f"{g.label()}: left out, PSNR {value} < {thr:.1f} dB")
    return kept, notes


def log_to_wandb(rep: Report, *, project: str = "disentangle", group: str | None = None, name: str | None = None,
                 save_dir: Path | str = ".", figure: Path | str | None = None,
                 dashboard: Path | str | None = None) -> str:
    """Log the report to a new run of job type ``report`` in ``group`` (the sweep's): its CSV form as the W&B
    table ``report`` (with the published values and their differences under --compare-paper), the per-configuration
    table ``configurations`` (:func:`~disentangle.reporting.dashboard.configuration_table`), the figure
    (``report_figure``) and the dashboard picture (``dashboard``). Offline unless an API key is configured
    (``WANDB_MODE`` wins), like the training logger. Writes ``report_wandb_run.json``
    (:func:`disentangle.runtime.loggers.run_record`) in ``save_dir``. Returns where the run went (its
    directory or URL)."""
    import wandb

    from ..runtime.loggers import wandb_mode, write_run_record
    from .dashboard import configuration_table
    from .tables import csv_columns, csv_rows

    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project, group=group, name=name, job_type="report", dir=str(save_dir),
                     mode=wandb_mode(), tags=["report"], reinit="create_new",
                     config={"stat": rep.stat, "published": bool(rep.published), "rules": list(rep.rules)})
    try:
        table = wandb.Table(columns=csv_columns(rep), data=csv_rows(rep), allow_mixed_types=True)
        columns, rows = configuration_table(rep)
        payload = {"report": table,
                   "configurations": wandb.Table(columns=columns, data=rows, allow_mixed_types=True)}
        if figure is not None and Path(figure).is_file():
            payload["report_figure"] = wandb.Image(str(figure))
        if dashboard is not None and Path(dashboard).is_file():
            payload["dashboard"] = wandb.Image(str(dashboard))
        run.log(payload)
        where = str(Path(run.dir).parent) if wandb_mode() != "online" else run.url
        write_run_record(run, save_dir / "report_wandb_run.json")
    finally:
        run.finish()
    return where


__all__ = ["AGGREGATED", "METHOD_NAMES", "RENDERERS", "STAT_MODES", "Aggregate", "CheckpointRule", "Group",
           "PsnrFilter", "Published", "Report", "ReportError", "Run", "Stats", "aggregate", "aggregate_across_data",
           "build_report", "log_to_wandb", "mean_over_data", "read_runs", "select_best", "select_checkpoints",
           "select_delta_st", "select_labels", "summarize"]
