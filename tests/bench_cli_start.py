"""What a tiny training run through the command line costs the suite: in a fresh interpreter (what ``run_cli`` and
the other subprocess tests do today) against forked from a process that has already imported torch, Lightning and
the package (multiprocessing's forkserver with those modules preloaded; the server never runs a torch op, so no
thread pool is forked). A benchmark, not a test: ``.venv/bin/python tests/bench_cli_start.py [--repeats N]``.

It prints each way's median wall time and the CPU time of the fresh interpreters, with this machine's CPU model."""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
PRELOAD = ["torch", "pytorch_lightning", "disentangle.runtime.run", "disentangle.train"]


def _forked_train(argv: list[str], log: str) -> None:
    """``python -m disentangle.train ARGV`` in this forked process: its output to ``log``, its exit code as the
    interpreter's."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = ["disentangle.train", *argv]
    code = 0
    try:
        runpy.run_module("disentangle.train", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    from conftest import FAST  # the suite's tiny-run settings

    from disentangle.foundation.provenance import machine

    args = [*FAST, "model=ae", "data=shapes2d"]
    mp.set_start_method("forkserver")
    mp.set_forkserver_preload(PRELOAD)
    fresh_wall, fresh_cpu, forked_wall = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        warm = mp.Process(target=_forked_train, args=([*args, f"hydra.run.dir={tmp}/warm"], f"{tmp}/warm.log"))
        warm.start()  # starts the server and its imports: not timed
        warm.join()
        for i in range(repeats):
            cpu, start = _children_cpu(), time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "disentangle.train", *args, f"hydra.run.dir={tmp}/fresh{i}"],
                                  capture_output=True, check=False, cwd=HERE.parent)
            fresh_wall.append(time.perf_counter() - start)
            fresh_cpu.append(_children_cpu() - cpu)
            assert done.returncode == 0, done.stderr[-2000:]
            start = time.perf_counter()
            child = mp.Process(target=_forked_train, args=([*args, f"hydra.run.dir={tmp}/forked{i}"],
                                                            f"{tmp}/forked{i}.log"))
            child.start()
            child.join()
            forked_wall.append(time.perf_counter() - start)
            assert child.exitcode == 0, Path(f"{tmp}/forked{i}.log").read_text()[-2000:]
    where = machine()
    print(f"a tiny run through the command line ({where['cpu']}, {where['vector_isa'] or 'no known vector ISA'}, "
          f"{where['cpu_count']} cores), median of {repeats}:")
    print(f"  fresh interpreter: {statistics.median(fresh_wall):.1f} s wall, {statistics.median(fresh_cpu):.1f} s CPU")
    print(f"  forked from a preloaded server: {statistics.median(forked_wall):.1f} s wall")


if __name__ == "__main__":
    main()
