"""``python -m disentangle.bench errors``: seconds from the command line to a mistake's one-line error (and to each
command's ``--help``), each case a fresh interpreter, median over repeats. A mistake should cost about a second:
the checks run on the composed config before torch and Lightning are imported (docs/runs.md)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

# (label, arguments after `python -m`, expected exit status: 2 for a mistake, 0 for --help)
CASES: list[tuple[str, list[str], int]] = [
    ("evaluate without ckpt=", ["disentangle.evaluate"], 2),
    ("evaluate: no such ckpt file", ["disentangle.evaluate", "ckpt=missing/last.ckpt"], 2),
    ("train: negative lr", ["disentangle.train", "model=qlae", "model.optimizer.lr=-1"], 2),
    ("train: batch size 0", ["disentangle.train", "model=qlae", "model.batch_size=0"], 2),
    ("train: 16-mixed on a CPU", ["disentangle.train", "model=qlae", "trainer.accelerator=cpu",
                                  "trainer.precision=16-mixed"], 2),
    ("train: unprepared dataset", ["disentangle.train", "model=qlae", "data=shapes3d"], 2),
    *[(f"{name} --help", [f"disentangle.{name}", "--help"], 0)
      for name in ("train", "evaluate", "prepare", "report", "select", "bench", "doctor", "chaos", "claims",
                   "gpu_check")],
]


def time_case(args: list[str], cwd: str, env: dict) -> tuple[float, int, str]:
    """One fresh interpreter running ``python -m ARGS``: (seconds, exit status, last line of its output)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *args], check=False, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return seconds, done.returncode, lines[-1] if lines else ""


def bench_errors(repeats: int = 5, only: list[str] | None = None) -> list[dict]:
    """Each case's median seconds over ``repeats`` fresh runs (in an empty directory, with an empty data root, so
    nothing is written where it runs and no dataset is prepared)."""
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        env = {**os.environ, "DISENTANGLE_DATA": os.path.join(cwd, "data"), "PYTHONWARNINGS": "ignore"}
        for label, args, expected in CASES:
            if only and not any(o in label for o in only):
                continue
            times, codes, last = [], set(), ""
            for _ in range(repeats):
                seconds, code, last = time_case(args, cwd, env)
                times.append(seconds)
                codes.add(code)
            rows.append({"case": label, "median_s": statistics.median(times), "min_s": min(times),
                         "exit": sorted(codes), "ok": codes == {expected}, "last_line": last[:160]})
            print(f"{label:32s} {rows[-1]['median_s']:6.2f} s  exit {sorted(codes)}  {last[:90]}", flush=True)
    return rows
