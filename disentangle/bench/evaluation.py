"""``python -m disentangle.bench metrics``: the full evaluation (InfoMEC + depth-tuned DCI) against a
straightforward scikit-learn implementation of the same definitions, back to back in one process, and whether the
values agree."""
from __future__ import annotations

import statistics
import time


def bench_metrics(n: int, n_latents: int, repeats: int, device: str, continuous: bool, seed: int) -> bool:
    """Full evaluation (InfoMEC + depth-tuned DCI): ``disentangle.metrics`` against the straightforward sklearn
    baseline (``disentangle.metrics.reference``), alternating, median of ``repeats`` each. Returns whether the
    values agree within 0.01 (InfoMEC) and 0.03 (DCI)."""
    import os

    from ..metrics import dci, infomec
    from ..metrics.reference import dci_reference, infomec_reference
    from ..metrics.synthetic import ISAAC3D_SIZES, synthetic_representation

    sources, latents = synthetic_representation(n, ISAAC3D_SIZES, n_latents, discrete=not continuous, seed=seed)
    discrete = not continuous
    metric_device = None if device == "cpu" else device
    kind = "continuous (KSG)" if continuous else "discrete"
    print(f"InfoMEC + depth-tuned DCI, {n} samples x {len(ISAAC3D_SIZES)} sources x {n_latents} {kind} latents; "
          f"{os.cpu_count()} CPU cores, metrics device {device}; median of {repeats}")

    def ours():
        return {**infomec(sources, latents, discrete_latents=discrete, device=metric_device),
                **{f"dci_{k}": v for k, v in dci(sources, latents, seed=seed).items()}}

    def baseline():
        return {**infomec_reference(sources, latents, discrete_latents=discrete),
                **{f"dci_{k}": v for k, v in dci_reference(sources, latents, seed=seed).items()}}

    times = {"disentangle.metrics": [], "sklearn baseline": []}
    values = {}
    for _ in range(repeats):
        for label, fn in (("disentangle.metrics", ours), ("sklearn baseline", baseline)):
            start = time.perf_counter()
            values[label] = fn()
            times[label].append(time.perf_counter() - start)
            print(f"  {label:<20} {times[label][-1]:7.2f} s", flush=True)
    fast, base = (statistics.median(times[k]) for k in times)
    print(f"median: disentangle.metrics {fast:.2f} s, sklearn baseline {base:.2f} s -> {base / fast:.1f}x faster")
    ok = True
    print(f"  {'value':<8} {'ours':>8} {'baseline':>9} {'|diff|':>8}  tolerance")
    for key, tol in (("infom", 0.01), ("infoe", 0.01), ("infoc", 0.01), ("dci_d", 0.03), ("dci_i", 0.03),
                     ("dci_c", 0.03)):
        a, b = values["disentangle.metrics"][key], values["sklearn baseline"][key]
        ok &= abs(a - b) <= tol
        print(f"  {key:<8} {a:8.4f} {b:9.4f} {abs(a - b):8.4f}  {tol}{'' if abs(a - b) <= tol else '  EXCEEDED'}")
    return ok
