"""The package's command lines for the tests, forked from a process that has already imported them.

A tiny training run through ``python -m disentangle.train`` costs about 9 s of CPU importing torch, Lightning and the
package before 1-2 s of work (``tests/bench_cli_start.py``), and the suite is bound by the CPU (docs/install.md,
"Running the tests"). So each xdist worker keeps one *preloaded* interpreter (this file run with ``--serve``): it
imports :data:`PRELOAD`, runs no torch operation (no thread pool exists to be forked) and then, per request, forks a
child that becomes the command: the request's working directory, environment and argv, stdin from /dev/null, stdout
and stderr into files, ``runpy.run_module(module, run_name="__main__")`` as ``python -m`` does, then the interpreter's
own exit steps (non-daemon threads joined, atexit handlers run) and the exit code (an uncaught exception prints its
traceback and exits 1, as the interpreter does). The child is a real process of its own: it can be killed, it starts
DDP ranks, launchers and DataLoader workers as a fresh interpreter would.

What a fork cannot reproduce is interpreter start-up itself: environment variables read while importing (a
``PYTHONPATH``, a thread count, torch's inductor settings) and warnings printed by imports. :func:`run` and
:func:`start` therefore fork only when the caller adds nothing to the environment, and the tests whose subject is
start-up (refusals before the imports, no warnings, moved modules, the wheel) start fresh interpreters themselves.
A documented command (``tests/test_doc_commands.py``) that is a plain ``python -m disentangle.X ...`` line is forked
with its page's environment, which differs only in variables read at run time (:func:`import_safe`). ``DISENTANGLE_TEST_FORK=0`` turns forking off for a whole run.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# what the preloaded interpreter imports: the package's own launcher's list
from disentangle.runtime.launch import PRELOAD, exit_steps, run_as_main

ROOT = Path(__file__).resolve().parents[1]
ENABLED = os.environ.get("DISENTANGLE_TEST_FORK", "1") != "0"
# variables read when used, never while importing: a child may have them differ from the preloaded interpreter's
# (the venv first on PATH, W&B offline, pytest's and Hydra's own left out)
RUNTIME_VARIABLES = frozenset({"PATH", "WANDB_MODE"})
RUNTIME_PREFIXES = ("PYTEST_", "HYDRA_")


# ----------------------------------------------------------------------------------------------------- the server
def _become(request: dict) -> None:
    """In the forked child: turn into ``python -m MODULE ARGV`` and exit with its code (never returns)."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        code = run_as_main(request["module"], request["argv"], request["cwd"])
        exit_steps()   # as the interpreter ends: threading's shutdown, then the atexit handlers
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def serve() -> None:
    """The preloaded interpreter: requests as JSON lines on stdin; replies ``{"pid"}`` when a child starts and
    ``{"exit": pid, "code"}`` when it ends (a signal as its negative number, as :class:`subprocess.Popen` says)."""
    import importlib
    import threading

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise RuntimeError(f"the preloaded interpreter has threads after its imports: {threading.enumerate()}")
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    stdin = sys.stdin.fileno()
    buffer = b""
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.02)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:        # the worker closed the pipe: its session ended
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _become(request)
                children.add(pid)
                out.write(json.dumps({"pid": pid}) + "\n")
                out.flush()
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                out.write(json.dumps({"exit": pid, "code": code}) + "\n")
                out.flush()


# ----------------------------------------------------------------------------------------------------- the client
class _Server:
    """This worker's preloaded interpreter (started on first use, again if it died)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.exits: dict[int, int] = {}
        self.buffer = b""
        self.folder: Path | None = None   # the children's stdout/stderr files, removed with the server

    def files(self) -> Path:
        """A new folder for one child's output files, inside this worker's folder of them."""
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="forked-cli-"))
        return Path(tempfile.mkdtemp(dir=self.folder))

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.exits.clear()
            self.buffer = b""
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"], cwd=ROOT,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
            reply = self._reply(timeout=300)
            if reply is None or "ready" not in reply:
                raise RuntimeError(f"the preloaded interpreter did not start (got {reply!r})")
        return self.proc

    def _reply(self, timeout: float) -> dict | None:
        """The next reply line (exit notices are recorded and skipped unless nothing else comes)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                reply = json.loads(line)
                if "exit" in reply:
                    self.exits[reply["exit"]] = reply["code"]
                    continue
                return reply
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], min(max(left, 0.0), 0.05))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.buffer += chunk
            elif left <= 0:
                return None

    def start(self, module: str, argv: list[str], cwd: Path, stdout: str, stderr: str,
              environ: dict | None = None) -> int:
        proc = self._ensure()
        request = {"module": module, "argv": list(argv), "cwd": str(cwd),
                   "env": dict(os.environ if environ is None else environ),
                   "stdout": stdout, "stderr": stderr}
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        reply = self._reply(timeout=60)
        if reply is None or "pid" not in reply:
            raise RuntimeError(f"the preloaded interpreter did not fork (got {reply!r})")
        return reply["pid"]

    def poll(self, pid: int) -> int | None:
        if pid not in self.exits:
            self._reply(timeout=0)
        if pid not in self.exits and (self.proc is None or self.proc.poll() is not None):
            self.exits[pid] = -signal.SIGKILL   # the server died (killed with its children)
        return self.exits.get(pid)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


_SERVER = _Server()
atexit.register(_SERVER.close)


class ForkedProcess:
    """What the tests use of :class:`subprocess.Popen` (pid, poll, wait, send_signal, kill, returncode, and stderr
    as a readable file), for a command forked from the preloaded interpreter."""

    def __init__(self, module: str, argv: list[str], cwd: Path = ROOT, capture_stdout: bool = True,
                 environ: dict | None = None) -> None:
        self.args = [sys.executable, "-m", module, *argv]
        folder = _SERVER.files()
        self._out = folder / "stdout"
        self._err = folder / "stderr"
        self._out.touch()
        self._err.touch()
        self.pid = _SERVER.start(module, argv, cwd, str(self._out) if capture_stdout else os.devnull, str(self._err),
                                 environ)
        self.returncode: int | None = None
        self.stderr = open(self._err, encoding="utf-8", errors="replace")   # noqa: SIM115 (closed in output())

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = _SERVER.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        self.stderr.close()
        read = lambda path: path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        out, err = read(self._out), read(self._err)
        for path in (self._out, self._err):
            path.unlink(missing_ok=True)
        self._out.parent.rmdir()
        return out, err


def import_safe(environ: dict) -> bool:
    """True when ``environ`` differs from this process's environment only in :data:`RUNTIME_VARIABLES` and in
    pytest's and Hydra's variables: a child forked with it behaves as a fresh interpreter started with it."""
    keys = set(environ) | set(os.environ)
    return all(environ.get(k) == os.environ.get(k) for k in keys
               if k not in RUNTIME_VARIABLES and not k.startswith(RUNTIME_PREFIXES))


def run(module: str, *argv: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 600,
        environ: dict | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, MODULE, *ARGV], capture_output=True, text=True)``, forked when ``env`` adds
    nothing (module doc), a fresh interpreter otherwise. ``environ`` replaces the whole environment instead; it is
    forked when :func:`import_safe`."""
    if env or not ENABLED or (environ is not None and not import_safe(environ)):
        full_env = {**os.environ, **(env or {})} if environ is None else environ
        return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=full_env, check=False)
    proc = ForkedProcess(module, list(argv), cwd, environ=environ)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
        out, err = proc.output()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    out, err = proc.output()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start(module: str, *argv: str, cwd: Path = ROOT) -> ForkedProcess | subprocess.Popen:
    """A running ``python -m MODULE ARGV`` (stdout discarded, stderr readable), for tests that kill it."""
    if not ENABLED:
        return subprocess.Popen([sys.executable, "-m", module, *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    return ForkedProcess(module, list(argv), cwd, capture_stdout=False)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    del sys.path[0]   # this file's folder: the children put their own working directory first, as `python -m` does
    serve()
