"""Entry point: ``python -m disentangle.report DIR... [--format md|csv|latex] [--out FILE] [--compare-paper TABLE]``.

Reads every run under the directories (``metrics.json`` and ``.hydra/config.yaml``), groups runs by model, dataset
and the hyperparameters that vary apart from the seed, aggregates each metric over seeds (mean ± 95% CI with
Student's t by default; median with quartiles or mean ± standard error by option), applies a paper's selection
rule if asked, averages over datasets when there are several (the papers' "aggregated" column: the mean of the
per-dataset means), prints the tables (best per column in bold) and draws a figure. Runs that failed or have no
``metrics.json`` are listed with their error line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .reporting import STAT_MODES

EPILOG = """examples:
  python -m disentangle.report multirun/2026-01-01_12-00-00
  python -m disentangle.report multirun/DATE --select infom --psnr-min tripod --compare-paper tripod:1
  python -m disentangle.report multirun/DATE --stat quartiles --pool gamma --select delta_st --compare-paper friede:1
  python -m disentangle.report multirun/DATE --format csv --out table.csv
exit status: 0 written; 1 nothing could be aggregated; 2 bad option or a directory without runs."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m disentangle.report", description=__doc__.split("\n\n")[1],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, help="sweep or run directories (searched recursively)")
    p.add_argument("--format", default="md", choices=("md", "csv", "latex"), help="table format (default md)")
    p.add_argument("--out", type=Path, default=None, help="write the table to FILE too (default: stdout only)")
    p.add_argument("--stat", default="ci95", choices=STAT_MODES,
                   help="ci95: mean ± 95%% CI, Student's t (QLAE, Tripod, FactorQVAE; default); quartiles: median "
                        "[25%%, 75%%] (Friede et al.); se: mean ± standard error (Cliff)")
    p.add_argument("--select", default="none", metavar="none|infom|delta_st|METRIC",
                   help="infom (or another metric): per (model, data) keep the configuration with the best mean "
                        "(QLAE §6.3, Tripod §10.3); delta_st: add per dataset the run with the smallest Δ_ST "
                        "(Friede et al. Table 1 'Selection'; run python -m disentangle.select first)")
    p.add_argument("--select-by", default="mean", choices=("mean", "best-seed"),
                   help="rank configurations by their mean (default) or by their best run (Cliff §7.4)")
    p.add_argument("--psnr-min", default=None, metavar="DB|DATA=DB,...|tripod|MODEL-MARGIN",
                   help="reconstruction filter: keep configurations whose mean PSNR reaches the threshold: a number, "
                        "per dataset, 'tripod' (the Tripod paper's 38/42/34/40 dB) or e.g. 'ae-1' (1 dB below the "
                        "AE's best mean PSNR on that dataset: QLAE's 'near-perfect reconstruction')")
    p.add_argument("--metrics", nargs="+", default=None, metavar="METRIC",
                   help="metrics to report, space or comma separated (default: every scalar metric present)")
    p.add_argument("--pool", nargs="+", default=(), metavar="KEY",
                   help="hyperparameters to pool with the seeds (e.g. gamma: Friede et al.'s medians over all γ), "
                        "or 'all'")
    p.add_argument("--ddof", type=int, default=1, choices=(0, 1),
                   help="degrees of freedom of the standard deviation (1, default; 0 = the QLAE authors' script)")
    p.add_argument("--compare-paper", action="append", default=[], metavar="PAPER:TABLE",
                   help="put the published value next to each cell (e.g. qlae:12, tripod:1, friede:1; "
                        "repeat or comma-separate for several, PAPER alone for all its tables)")
    p.add_argument("--no-aggregate", action="store_true",
                   help="with several datasets, leave out the 'aggregated' table (per model, the mean over the "
                        "datasets of each per-dataset mean, errors propagated: QLAE Tables 1-2, Tripod Table 1)")
    p.add_argument("--published", type=Path, default=None, metavar="CSV",
                   help="take the published numbers from this CSV (the package file's columns) instead")
    p.add_argument("--figure", type=Path, default=None,
                   help="figure path (default: next to --out, else report.png in the first DIR)")
    p.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    p.add_argument("--wandb", action="store_true",
                   help="also log the table (and figure) as a W&B table; offline unless an API key is configured")
    p.add_argument("--wandb-project", default="disentangle", help="W&B project (default disentangle)")
    return p.parse_args(argv)


def _split(values) -> list[str]:
    return [v for item in values or () for v in str(item).split(",") if v]


def main(argv: list[str] | None = None) -> int:
    from .reporting import RENDERERS, ReportError, build_report

    args = parse_args(argv)
    try:
        rep, empty = build_report(
            args.dirs, stat=args.stat, select=args.select, select_by=args.select_by, psnr_min=args.psnr_min,
            metrics=_split(args.metrics) or None, pool=_split(args.pool), ddof=args.ddof,
            compare=args.compare_paper, published=args.published, across_data=not args.no_aggregate)
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
        for line in [*rep.notes, *rep.aggregation, *rep.warnings]:
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
        from .reporting import log_to_wandb

        first = Path(args.dirs[0]).resolve()
        try:
            where = log_to_wandb(rep, project=args.wandb_project, group=_sweep_group(first),
                                 name=f"report-{first.name}", save_dir=(args.out.parent if args.out else first),
                                 figure=figure)
            print(f"W&B: table logged to {where}", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - one line, the table is already written
            print(f"error: W&B logging failed: {' '.join(str(exc).split())}", file=sys.stderr)
            return 1
    return 2 if empty else 0


def _sweep_group(path: Path) -> str:
    """The W&B group of the sweep in ``path`` (as its training runs were grouped): from its ``multirun.yaml``."""
    from omegaconf import OmegaConf

    from .loggers import sweep_name

    multirun = path / "multirun.yaml"
    try:
        config_name = OmegaConf.load(multirun).hydra.job.config_name if multirun.is_file() else None
    except Exception:  # noqa: BLE001 - an unreadable file: the directory's name is the group
        config_name = None
    return sweep_name(path, config_name)


if __name__ == "__main__":
    sys.exit(main())
