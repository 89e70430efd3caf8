"""One of the doctor's k concurrent runs: ``python -m disentangle.doctor.worker --device cuda --case qlae --steps N``.

Started by :func:`disentangle.doctor.concurrency.measure_concurrency`, not by hand. It builds the paper case's
model (:class:`disentangle.bench.StepTimer`: the step ``python -m disentangle.bench steps`` times, TF32 set as a run
of that model sets it), trains ``--warmup`` steps, prints ``ready``, waits for a line on stdin (so that all k runs
start timing at once), trains ``--steps`` steps and prints one JSON line: ``{"start": ..., "end": ..., "steps": ...}``
(wall-clock seconds since the epoch; steps counts iterations, a GAN's ``n_critic`` per period).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from .concurrency import CONCURRENCY_CASE


def parser() -> argparse.ArgumentParser:
    """The worker's options."""
    p = argparse.ArgumentParser(prog="python -m disentangle.doctor.worker",
                                description="One of the doctor's concurrent runs (started by the doctor).")
    p.add_argument("--device", default="cuda", help="torch device (default cuda)")
    p.add_argument("--case", default=CONCURRENCY_CASE, help=f"bench step label (default {CONCURRENCY_CASE})")
    p.add_argument("--steps", type=int, default=200, help="timed steps (default 200)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--resolution", type=int, default=64, help="image side (default 64)")
    p.add_argument("--precision", default="32-true", help="trainer.precision of the steps (default 32-true)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--override", action="append", default=[], help="a training override (repeatable)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Warm up, say ``ready``, wait for ``go``, time the steps, print the JSON line; 0."""
    from ..bench import STEP_CASES, StepTimer

    args = parser().parse_args(argv)
    cases = dict(STEP_CASES)
    if args.case not in cases:
        parser().error(f"--case {args.case!r}: not a bench step label")
    timer = StepTimer([*cases[args.case], *args.override], args.device, args.batch_size, args.precision,
                      args.resolution)
    if args.warmup:
        timer.run(args.warmup)
    print("ready", flush=True)
    sys.stdin.readline()  # every run starts timing at once
    start = time.time()
    timer.run(args.steps)
    end = time.time()
    print(json.dumps({"start": start, "end": end, "steps": args.steps * timer.period}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
