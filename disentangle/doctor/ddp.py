"""The doctor's fifth check (two or more GPUs): a 2-process DDP run through ``python -m disentangle.train``."""
from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

from .common import ROOT, read_losses
from .families import family_name, run_overrides


def run_ddp_check(accelerator: str, workdir: Path, steps: int = 4, timeout: float = 600) -> dict:
    """A 2-process DDP run of QLAE (``trainer=ddp trainer.devices=2``) through ``python -m disentangle.train`` on
    ``accelerator`` (``gpu``; ``cpu`` runs gloo processes): it must exit cleanly with finite logged losses."""
    from ..runtime.families import FAMILIES

    family = next(f for f, choice in FAMILIES.items() if family_name(choice) == "qlae")
    run_dir = Path(workdir).resolve() / "ddp"
    overrides = [*run_overrides(family, steps), "model=qlae", "trainer=ddp", "trainer.devices=2",
                 f"trainer.accelerator={accelerator}", "trainer.precision=32-true", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "disentangle.train", *overrides], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, check=False)
        error = None if proc.returncode == 0 else \
            f"exit status {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:300]}"
    except subprocess.TimeoutExpired:
        error = f"did not finish in {timeout:.0f} s"
    losses = read_losses(run_dir)
    bad = sorted(k for k, v in losses.items() if not all(math.isfinite(x) for x in v))
    if error is None and not losses:
        error = "no training loss was logged"
    elif error is None and bad:
        error = f"non-finite logged loss terms: {', '.join(bad)}"
    return {"status": "ok" if error is None else "fail", "accelerator": accelerator, "devices": 2, "steps": steps,
            "seconds": time.perf_counter() - start, "losses": {k: v[-1] for k, v in losses.items()},
            "error": error, "run_dir": str(run_dir)}
