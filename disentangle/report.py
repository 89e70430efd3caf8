"""Entry point: ``python -m disentangle.report DIR... [--format md|csv|latex] [--out FILE] [--compare-paper TABLE]``.

Reads every run under the directories (``metrics.json``, ``metrics_history.jsonl`` and
``.hydra/config.yaml``), takes each run's evaluation by the per-run rule (the final one by default;
``--select-checkpoint best-infom``: the best InfoM among the evaluations above the PSNR threshold, Tripod
paper §4), groups runs by model, dataset and the hyperparameters that vary apart from the seed, aggregates
each metric over seeds (mean ± 95% CI with Student's t by default; median with quartiles or mean ± standard
error by option), applies a paper's selection rule if asked, averages over datasets when there are several
(the papers' "aggregated" column: the mean of the per-dataset means), prints the tables (best per column in
bold) and draws a figure. Runs that failed or have no ``metrics.json`` are listed with their error line. A
sweep file's ``# Report:`` header line sets the rule of its directories unless a flag says otherwise.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .reporting import STAT_MODES

EPILOG = """examples:
  python -m disentangle.report multirun/2026-01-01_12-00-00
  python -m disentangle.report multirun/DATE --select-checkpoint best-infom --psnr-min tripod --compare-paper tripod:1
  python -m disentangle.report multirun/DATE --select infom --psnr-min ae-1 --compare-paper qlae:12
  python -m disentangle.report multirun/DATE --stat quartiles --pool tc_discriminator.weight --select delta_st --compare-paper friede:1
  python -m disentangle.report multirun/DATE --stat se --select dci_d --select-by best-seed --compare-paper cliff:3
  python -m disentangle.report multirun/DATE --format csv --out table.csv
the rule of a sweep file (its '# Report:' header line) applies unless a flag overrides it (--no-sweep-rule: none);
docs/report.md lists every paper's rules.
exit status: 0 written; 1 nothing could be aggregated; 2 bad option or a directory without runs."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m disentangle.report", description=__doc__.split("\n\n")[1],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, help="sweep or run directories (searched recursively)")
    p.add_argument("--format", default="md", choices=("md", "csv", "latex"), help="table format (default md)")
    p.add_argument("--out", type=Path, default=None, help="write the table to FILE too (default: stdout only)")
    p.add_argument("--select-checkpoint", default=None, metavar="final|best-infom|best-METRIC",
                   help="per run, which evaluation: final (metrics.json; default) or best-infom: of the evaluations "
                        "in metrics_history.jsonl whose PSNR reaches --psnr-min, the one with the highest InfoM "
                        "(Tripod paper §4; best-METRIC for another metric), all its metrics reported")
    p.add_argument("--stat", default=None, choices=STAT_MODES,
                   help="ci95: mean ± 95%% CI, Student's t (QLAE, Tripod, FactorQVAE; default); quartiles: median "
                        "[25%%, 75%%] (Friede et al.); se: mean ± standard error (Cliff)")
    p.add_argument("--select", default=None, metavar="none|infom|delta_st|labels|METRIC",
                   help="infom (or another metric): per (model, data) keep the configuration with the best mean "
                        "(QLAE paper §5, Tripod paper §4); delta_st: add per dataset the run with the smallest Δ_ST "
                        "(Friede et al. Table 1 'Selection'; run python -m disentangle.select first); labels: add "
                        "per group the run with the highest held-out-label MIG (Friede et al. §6.4; "
                        "python -m disentangle.select --rule labels first); default none")
    p.add_argument("--select-by", default=None, choices=("mean", "best-seed"),
                   help="rank configurations by their mean (default) or by their best run (Cliff paper App. F.4)")
    p.add_argument("--psnr-min", default=None, metavar="DB|DATA=DB,...|tripod|MODEL-MARGIN",
                   help="reconstruction threshold: a number, per dataset, 'tripod' (the Tripod paper's "
                        "38/42/34/40 dB) or e.g. 'ae-1' (1 dB below the AE's best mean PSNR on that dataset: QLAE's "
                        "'near-perfect reconstruction'); with --select-checkpoint best-*, the threshold of each "
                        "evaluation, otherwise of a configuration's mean PSNR")
    p.add_argument("--metrics", nargs="+", default=None, metavar="METRIC",
                   help="metrics to report, space or comma separated (default: every scalar metric present)")
    p.add_argument("--pool", nargs="+", default=None, metavar="KEY",
                   help="hyperparameters to pool with the seeds (e.g. tc_discriminator.weight: Friede et al.'s "
                        "medians over all γ), or 'all'")
    p.add_argument("--ddof", type=int, default=None, choices=(0, 1),
                   help="degrees of freedom of the standard deviation (1, default; 0 = the QLAE authors' script)")
    p.add_argument("--compare-paper", action="append", default=[], metavar="PAPER:TABLE",
                   help="put the published value next to each cell (e.g. qlae:12, tripod:1, friede:1; "
                        "repeat or comma-separate for several, PAPER alone for all its tables)")
    p.add_argument("--no-aggregate", action="store_true",
                   help="with several datasets, leave out the 'aggregated' table (per model, the mean over the "
                        "datasets of each per-dataset mean, errors propagated: QLAE Tables 1-2, Tripod Table 1)")
    p.add_argument("--no-sweep-rule", action="store_true",
                   help="ignore the rule of the sweep files the directories came from (their '# Report:' line)")
    p.add_argument("--published", type=Path, default=None, metavar="CSV",
                   help="take the published numbers from this CSV (the package file's columns) instead")
    p.add_argument("--figure", type=Path, default=None,
                   help="figure path (default: next to --out, else report.png in the first DIR)")
    p.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    p.add_argument("--wandb", action="store_true",
                   help="also log to the sweep's W&B group: the table (with the published values under "
                        "--compare-paper), a per-configuration table, the figure and the dashboard picture "
                        "(dashboard.png); offline unless an API key is configured")
    p.add_argument("--wandb-project", default="disentangle", help="W&B project (default disentangle)")
    p.add_argument("--wandb-workspace", action="store_true",
                   help="with --wandb: also save the dashboard's panels as a W&B workspace of the project, runs "
                        "grouped by config_key (needs an API key, the network and the dashboard extra)")
    p.add_argument("--wandb-entity", default=None, help="W&B entity of the workspace (default: the API key's)")
    return p.parse_args(argv)


def _split(values) -> list[str]:
    return [v for item in values or () for v in str(item).split(",") if v]


# the rule options: their value when neither the command line nor a sweep file sets them
RULE_DEFAULTS = {"select_checkpoint": "final", "stat": "ci95", "select": "none", "select_by": "mean",
                 "psnr_min": None, "pool": [], "ddof": 1}


def resolve_rule(args: argparse.Namespace) -> list[str]:
    """Fill ``args``' rule options: the command line's, else the sweeps' rule (``# Report:`` lines), else the
    defaults; returns the lines saying where the rule came from. Raises ReportError when the sweeps disagree."""
    from .reporting import ReportError
    from .reporting.sweeps import find_rules, merge_rules

    given = {name: getattr(args, name) for name in RULE_DEFAULTS if getattr(args, name) is not None}
    lines: list[str] = []
    if not args.no_sweep_rule:
        rules, warnings = find_rules(args.dirs)
        for line in warnings:
            print(line, file=sys.stderr)
        try:
            merged, lines = merge_rules(rules, given)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        for name, value in merged.items():
            setattr(args, name, value)
    for name, value in RULE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return lines


def main(argv: list[str] | None = None) -> int:
    from .reporting import RENDERERS, ReportError, build_report

    args = parse_args(argv)
    if args.wandb_workspace:
        problem = _workspace_problem()
        if problem:
            print(f"error: --wandb-workspace: {problem}", file=sys.stderr)
            return 2
        args.wandb = True
    try:
        rule_lines = resolve_rule(args)
        rep, empty = build_report(
            args.dirs, stat=args.stat, select=args.select, select_by=args.select_by, psnr_min=args.psnr_min,
            metrics=_split(args.metrics) or None, pool=_split(args.pool), ddof=args.ddof,
            compare=args.compare_paper, published=args.published, across_data=not args.no_aggregate,
            select_checkpoint=args.select_checkpoint, rule_lines=rule_lines)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    for line in empty:
        print(f"error: {line}", file=sys.stderr)

    figure = None
    if not args.no_figure:
        from .reporting.figures import report_figure

        target = args.figure or (args.out.with_suffix(".png") if args.out else Path(args.dirs[0]) / "report.png")
        try:
            figure = report_figure(rep, target)
        except Exception as exc:  # noqa: BLE001 - the table matters more than the picture
            print(f"warning: figure not drawn: {' '.join(str(exc).split())}", file=sys.stderr)
    rep.figure = str(figure) if figure else None

    text = RENDERERS[args.format](rep)
    sys.stdout.write(text)
    if args.format != "md":  # md carries these in its own sections; latex has them as comments too
        for line in [*rep.rules, *rep.notes, *rep.aggregation, *rep.warnings]:
            print(line, file=sys.stderr)
        for r in rep.left_out:
            print(f"left out: {r.path}: {r.error}", file=sys.stderr)
    else:
        for line in rep.warnings:
            print(line, file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"written: {args.out}", file=sys.stderr)
    if figure:
        print(f"figure: {figure}", file=sys.stderr)
    if args.wandb:
        code = _to_wandb(args, rep, figure)
        if code:
            return code
    return 2 if empty else 0


def _to_wandb(args: argparse.Namespace, rep, figure: Path | None) -> int:
    """The report into the sweep's W&B group (and, asked, its workspace); one line on failure (the table is
    already written). Returns the exit status."""
    from .reporting import log_to_wandb
    from .reporting.dashboard import dashboard_figure, numeric_param, save_workspace, workspace

    first = Path(args.dirs[0]).resolve()
    save_dir = args.out.parent if args.out else first
    group = _sweep_group(first)
    dashboard = None
    try:
        dashboard = dashboard_figure(rep, (Path(figure).parent if figure else save_dir) / "dashboard.png")
    except Exception as exc:  # noqa: BLE001 - the tables matter more than the picture
        print(f"warning: dashboard picture not drawn: {' '.join(str(exc).split())}", file=sys.stderr)
    if dashboard:
        print(f"dashboard: {dashboard}", file=sys.stderr)
    try:
        where = log_to_wandb(rep, project=args.wandb_project, group=group, name=f"report-{first.name}",
                             save_dir=save_dir, figure=figure, dashboard=dashboard)
        print(f"W&B: report logged to {where} (group {group})", file=sys.stderr)
        if args.wandb_workspace:
            view = workspace(args.wandb_project, group, entity=args.wandb_entity or _default_entity(),
                             x_param=numeric_param(rep))
            print(f"W&B: workspace saved: {save_workspace(view)}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - one line, the table is already written
        print(f"error: W&B logging failed: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


def _workspace_problem() -> str | None:
    """Why a workspace cannot be saved here (no package, no API key), else None: checked before any work."""
    import importlib.util
    import os

    from .runtime.loggers import has_api_key

    if importlib.util.find_spec("wandb_workspaces") is None:
        return ("needs the wandb-workspaces package: pip install '.[dashboard]' in the project's clone (once released: "
                "pip install 'disentangle-quantized[dashboard]')")
    if os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return f"WANDB_MODE={os.environ['WANDB_MODE']}: a workspace is saved online only"
    if not has_api_key():
        return "needs a W&B API key (WANDB_API_KEY or `wandb login`) and the network"
    return None


def _default_entity() -> str:
    import wandb

    return wandb.Api().default_entity


def _sweep_group(path: Path) -> str:
    """The W&B group the training runs in ``path`` were logged to: what their ``wandb_run.json`` records (``path``'s
    own for a single run, else its first job's), else the sweep's name from its ``multirun.yaml``."""
    import json

    from omegaconf import OmegaConf

    from .runtime.loggers import sweep_name

    for record in [path / "wandb_run.json", *sorted(path.glob("*/wandb_run.json"))]:
        try:
            group = json.loads(record.read_text()).get("group")
        except (OSError, ValueError, AttributeError):
            continue
        if group:
            return str(group)

    multirun = path / "multirun.yaml"
    try:
        config_name = OmegaConf.load(multirun).hydra.job.config_name if multirun.is_file() else None
    except Exception:  # noqa: BLE001 - an unreadable file: the directory's name is the group
        config_name = None
    return sweep_name(path, config_name)


if __name__ == "__main__":
    sys.exit(main())
