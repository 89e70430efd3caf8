"""No test can hang CI (issue 30 item 6): pyproject sets a global per-test timeout, and a test stopped by it leaves
none of the processes it spawned running (tests/process_cleanup.py). Checked on a deliberately hanging test."""
import os
import subprocess
import sys
import time
from pathlib import Path

import tomllib
from conftest import ROOT

HANGING = '''
import os, subprocess, sys

def test_hangs_on_a_child_in_its_own_session():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(os.environ["CHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    child.wait()  # blocks until the timeout
'''


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_global_timeout_is_configured():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 60 <= int(options["timeout"]) <= 600


def test_a_hanging_test_fails_in_bounded_time_and_its_processes_are_killed(tmp_path):
    (tmp_path / "test_hang.py").write_text(HANGING)
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "CHILD_PID_FILE": str(pid_file), "PYTHONPATH": str(ROOT / "tests")}
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "process_cleanup", "-p", "no:cacheprovider",
                          "-o", "timeout=3", str(tmp_path / "test_hang.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - start
    assert res.returncode == 1 and "Timeout (>3.0s)" in res.stdout, res.stdout[-2000:]
    assert "killed 1 spawned process(es)" in res.stdout, res.stdout[-2000:]
    assert elapsed < 60
    child = int(pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    assert not alive(child), f"the hanging test's child {child} still runs"
