"""A pytest plugin (loaded by conftest.py): when a test fails on pytest-timeout's limit, every process it spawned
(children, grandchildren, new sessions included: DDP workers, joblib workers, subprocess CLIs) is killed, so a hung
test leaves nothing running behind it."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc; empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(pid: int | None = None) -> list[int]:
    """SIGKILL every descendant of ``pid`` (this process by default); returns their pids."""
    victims = descendants(os.getpid() if pid is None else pid)
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except OSError:
            pass
    return victims


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "Timeout (>" in str(report.longrepr):
        killed = kill_descendants()
        if killed:
            report.sections.append(("process cleanup", f"killed {len(killed)} spawned process(es): {killed}"))
