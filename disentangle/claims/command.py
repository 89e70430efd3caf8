"""``python -m disentangle.claims [NAME ...] [--seeds 0,1,2,3,4] [--out DIR] [--list] [--eval-samples N]``: each
paper's headline comparisons at laptop scale over several seeds, each with a paired 95% interval and a verdict
(docs/claims.md).

NAME is a claim's name or a paper's (qlae, tripod, factorqvae, friede, cliff: all of its claims); none = all.
Runs are shared between claims, reused when finished and resumed when interrupted (OUT/runs/...). Writes
OUT/claims.json, OUT/results.json (the rows with the commit, the machine and the settings), OUT/claims.md,
OUT/claims.png and OUT/timing.json; with ``--eval-samples N`` the finished runs are re-evaluated on N samples first
and those files go to OUT/evalN/. ``--render RESULTS --out DIR`` writes DIR/claims.md and DIR/claims.png from a
stored results.json without training. ``--data NAME`` runs the claims claims.yaml lists for another dataset on it
(runs and results in outputs/claims-NAME by default).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def parse_seeds(text: str) -> list[int] | None:
    """``0,1,2`` or ``0-4``; ``auto`` (None): seeds 0-4, then more where a claim is undecided
    (:mod:`disentangle.claims.sequential`)."""
    if text == "auto":
        return None
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--seeds: expected integers like 0,1,2,3,4 or 0-4 (got {text!r})") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: expected distinct integers (got {text!r})")
    return seeds


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m disentangle.claims", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="claims or papers (default: all)")
    p.add_argument("--seeds", default="0,1,2,3,4",
                   help="seeds, e.g. 0,1,2,3,4 (default) or 0-9; auto: 0-4, then one more at a time, up to 10, for each "
                        "claim still inconclusive, every look at a Bonferroni-corrected level (docs/claims.md)")
    p.add_argument("--out", type=Path, default=None,
                   help="runs and results (default outputs/claims, outputs/claims-NAME with --data NAME)")
    p.add_argument("--data", metavar="NAME", default=None,
                   help="run the claims claims.yaml lists for dataset NAME on it instead (e.g. causalchamber), in a "
                        "table of their own; with --list, --diff and --render too")
    p.add_argument("--list", action="store_true", help="print the claims and their estimated time, run nothing")
    p.add_argument("--diff", metavar="NAME", default=None,
                   help="print what claim NAME's two sides differ in, as JSON: {\"declared\": {key: [better, worse]}, "
                        "\"undeclared\": {...}} over their resolved configs; run nothing")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="runs side by side, each with cores/jobs threads (default: 2 on a machine with 2+ cores)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override for every run (repeatable), e.g. trainer.max_steps=1600 for a 2x budget; "
                        "use another --out for it")
    p.add_argument("--eval-samples", type=int, default=None, metavar="N",
                   help="re-evaluate every finished run on N evaluation samples (e.g. 10000, the QLAE and FactorQVAE "
                        "papers' size) and assess the claims on those; results in OUT/evalN/ (the runs' own "
                        "evaluation by default)")
    p.add_argument("--confidence", type=float, default=0.95, help="of the paired t interval (default 0.95)")
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS",
                   help="write OUT/claims.md and OUT/claims.png from a stored results.json (or claims.json) without "
                        "training; the intervals and verdicts are recomputed from its per-seed values")
    p.add_argument("--page", type=Path, default=None, metavar="PAGE",
                   help="with --render: also replace the tables between PAGE's <!-- claims:begin --> and <!-- "
                        "claims:end --> lines (<!-- claims NAME:begin --> for --data NAME's results)")
    args = p.parse_args(argv)
    if args.page is not None and args.render is None:
        p.error("--page goes with --render RESULTS")
    if args.out is None:
        args.out = Path("outputs/claims" + (f"-{args.data}" if args.data else ""))
    return args


def catalogue(data: str | None):
    """The claims ``--data`` selects: the catalogue, or the claims of dataset NAME moved onto it."""
    from .catalog import load_claims, load_datasets, on_data

    claims = load_claims()
    if data is None:
        return claims
    variants = load_datasets()
    if data not in variants:
        raise ValueError(f"--data {data!r}: no such dataset in claims.yaml (known: {', '.join(variants) or 'none'})")
    return on_data(claims, variants[data])


def estimates(claims, seeds, jobs: int) -> dict[str, float]:
    """Seconds per paper: its configurations' measured single-core times x seeds / jobs, a configuration shared
    with an earlier paper counted there."""
    from .catalog import PAPERS, unique_runs

    seen, out = set(), {}
    for paper in PAPERS:
        runs = [r for r in unique_runs([c for c in claims if c.paper == paper]) if r.key not in seen]
        seen.update(r.key for r in runs)
        if any(c.paper == paper for c in claims):
            out[paper] = sum(r.seconds for r in runs) * len(seeds) / max(1, jobs)
    return out


def print_list(claims, seeds, jobs: int) -> None:
    from .catalog import unique_runs
    from .report import METRIC_LABELS, PAPER_TITLES, comparison

    est = estimates(claims, seeds, jobs)
    for paper, seconds in est.items():
        mine = [c for c in claims if c.paper == paper]
        print(f"{PAPER_TITLES[paper]}: {len(mine)} claims, about {seconds / 60:.0f} min "
              f"({len(seeds)} seeds, {jobs} jobs)")
        for c in mine:
            row = {"better": c.better.label, "worse": c.worse.label, "lower_is_better": c.lower_is_better}
            print(f"  {c.name:<40} {comparison(row)} on {METRIC_LABELS.get(c.metric, c.metric)} "
                  f"({c.kind}; Table {c.table}, setting {c.setting.name})")
    runs = unique_runs(claims)
    print(f"{len(claims)} claims, {len(runs)} configurations x {len(seeds)} seeds = {len(runs) * len(seeds)} runs, "
          f"about {sum(est.values()) / 3600:.1f} h on this machine's estimate (--jobs {jobs})")


def print_diff(name: str, data: str | None = None) -> int:
    """``--diff NAME``: the claim's declared and undeclared differences as one JSON object; exit 1 when any is
    undeclared (the comparison differs in more than its claim)."""
    from .differences import differences

    claims = {c.name: c for c in catalogue(data)}
    if name not in claims:
        raise ValueError(f"--diff {name!r}: no such claim{f' on --data {data}' if data else ''} "
                         f"(python -m disentangle.claims --list{f' --data {data}' if data else ''})")
    found = differences(claims[name])
    print(json.dumps(found, indent=2, default=str))
    return 1 if found["undeclared"] else 0


def run(args) -> int:
    from tqdm.auto import tqdm

    from .assess import adjust_within_papers, assess
    from .catalog import PAPERS, select_claims, unique_runs
    from .report import print_table, run_provenance, summary, write
    from .runner import evaluate_run, measure_selection, schedule, train_all

    if args.diff is not None:
        return print_diff(args.diff, args.data)
    if args.render is not None:
        from .report import load_results, render

        rows, timing = load_results(args.render)
        paths = render(rows, args.out, timing)
        if args.page is not None:
            from .report import render_into_page

            paths["page"] = render_into_page(rows, args.page, timing)
        print("written: " + ", ".join(str(p) for p in paths.values()))
        return 0
    claims = select_claims(catalogue(args.data), args.names)
    seeds = parse_seeds(args.seeds)
    auto = seeds is None
    if auto:
        from .sequential import FIRST_SEEDS

        seeds = list(range(FIRST_SEEDS))
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1 (got {args.jobs})")
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence must lie in (0, 1) (got {args.confidence})")
    if args.eval_samples is not None and args.eval_samples < 2:
        raise ValueError(f"--eval-samples must be >= 2 (got {args.eval_samples})")
    bad = [o for o in args.override if "=" not in o]
    if bad:
        raise ValueError(f"--override expects KEY=VALUE (got {bad[0]!r})")
    if args.list:
        print_list(claims, seeds, args.jobs)
        return 0
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    timing_path = out / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else {}
    all_runs = unique_runs(claims)
    results: dict = {}
    with tqdm(total=len(all_runs) * len(seeds), desc="claims", unit="run") as bar:
        def done(result):
            bar.update(1)
            bar.set_postfix_str(f"{result.spec.key} seed {result.seed}" + (" (failed)" if result.error else ""))

        for paper in PAPERS:
            mine = [c for c in claims if c.paper == paper]
            runs = [r for r in unique_runs(mine) if all((r.key, s) not in results for s in seeds)]
            if not mine:
                continue
            start = time.perf_counter()
            new = train_all(out, schedule(runs, seeds), args.jobs, args.override, on_done=done)
            results.update(new)
            for claim in mine:
                if claim.kind == "selection":
                    measure_selection(claim, results)
            if any(r.trained for r in new.values()):
                entry = timing.setdefault(paper, {"elapsed_s": 0.0})
                entry["elapsed_s"] += time.perf_counter() - start
                entry["jobs"] = args.jobs
                timing_path.write_text(json.dumps(timing, indent=2))
    if args.eval_samples is not None:
        for result in tqdm(list(results.values()), desc=f"evaluating on {args.eval_samples} samples", unit="run"):
            evaluate_run(result, args.eval_samples)
    if auto:  # more seeds where undecided, each look at the corrected level
        from .sequential import sequential

        with tqdm(desc="claims: seeds beyond 5", unit="run") as bar:
            def more(tasks):
                new = train_all(out, tasks, args.jobs, args.override, on_done=lambda result: bar.update(1))
                if args.eval_samples is not None:
                    for result in new.values():
                        evaluate_run(result, args.eval_samples)
                return new

            assessed = sequential(claims, results, args.confidence, more, assess)
    else:
        assessed = [assess(c, results, seeds, args.confidence) for c in claims]
    # Holm within each paper over the claims assessed in this call (all of a paper's by default)
    rows = adjust_within_papers(assessed)
    print_table(rows)
    print(summary(rows))
    settings = {"seeds": "auto" if auto else seeds, "data": args.data, "jobs": args.jobs, "confidence": args.confidence,
                "overrides": list(args.override), "eval_samples": args.eval_samples, "names": list(args.names)}
    paths = write(rows, out if args.eval_samples is None else out / f"eval{args.eval_samples}", timing, settings,
                  run_provenance(results))
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 1 if any(r["verdict"] == "incomplete" for r in rows) else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
