"""The package's own commands started from a preloaded interpreter, for the commands that start many of them.

``python -m disentangle.train`` spends about 9 s of CPU importing torch, Lightning's compiler stack and scipy before
its first step (``tests/bench_cli_start.py``): a cost the claims pay per run (175 runs: about 26 CPU-minutes). So
:func:`run_module` forks the command from one *fork server* (the standard library's ``forkserver``) that has
imported :data:`PRELOAD` once and run no torch operation (no thread pool to be forked). The child becomes the
command as ``python -m`` would run it: its working directory, environment and argv, stdout and stderr into a log,
``runpy.run_module(..., run_name="__main__")``, then the interpreter's exit steps (threading's shutdown, atexit
handlers run). It is a real process of its own: it can be killed, and it starts DDP ranks, launchers and
DataLoader workers as a fresh interpreter does.

What a fork cannot change is what was read while importing. The thread count is set explicitly in the child
(``threads``, as ``OMP_NUM_THREADS`` would), so its numbers are a fresh interpreter's; any other difference between
the caller's environment and the command's starts a fresh interpreter instead (:func:`forkable`), as does
``DISENTANGLE_FORK=0`` or a platform without ``forkserver``.
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# the heavy imports below Lightning, not Lightning itself: Lightning decides while importing whether its log records
# go to a handler of its own or to the root logger that Hydra configures in a real run, so the child imports it
PRELOAD = ("torch", "torch._dynamo", "torch._inductor.config", "torch.distributed", "torchmetrics", "scipy.signal",
           "scipy.stats", "sklearn.linear_model", "sklearn.ensemble", "matplotlib", "hydra", "omegaconf", "hydra.utils")
# variables read when used, never while importing: a command may set them differently from its caller and still fork
RUNTIME_VARIABLES = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "PATH", "WANDB_MODE", "PYTHONUNBUFFERED"})
RUNTIME_PREFIXES = ("PYTEST_", "HYDRA_")


def enabled() -> bool:
    return os.environ.get("DISENTANGLE_FORK", "1") != "0" and "forkserver" in multiprocessing.get_all_start_methods()


def forkable(env: Mapping[str, str]) -> bool:
    """True when ``env`` differs from the environment the fork server imported under (this process's, before the
    server starts) only in variables read at run time: a child forked with it behaves as a fresh interpreter
    started with it."""
    server = _SERVER_ENV if _SERVER_ENV is not None else dict(os.environ)
    keys = set(env) | set(server)
    return all(env.get(k) == server.get(k) for k in keys
               if k not in RUNTIME_VARIABLES and not k.startswith(RUNTIME_PREFIXES))


_CONTEXT = None
_SERVER_ENV: dict | None = None   # the environment the fork server was started with (it inherits it)


def _context():
    global _CONTEXT, _SERVER_ENV
    if _CONTEXT is None:
        _SERVER_ENV = dict(os.environ)
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(list(PRELOAD))
    return _CONTEXT


def run_as_main(module: str, argv: Sequence[str], cwd: str) -> int:
    """Run ``python -m MODULE ARGV`` in this (forked) process, as the interpreter would from ``cwd``: the exit code
    it would give (an uncaught exception's traceback printed, 1)."""
    import runpy
    import traceback

    sys.argv = [module, *argv]
    sys.modules.pop(module, None)   # `python -m` runs it as __main__ only, never imported
    sys.path.insert(0, cwd)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:   # noqa: BLE001  (as the interpreter does with an uncaught exception)
        traceback.print_exc()
        return 1
    return 0


def exit_steps() -> None:
    """The interpreter's exit steps, which a forked child (multiprocessing's, or tests/forked_cli.py's) skips, in
    the interpreter's order: threading's own shutdown (its exit hooks, which stop concurrent.futures' and
    joblib/loky's executors, then non-daemon threads joined; a manual join waited forever on loky's manager thread
    after DCI's forests), then the atexit handlers (logging's flush, weakref finalizers such as temporary
    directories, W&B's teardown)."""
    import atexit
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()


def _become(module: str, argv: list[str], cwd: str, env: dict, log: str, threads: int | None) -> None:
    """In the forked child: run ``python -m MODULE ARGV`` and exit with its code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in (1, 2):
        os.dup2(target, fd)
    code = run_as_main(module, argv, cwd)
    exit_steps()
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code & 0xFF)   # multiprocessing's child exits with it


def run_module(module: str, argv: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, threads: int | None = None) -> int:
    """``python -m MODULE ARGV`` with stdout and stderr appended to ``log``, waited for; its exit code (a signal as
    its negative number). Forked from the preloaded server when :func:`enabled` and ``env`` is :func:`forkable`; a
    fresh interpreter otherwise. ``threads`` sets the child's torch threads (and ``OMP_NUM_THREADS``)."""
    env = dict(os.environ if env is None else env)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(int(threads))
    cwd = Path.cwd() if cwd is None else Path(cwd)
    if not (enabled() and forkable(env)):
        with open(log, "a") as out:
            return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, stdout=out,
                                  stderr=subprocess.STDOUT, env=env, check=False).returncode
    child = _context().Process(target=_become, args=(module, list(argv), str(cwd), env, str(log), threads),
                               name=f"{module} {' '.join(argv)}"[:200])
    child.start()
    child.join()
    return child.exitcode
