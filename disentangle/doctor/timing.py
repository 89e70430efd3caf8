"""The doctor's third check: seconds per training step of the paper configurations in each precision, and of a few
compiled (trainer.compile=true) with their one-time compile cost."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from .common import quiet

# paper configurations that take about a second or less per step on a CPU: the QLAE paper's networks and
# disentanglement_lib's (categorical and Gaussian latent); most others take several to tens of seconds per step
# there (a GAN is timed over 5 iterations of about 4 s each)
CPU_TIMING_CASES = ("qlae", "dvae_friede", "vae_friede")
# also timed compiled (trainer.compile=true; each costs a compile of tens of seconds, more on a CPU): the QLAE paper's
# networks and disentanglement_lib's
COMPILE_TIMING_CASES = ("qlae", "dvae_friede")


def time_cases(labels: Sequence[str], device: str, precisions: Sequence[str], batch_size: int = 64,
               repeats: int = 10, warmup: int = 2, progress: Callable[[str], None] | None = None,
               compiled: Sequence[str] = ()) -> list[dict]:
    """Median seconds per training step (:func:`disentangle.bench.time_steps`) of each paper configuration in
    ``labels`` (labels of :data:`disentangle.bench.STEP_CASES`) in each precision, with each precision's ratio to
    QLAE's step (when QLAE is timed) and bf16's speed-up over fp32. The cases in ``compiled`` are also timed compiled
    (``seconds["<precision> compiled"]``), with their speed-up over eager in that precision and the compile cost
    (``compile_s``: the first compiled step less an eager one)."""
    import torch

    from ..bench import STEP_CASES, StepTimer, time_steps
    from ..runtime.config import one_line

    cases = dict(STEP_CASES)
    rows = []
    for label in labels:
        row: dict = {"case": label, "overrides": cases[label], "seconds": {}, "errors": {}}
        for precision in precisions:
            if progress:
                progress(f"timing {label} on {device}, {precision}")
            with quiet():
                try:
                    times = time_steps(cases[label], torch.device(device), batch_size, repeats, warmup,
                                       precision=precision)
                    row["seconds"][precision] = statistics.median(times)
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory: reported, the other cases go on
                    row["errors"][precision] = f"{type(exc).__name__}: {one_line(exc)}"
            if label not in compiled or precision not in row["seconds"]:
                continue
            key = f"{precision} compiled"
            if progress:
                progress(f"timing {label} on {device}, {precision}, compiled")
            with quiet():
                try:
                    timer = StepTimer(cases[label], torch.device(device), batch_size, precision, compiled=True)
                    first = timer.step()
                    times = [timer.step() for _ in range(warmup + repeats)][warmup:]
                    row["seconds"][key] = statistics.median(times)
                    row.setdefault("compile_s", {})[precision] = max(0.0, first - row["seconds"][precision])
                    row.setdefault("compile_speedup", {})[precision] = row["seconds"][precision] / row["seconds"][key]
                except Exception as exc:  # noqa: BLE001 - a compiler error: reported, the other cases go on
                    row["errors"][key] = f"{type(exc).__name__}: {one_line(exc)}"
        rows.append(row)
    base = next((r["seconds"] for r in rows if r["case"] == "qlae"), {})
    for row in rows:
        row["vs_qlae"] = {p: s / base[p] for p, s in row["seconds"].items() if base.get(p)}
        fp32, bf16 = row["seconds"].get("32-true"), row["seconds"].get("bf16-mixed")
        row["bf16_speedup"] = fp32 / bf16 if fp32 and bf16 else None
        row["status"] = "fail" if row["errors"] else "ok"
    return rows
