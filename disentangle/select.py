"""Entry point: ``python -m disentangle.select DIR... [--rule delta_st|labels] [--criterion loss|elbo] [--out DIR]``.

Measures the straight-through gap Δ_ST of every trained categorical-latent run under the directories (Friede
et al.'s unsupervised model selection, their §3.4 and §6.3), stores it in each run's ``metrics.json``, and
prints per dataset the run with the smallest gap, its metrics beside the pool's medians (Table 1's "Selection"
row) and the Spearman correlation of Δ_ST with each metric (Fig. 4 left). ``--rule labels`` selects
semi-supervised runs by the MIG on their held-out labelled examples instead (Friede et al. §6.4). ``--out``
(default: the first DIR) receives ``selection.md``, ``selection.json`` and ``selection.png``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .reporting.selection import CRITERIA, METRIC_KEYS, RULES, check_criterion, check_rule


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m disentangle.select", description=__doc__.split("\n\n")[1])
    p.add_argument("dirs", nargs="+", type=Path, help="directories holding trained runs (searched recursively)")
    p.add_argument("--rule", default="delta_st",
                   help=f"one of {', '.join(RULES)}: smallest straight-through gap (default) or highest MIG on a "
                        f"semi-supervised run's held-out labels")
    p.add_argument("--criterion", default="loss",
                   help=f"one of {', '.join(CRITERIA)}: 'loss' = the training loss with γ·TC (authors' code, "
                        f"default), 'elbo' = reconstruction + KL (the paper's text)")
    p.add_argument("--batches", type=int, default=1000, help="training batches averaged (default 1000, Friede et al.'s code)")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64, Friede et al.'s code)")
    p.add_argument("--stream-seed", type=int, default=42,
                   help="seed of the fixed training stream the batches come from (default 42, the authors')")
    p.add_argument("--metric", default="mig", help="metric of the figure (default mig, the paper's primary)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--recompute", action="store_true", help="measure again even where metrics.json has Δ_ST")
    p.add_argument("--out", type=Path, default=None, help="where selection.md/json/png go (default: first DIR)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .reporting.selection import find_runs, measure_run, select, selection_figure, selection_markdown

    args = parse_args(argv)
    try:
        check_criterion(args.criterion)
        check_rule(args.rule)
        if args.batches < 1 or args.batch_size < 1:
            raise ValueError(f"--batches and --batch-size must be >= 1 (got {args.batches}, {args.batch_size})")
        runs = find_runs(args.dirs)
        if not runs:
            raise ValueError(f"no runs (a checkpoints/last.ckpt or metrics.json) under {' '.join(map(str, args.dirs))}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch
    from tqdm.auto import tqdm

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    records = []
    for path in tqdm(runs, desc="runs", unit="run"):
        records.append(measure_run(path, rule=args.rule, criterion=args.criterion, n_batches=args.batches,
                                   batch_size=args.batch_size, stream_seed=args.stream_seed, device=device,
                                   recompute=args.recompute, progress=True))
    failed = [r for r in records if r.error is not None]
    rows = select(records, METRIC_KEYS, rule=args.rule)
    text = selection_markdown(rows, failed, rule=args.rule)
    print(text)
    out = args.out or Path(args.dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    (out / "selection.md").write_text(text)
    (out / "selection.json").write_text(json.dumps(
        {"rule": args.rule, "criterion": args.criterion, "rows": rows,
         "runs": [{"path": str(r.path), "data": r.data, "model": r.model, "delta_st": r.delta_st,
                   "label_validation_mig": r.validation, "error": r.error} for r in records]}, indent=2))
    if rows:
        selection_figure(records, rows, out / "selection.png", metric=args.metric, rule=args.rule)
    print(f"written: {out / 'selection.md'}, {out / 'selection.json'}" + (f", {out / 'selection.png'}" if rows else ""))
    if not rows:
        print("error: no run could be measured (see 'Runs left out' above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
