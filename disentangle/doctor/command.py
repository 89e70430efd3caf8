"""The command ``python -m disentangle.doctor``: its options, the plan (what runs here, what is skipped and why),
the checks in order with a progress bar, the tables and the JSON report."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .common import quiet
from .concurrency import CONCURRENCY_RUNS, measure_concurrency
from .ddp import run_ddp_check
from .devices import describe_devices
from .families import family_name, run_family
from .tables import print_report
from .timing import COMPILE_TIMING_CASES, CPU_TIMING_CASES, time_cases

PRECISIONS = ("32-true", "bf16-mixed")

# --quick: one family of each kind (latent quantizer, adversary, labelled stream, encoder-only, GAN)
QUICK_FAMILIES = ("qlae", "factorvae", "dvae_friede_masked", "cliff2d", "infowgan_gp")


class DoctorError(ValueError):
    """A bad option: the doctor stops in one line before any work."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        raise DoctorError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m disentangle.doctor",
                     description="Check this machine's accelerators: devices and precisions, every model family a few "
                                 "steps in fp32 and bf16 (finite losses; on a GPU, the same metrics as on the CPU), "
                                 "the paper configurations' steps, concurrent runs per GPU, DDP. Prints tables, "
                                 "writes JSON, names what it skipped.")
    parser.add_argument("--json", type=Path, default=Path("outputs/doctor.json"), help="where the report goes")
    parser.add_argument("--quick", action="store_true",
                        help=f"fewer families ({', '.join(QUICK_FAMILIES)}), 2 steps, QLAE's timing only, "
                             f"concurrency 1, 2, 4")
    parser.add_argument("--families", nargs="+", metavar="NAME",
                        help="only these families, by their representative's name (default: every one)")
    parser.add_argument("--accelerators", nargs="+", choices=("cpu", "cuda"),
                        help="where the families train (default: the CPU, and CUDA when present)")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS,
                        help="trainer.precision values (default: both)")
    parser.add_argument("--steps", type=int, help="training steps per family run (default 4; --quick 2)")
    parser.add_argument("--skip-timing", action="store_true", help="no timing of the paper configurations")
    parser.add_argument("--skip-families", action="store_true", help="no family runs (e.g. concurrency alone)")
    parser.add_argument("--skip-concurrency", action="store_true", help="no concurrent runs per GPU")
    parser.add_argument("--timing-cases", nargs="+", metavar="LABEL",
                        help="bench step labels to time, or 'all' (default: all on CUDA; "
                             f"{', '.join(CPU_TIMING_CASES)} on a CPU)")
    parser.add_argument("--compile-cases", nargs="*", metavar="LABEL", default=None,
                        help=f"timed cases also timed compiled (default: {', '.join(COMPILE_TIMING_CASES)}, "
                             f"QLAE's alone with --quick; none given: no compiled timing)")
    parser.add_argument("--timing-repeats", type=int, help="timed steps per case (default 10 on CUDA, 3 on a CPU)")
    parser.add_argument("--concurrency-runs", type=int, nargs="+", metavar="K",
                        help=f"concurrent runs to measure (default {' '.join(map(str, CONCURRENCY_RUNS))})")
    parser.add_argument("--concurrency-steps", type=int, default=None,
                        help="timed steps per concurrent run (default 200; --quick 50)")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary directory)")
    parser.add_argument("--concurrency-device", choices=("cpu", "cuda"),
                        help="measure concurrent runs on this device (default: CUDA when present, else skipped; "
                             "cpu measures CPU processes, as the tests do)")
    parser.add_argument("--concurrency-batch-size", type=int, default=64,
                        help="batch size of the concurrent runs (default 64)")
    parser.add_argument("--concurrency-resolution", type=int, default=64,
                        help="image side of the concurrent runs (default 64)")
    parser.add_argument("--concurrency-override", action="append", default=[], metavar="OVERRIDE",
                        help="a training override for the concurrent runs' model (repeatable), e.g. model/arch=small")
    return parser


def _check_options(args, cuda: bool) -> None:
    from ..bench import STEP_CASES
    from ..runtime.families import FAMILIES

    names = [family_name(c) for c in FAMILIES.values()]
    unknown = [n for n in args.families or () if n not in names]
    if unknown:
        raise DoctorError(f"--families {unknown[0]}: not a family; choose from {', '.join(names)}")
    labels = [label for label, _ in STEP_CASES]
    unknown = [c for c in args.timing_cases or () if c not in labels and c != "all"]
    if unknown:
        raise DoctorError(f"--timing-cases {unknown[0]!r}: not a bench step label; choose from 'all' or "
                          f"{', '.join(repr(label) for label in labels)}")
    unknown = [c for c in args.compile_cases or () if c not in labels]
    if unknown:
        raise DoctorError(f"--compile-cases {unknown[0]!r}: not a bench step label; choose from "
                          f"{', '.join(repr(label) for label in labels)}")
    if "cuda" in (args.accelerators or ()) and not cuda:
        raise DoctorError("--accelerators cuda: no CUDA device here (torch.cuda.is_available() is False)")
    for option in ("steps", "timing_repeats", "concurrency_steps", "concurrency_batch_size"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise DoctorError(f"--{option.replace('_', '-')} must be >= 1 (got {value})")
    if any(k < 1 for k in args.concurrency_runs or ()):
        raise DoctorError(f"--concurrency-runs must all be >= 1 (got {args.concurrency_runs})")


def _jsonable(value):
    """Non-finite floats as strings ("nan", "inf"): the JSON stays standard and a NaN loss stays visible."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class _Bar:
    """The progress bar's one task: calling it marks the previous unit of work done and names the next."""

    def __init__(self, progress, total: int):
        self.progress, self.task, self.open = progress, progress.add_task("doctor", total=total), False

    def __call__(self, description: str) -> None:
        self.done()
        self.open = True
        self.progress.update(self.task, description=description)

    def done(self) -> None:
        if self.open:
            self.progress.advance(self.task)
        self.open = False


def _timing_plan(args, cuda: bool, labels: list[str]) -> tuple[list[str], str | None]:
    """(the bench labels to time, why the others are not) from the options."""
    if args.skip_timing:
        return [], None
    if args.timing_cases and "all" not in args.timing_cases:
        timed, why = [label for label in labels if label in args.timing_cases], "not selected (--timing-cases)"
    elif args.timing_cases or (cuda and not args.quick):
        timed, why = list(labels), None
    elif args.quick:
        timed, why = ["qlae"], "--quick"
    else:
        timed, why = [label for label in labels if label in CPU_TIMING_CASES], "seconds to minutes per step on a CPU"
    if "qlae" not in timed:  # the baseline of the ratios
        timed.insert(0, "qlae")
    return timed, why


def _doctor(args, progress) -> dict:
    import torch

    from ..bench import STEP_CASES
    from ..runtime.families import FAMILIES
    from ..foundation.precision import cuda_bf16_native

    cuda = torch.cuda.is_available()
    n_gpus = torch.cuda.device_count() if cuda else 0
    _check_options(args, cuda)
    cuda_bf16 = cuda and cuda_bf16_native()  # emulated bf16 is not run (foundation.precision.resolve_precision refuses it)
    steps = args.steps or (2 if args.quick else 4)
    report: dict = {"started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                    "command": ["python", "-m", "disentangle.doctor", *args.argv],
                    "python": platform.python_version(), "torch": torch.__version__, "skipped": []}

    def skip(check: str, reason: str) -> None:
        report["skipped"].append({"check": check, "reason": reason})

    report["devices"] = describe_devices()

    # the plan first, so the progress bar knows its length and the skipped list is complete
    accelerators = args.accelerators or (["cpu", "cuda"] if cuda else ["cpu"])
    if not cuda:
        skip("families on CUDA", "no CUDA device: the accelerator here is the CPU")
        skip("GPU vs CPU evaluation of the same weights", "no GPU: the CPU is the only device")
    names = [family_name(c) for c in FAMILIES.values()]
    chosen = [] if args.skip_families else args.families or (QUICK_FAMILIES if args.quick else names)
    families = [(f, c) for f, c in FAMILIES.items() if family_name(c) in chosen]
    left_out = [n for n in names if n not in chosen]
    if args.skip_families:
        skip("family runs", "--skip-families")
    elif left_out:
        skip(f"{len(left_out)} families not selected", f"{', '.join(left_out)} (--families/--quick)")
    runs = []
    for accelerator in accelerators:
        for precision in args.precisions:
            if accelerator == "cuda" and precision == "bf16-mixed" and not cuda_bf16:
                skip("families on CUDA in bf16-mixed", f"{torch.cuda.get_device_name()} has no bf16")
            else:
                runs += [(f, c, accelerator, precision) for f, c in families]
    timing_device = "cuda" if cuda else "cpu"
    labels = [label for label, _ in STEP_CASES]
    timed, why = _timing_plan(args, cuda, labels)
    if args.skip_timing:
        skip("timing of the paper configurations", "--skip-timing")
    elif len(timed) < len(labels):
        skip(f"timing of {len(labels) - len(timed)} more paper configurations",
             f"{why}; --timing-cases all times them")
    timing_precisions = [p for p in args.precisions if not (p == "bf16-mixed" and timing_device == "cuda"
                                                            and not cuda_bf16)]
    wanted = args.compile_cases if args.compile_cases is not None else (
        COMPILE_TIMING_CASES[:1] if args.quick else COMPILE_TIMING_CASES)
    compiled = [label for label in timed if label in wanted]
    if not compiled and timed:
        skip("compiled timing (trainer.compile)", "no timed case selected for it (--compile-cases)")
    concurrency_device = None if args.skip_concurrency else args.concurrency_device or ("cuda" if cuda else None)
    levels = args.concurrency_runs or ((1, 2, 4) if args.quick else CONCURRENCY_RUNS)
    if args.skip_concurrency:
        skip("concurrent runs on one GPU (runs_per_gpu)", "--skip-concurrency")
    elif concurrency_device is None:
        skip("concurrent runs on one GPU (runs_per_gpu)", "no CUDA device")
    if n_gpus < 2:
        skip("2-process DDP", f"needs 2 or more GPUs ({n_gpus} visible)")
    bar = _Bar(progress, len(runs) + (len(timed) + len(compiled)) * len(timing_precisions)
               + (len(levels) if concurrency_device else 0) + (n_gpus >= 2))

    workdir_context = contextlib.nullcontext(args.workdir) if args.workdir else \
        tempfile.TemporaryDirectory(prefix="disentangle-doctor-")
    with workdir_context as workdir:
        workdir = Path(workdir).resolve()  # the runs it starts may work in ROOT
        report["families"] = []
        for family, choice, accelerator, precision in runs:
            bar(f"{family_name(choice)} on {accelerator}, {precision}")
            record = run_family(family, choice, accelerator, precision, steps, workdir,
                                compare_on="cpu" if accelerator == "cuda" else None)
            report["families"].append(record)
            if record["status"] != "ok":
                problem = record["error"] or record.get("cpu_check", {}).get("error")
                progress.console.print(f"[red]FAIL[/red] {record['family']} on {accelerator}, {precision}: {problem}")

        report["timing"] = {"status": "skipped", "reason": "--skip-timing"}
        if timed:
            repeats = args.timing_repeats or (10 if timing_device == "cuda" else 3)
            warmup = 3 if timing_device == "cuda" else 1
            # each case sets TF32 as its runs would (tf32=auto: off with a Hessian penalty; bench.StepTimer)
            cases = time_cases(timed, timing_device, timing_precisions, 64, repeats, warmup, progress=bar,
                               compiled=compiled)
            report["timing"] = {"status": "fail" if any(c["status"] != "ok" for c in cases) else "ok",
                                "device": timing_device, "batch_size": 64, "resolution": 64, "repeats": repeats,
                                "warmup": warmup, "cases": cases}
            if timing_device == "cuda":
                report["timing"]["tf32"] = "auto (per case: off for the Hessian penalties)"

        if concurrency_device:
            # what a sweep there would train in: bf16-mixed on a GPU that has it (trainer.precision=auto)
            precision = "bf16-mixed" if concurrency_device == "cuda" and cuda_bf16 else "32-true"
            report["concurrency"] = measure_concurrency(
                concurrency_device, levels, args.concurrency_steps or (50 if args.quick else 200),
                args.concurrency_batch_size, precision, resolution=args.concurrency_resolution,
                workdir=workdir / "concurrency", progress=bar, overrides=args.concurrency_override,
                on_level=lambda so_far: _write_json(args.json, {"partial": True, "concurrency": so_far}))
        else:
            report["concurrency"] = {"status": "skipped",
                                     "reason": "--skip-concurrency" if args.skip_concurrency else "no CUDA device"}

        if n_gpus >= 2:
            bar("2-process DDP on the GPUs")
            with quiet():
                report["ddp"] = run_ddp_check("gpu", workdir, steps)
        else:
            report["ddp"] = {"status": "skipped", "reason": f"needs 2 or more GPUs ({n_gpus} visible)"}
        bar.done()
        progress.update(bar.task, description="done")
        report["workdir"] = str(workdir) if args.workdir else None  # a temporary one is removed
    failures = [f"{r['family']} ({r['accelerator']}, {r['precision']})" for r in report["families"]
                if r["status"] != "ok"]
    failures += [name for name in ("timing", "concurrency", "ddp") if report[name].get("status") == "fail"]
    report["failures"], report["ok"] = failures, not failures
    return report


def _write_json(path: Path, report: dict) -> None:
    """The report as JSON (also a partial one, while the concurrency levels run: a caller that stops the doctor at a
    time limit keeps the levels measured so far)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(report), indent=2, allow_nan=False) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """The command: run the checks, print the tables, write the JSON report; 0 when every check that ran passed,
    1 when one failed, 2 for a bad option (one line on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        args.argv = argv
        console = Console()
        start = time.perf_counter()
        columns = (TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            report = _doctor(args, progress)
    except DoctorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["wall_seconds"] = time.perf_counter() - start
    print_report(report, console)
    _write_json(args.json, report)
    console.print(f"report: {args.json.resolve()}\nwall time: {report['wall_seconds']:.0f} s", highlight=False)
    return 0 if report["ok"] else 1
