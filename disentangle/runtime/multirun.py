"""Sweeps that outlive a failing job: each job that fails writes its one error line to ``error.txt`` in its own
directory and the sweep goes on; at the end :class:`SweepSummary` (a Hydra callback, conf/hydra/default.yaml) lists
the jobs that succeeded and failed, writes ``summary.json`` in the sweep directory and exits non-zero when one
failed. File-based, so it works the same for the local, joblib, Slurm and Ray launchers (jobs in other processes)."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

try:  # Hydra's callback base; a plain object works too (Hydra calls the hooks by name)
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - old Hydra
    Callback = object

log = logging.getLogger(__name__)

ERROR_FILE = "error.txt"
SUMMARY_FILE = "summary.json"


def in_multirun() -> bool:
    """True inside a job of a Hydra multirun (``-m``)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:  # noqa: BLE001 - no Hydra context
        return False


def record_failure(output_dir: str | Path, line: str) -> Path:
    """Write a failed run's one error line to ``<output_dir>/error.txt`` (a single run's as a sweep job's)."""
    path = Path(output_dir) / ERROR_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(line.rstrip("\n") + "\n")
    return path


def clear_failure(output_dir: str | Path) -> None:
    """Remove ``error.txt`` of an earlier failed start of a run that has now finished (resumed in its directory)."""
    Path(output_dir, ERROR_FILE).unlink(missing_ok=True)


def job_status(job_dir: Path) -> tuple[str, str]:
    """("succeeded" | "failed", detail) of one job directory: failed with its error line, or with "no metrics.json"
    when it ended without one (killed, or a launcher error)."""
    error = job_dir / ERROR_FILE
    if error.is_file():
        return "failed", error.read_text().strip()
    if (job_dir / "metrics.json").is_file():
        return "succeeded", ""
    return "failed", "no metrics.json (the job was killed or did not start)"


def summarize(sweep_dir: str | Path) -> dict[str, Any]:
    """Status of every job directory (one holding ``.hydra/``) under ``sweep_dir``, in job order."""
    sweep_dir = Path(sweep_dir)
    jobs = sorted((p.parent for p in sweep_dir.glob("*/.hydra")), key=lambda p: _job_number(p.name))
    rows = []
    for job in jobs:
        status, detail = job_status(job)
        rows.append({"job": job.name, "status": status, "detail": detail})
    failed = [r for r in rows if r["status"] == "failed"]
    return {"sweep_dir": str(sweep_dir), "succeeded": len(rows) - len(failed), "failed": len(failed), "jobs": rows}


def _job_number(name: str) -> tuple[int, str]:
    head = name.split("_", 1)[0]
    return (int(head), name) if head.isdigit() else (sys.maxsize, name)


class SweepSummary(Callback):
    """At the end of a multirun: print the succeeded/failed count and each failed job's error line, write
    ``summary.json`` into the sweep directory, and exit with status 1 if any job failed (0 otherwise)."""

    def __init__(self, exit_on_failure: bool = True):
        self.exit_on_failure = bool(exit_on_failure)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        summary = summarize(config.hydra.sweep.dir)
        Path(summary["sweep_dir"], SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        total = summary["succeeded"] + summary["failed"]
        print(f"sweep {summary['sweep_dir']}: {summary['succeeded']} of {total} jobs succeeded, "
              f"{summary['failed']} failed")
        for row in summary["jobs"]:
            if row["status"] == "failed":
                print(f"  failed: {row['job']}: {row['detail']}")
        if summary["failed"] and self.exit_on_failure:
            sys.stdout.flush()
            raise SystemExit(1)
