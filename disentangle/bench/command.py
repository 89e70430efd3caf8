"""The command line of ``python -m disentangle.bench``: one subcommand per benchmark (see :mod:`disentangle.bench`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..checks import TF32_NEEDS_CUDA  # torch-free
from .seeds import MODELS as SEED_MODELS  # torch-free

# The benchmarks import torch when they run, not here: `--help` and a mistake in the arguments answer at once.
DEVICE_HELP = "torch device (default: cuda when available, else cpu)"


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv=None) -> None:
    """Parse ``argv`` (default: the command line) and run the benchmark it names."""
    parser = argparse.ArgumentParser(prog="python -m disentangle.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    steps = sub.add_parser("steps", help="seconds per training step of the paper configurations")
    steps.add_argument("--device", default=None, help=DEVICE_HELP)
    steps.add_argument("--repeats", type=int, default=10)
    steps.add_argument("--batch-size", type=int, default=64)
    steps.add_argument("--only", nargs="+", default=None,
                       help="cases whose label contains one of these (qlae, the baseline, always runs)")
    steps.add_argument("--precision", default=None, choices=["32-true", "bf16-mixed", "16-mixed"],
                       help="time fp32 and this precision alternately and print their ratio")
    steps.add_argument("--compile", action="store_true",
                       help="time every case eager and compiled (trainer.compile=true), with the compile costs")
    steps.add_argument("--exact", action="store_true", help="--only names whole labels, timed in that order")
    steps.add_argument("--resolution", type=int, default=64, help="image side (--compile; default 64, the papers')")
    steps.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a training override for every case (--compile; repeatable), e.g. model/arch=small")
    steps.add_argument("--json", type=Path, default=None,
                       help="--compile: write the rows here (JSON lines, each as its case finishes)")
    terms = sub.add_parser("terms", help="Cliff, IOSS and HFS alone against the Cliff paper's Shapes3D step")
    terms.add_argument("--device", default=None, help=DEVICE_HELP)
    terms.add_argument("--n", type=int, default=64, help="batch size (Shapes3D's: 64)")
    terms.add_argument("--d", type=int, default=10, help="latents (Shapes3D's: 10)")
    terms.add_argument("--repeats", type=int, default=10)
    data = sub.add_parser("data", help="batch-assembly throughput (images/s) of prepared and procedural data")
    data.add_argument("--device", default=None, help=DEVICE_HELP)
    data.add_argument("--n", type=int, default=100_000, help="images in the synthetic cache")
    data.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    data.add_argument("--repeats", type=int, default=50)
    metrics = sub.add_parser("metrics", help="InfoMEC + DCI against a straightforward scikit-learn baseline")
    metrics.add_argument("--device", default=None,
                         help="torch device for the discrete MI tables and InfoE regressions (default: cuda when "
                              "available, else cpu)")
    metrics.add_argument("--n", type=int, default=10_000)
    metrics.add_argument("--latents", type=int, default=18)
    metrics.add_argument("--repeats", type=int, default=3)
    metrics.add_argument("--continuous", action="store_true", help="continuous latents (KSG estimator)")
    metrics.add_argument("--seed", type=int, default=0)
    tf32 = sub.add_parser("tf32", help="each paper model's terms and gradient under TF32 against float32 (CUDA)")
    tf32.add_argument("--device", default="cuda")
    tf32.add_argument("--batch-size", type=int, default=64)
    tf32.add_argument("--repeats", type=int, default=5)
    tf32.add_argument("--only", nargs="+", default=None, help="cases whose label contains one of these")
    seeds = sub.add_parser("precision", help="quickstart metrics over seeds in fp32 and bf16-mixed (subprocesses)")
    seeds.add_argument("--out", type=Path, default=Path("outputs/bench_precision"),
                       help="run directories; finished runs are reused")
    seeds.add_argument("--models", nargs="+", default=list(SEED_MODELS))
    seeds.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    seeds.add_argument("--compile", action="store_true",
                       help="eager against compiled (trainer.compile=true), both fp32, instead of fp32 against bf16")
    seeds.add_argument("overrides", nargs="*", help="extra training overrides for every run")
    errors = sub.add_parser("errors", help="seconds from a command line to a mistake's one-line error, and each "
                                           "command's --help (fresh interpreters, medians)")
    errors.add_argument("--repeats", type=int, default=5)
    errors.add_argument("--only", nargs="+", default=None, help="cases whose label contains one of these")
    errors.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.what == "errors":
        from .latency import bench_errors

        rows = bench_errors(args.repeats, args.only)
        if args.json is not None:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        raise SystemExit(0 if all(r["ok"] for r in rows) else 1)
    if args.what == "tf32" and not str(args.device).startswith("cuda"):  # named by the user: refused before torch
        raise SystemExit(TF32_NEEDS_CUDA)
    if getattr(args, "device", "") is None:
        args.device = default_device()
    from .batches import bench_data
    from .evaluation import bench_metrics
    from .seeds import compare_compiled, compare_precisions
    from .steps import bench_compiled, bench_model, bench_steps, select_cases, sync
    from .terms import bench_terms

    if args.what == "steps":
        if args.precision:  # the same refusals as a training run (16-mixed off CUDA names bf16-mixed)
            from ..errors import ConfigError
            from ..foundation.precision import resolve_precision

            try:
                resolve_precision(args.precision, args.device)
            except ConfigError as exc:
                parser.error(str(exc))
        if args.compile:
            if args.exact:
                try:
                    select_cases(args.only, exact=True)
                except ValueError as exc:
                    parser.error(f"--only: {exc}")
            on_row = None
            if args.json is not None:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text("")

                def on_row(row, path=args.json):
                    with open(path, "a") as out:
                        out.write(json.dumps(row) + "\n")
            bench_compiled(args.device, args.repeats, args.batch_size, args.only, args.precision, args.resolution,
                           args.override, on_row, args.exact)
        else:
            bench_steps(args.device, args.repeats, args.batch_size, args.only, args.precision)
    elif args.what == "terms":
        bench_terms(args.n, args.d, args.repeats, args.device)
    elif args.what == "data":
        bench_data(args.n, args.batch_sizes, args.repeats, args.device)
    elif args.what == "metrics":
        ok = bench_metrics(args.n, args.latents, args.repeats, args.device, args.continuous, args.seed)
        raise SystemExit(0 if ok else 1)
    elif args.what == "tf32":
        from .tf32 import bench_tf32

        bench_tf32(bench_model, sync, args.device, args.batch_size, args.repeats, args.only)
    elif args.what == "precision":
        compare = compare_compiled if args.compile else compare_precisions
        raise SystemExit(0 if compare(args.out, args.models, args.seeds, args.overrides) else 1)
