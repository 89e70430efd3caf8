"""``python -m disentangle.bench terms``: the batch-level support/density regularizers alone (Cliff, IOSS, HFS:
forward + backward on a random batch) against the Cliff paper's Shapes3D training step with and without Cliff, in
one process."""
from __future__ import annotations

import statistics
import time

import torch

from .steps import sync, time_steps


def bench_terms(n: int, d: int, repeats: int, device: str) -> None:
    """Forward + backward of ``cliff_terms``, ``ioss`` and ``hausdorff_factorized_support`` on a random (n, d) batch,
    then the ``experiment=cliff_shapes3d`` step (β-VAE + Cliff, Locatello et al.'s networks, batch n) with and
    without its Cliff regularizer (alternating, 3 rounds of ``repeats``); medians, each term as a fraction of the step
    without Cliff."""
    from ..regularizers import cliff_terms, hausdorff_factorized_support, ioss

    dev = torch.device(device)
    z = torch.randn(n, d, device=dev, requires_grad=True)
    terms = {"cliff_terms": lambda: sum(cliff_terms(z).values()), "ioss (3 pairs)": lambda: ioss(z),
             "hfs (25 pairs)": lambda: hausdorff_factorized_support(z)}
    print(f"regularizer forward + backward, z of shape ({n}, {d}), {dev}, median of {repeats}")
    medians = {}
    for label, fn in terms.items():
        times = []
        for i in range(repeats + 2):
            sync(dev)
            start = time.perf_counter()
            fn().backward()
            sync(dev)
            if i >= 2:
                times.append(time.perf_counter() - start)
        medians[label] = statistics.median(times)
    # the two steps alternate in rounds, so a drift in the machine's speed hits both
    plain_times, cliff_times = [], []
    for _ in range(3):
        plain_times += time_steps(["experiment=cliff_shapes3d", "~model.regularizers.cliff"], dev, n, repeats)
        cliff_times += time_steps(["experiment=cliff_shapes3d"], dev, n, repeats)
    plain, with_cliff = statistics.median(plain_times), statistics.median(cliff_times)
    print(f"  {'cliff_shapes3d step without Cliff':<36} {plain * 1e3:9.1f} ms")
    print(f"  {'cliff_shapes3d step with Cliff':<36} {with_cliff * 1e3:9.1f} ms   x{with_cliff / plain:5.2f}")
    for label, med in medians.items():
        print(f"  {label:<36} {med * 1e3:9.1f} ms   {100 * med / plain:5.1f}% of the step without Cliff")
