"""Where the suite's CPU goes: each test's wall time and the CPU seconds it cost, its own process's and those of every
process it started (issue 42: the suite is bound by the CPU of a 2-core machine, and the wall time of a test run
beside others says little about what it costs).

On only when ``DISENTANGLE_TEST_CPU=DIR`` is set (loaded from tests/conftest.py): each worker appends one JSON line
per test to ``DIR/<worker>.jsonl``. ``python tests/cpu_budget.py DIR`` then prints the CPU per file and the costliest
tests. A test's CPU is its worker's own (``RUSAGE_SELF``), the children its worker reaped (``RUSAGE_CHILDREN``: a
subprocess that ran to its end), and the change in every live descendant's own and reaped CPU (``/proc``: the fork
server of tests/forked_cli.py and what it forked, a training run still running). A daemon that left the process tree
(wandb's service) is not counted; the machine's total at the end says how much that missed.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

VARIABLE = "DISENTANGLE_TEST_CPU"
TICK = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(root: int) -> dict[int, float]:
    """CPU seconds (own + reaped children) of every live descendant of ``root``, by pid."""
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(f) for f in fields[11:15]) / TICK  # utime, stime, cutime, cstime
    out = {}
    for pid, seconds in cpu.items():
        up, seen = parent.get(pid), 0
        while up and up != root and seen < 64:
            up, seen = parent.get(up), seen + 1
        if up == root:
            out[pid] = seconds
    return out


def _own() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK


class CpuBudget:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.file = open(directory / f"{worker}.jsonl", "a", buffering=1)  # noqa: SIM115 (open for the session)
        self.start_busy, self.start_wall = _machine_busy(), time.time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        me = os.getpid()
        wall, (own, kids), live = time.perf_counter(), _own(), _descendants_cpu(me)
        yield
        wall = time.perf_counter() - wall
        own_after, kids_after = _own()
        live_after = _descendants_cpu(me)
        descendants = sum(s - live.get(pid, 0.0) for pid, s in live_after.items())
        cpu = (own_after - own) + (kids_after - kids) + max(0.0, descendants)
        self.file.write(json.dumps({"test": item.nodeid, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                    "own_s": round(own_after - own, 3)}) + "\n")

    def pytest_sessionfinish(self, session):
        self.file.write(json.dumps({"machine_busy_s": round(_machine_busy() - self.start_busy, 1),
                                    "wall_s": round(time.time() - self.start_wall, 1)}) + "\n")
        self.file.close()


def pytest_configure(config):
    directory = os.environ.get(VARIABLE)
    if directory:
        config.pluginmanager.register(CpuBudget(Path(directory)), "cpu_budget_recorder")


def summary(directory: Path, top: int = 40) -> str:
    tests, machine = [], []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            (tests if "test" in row else machine).append(row)
    by_file: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for row in tests:
        entry = by_file[row["test"].split("::")[0]]
        entry[0] += 1
        entry[1] += row["wall_s"]
        entry[2] += row["cpu_s"]
    total_cpu = sum(r["cpu_s"] for r in tests)
    lines = [f"{len(tests)} tests, {total_cpu:.0f} CPU-s counted"
             + (f"; the machine was busy {max(m['machine_busy_s'] for m in machine):.0f} CPU-s over "
                f"{max(m['wall_s'] for m in machine):.0f} s (every worker's figure is the whole machine's)"
                if machine else ""), "", f"{'file':<44} {'tests':>5} {'wall s':>8} {'CPU s':>8} {'share':>6}"]
    for name, (n, wall, cpu) in sorted(by_file.items(), key=lambda kv: -kv[1][2]):
        lines.append(f"{name:<44} {n:>5} {wall:>8.0f} {cpu:>8.0f} {cpu / total_cpu:>6.1%}")
    lines += ["", f"the {top} costliest tests (CPU s, wall s):"]
    for row in sorted(tests, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"{row['cpu_s']:8.1f} {row['wall_s']:8.1f}  {row['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3])))
