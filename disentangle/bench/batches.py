"""``python -m disentangle.bench data``: batch assembly (random index batch -> float images on the device) from a
prepared cache and from procedural data, in images/s."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from .steps import sync


def bench_data(n: int, batch_sizes: list[int], repeats: int, device: str) -> None:
    """Batch assembly from a prepared cache (memory-mapped uint8 HDF5) and from a procedural dataset:
    random index batches -> float images on ``device``; images/s, median over ``repeats`` batches."""
    import tempfile

    import h5py
    import numpy as np

    from ..data import PreparedDataModule, ProceduralDataModule

    dev = torch.device(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "isaac3d.h5"
        rng = np.random.default_rng(0)
        with h5py.File(path, "w") as f:  # contiguous, like the converter writes it
            images = f.create_dataset("images", (n, 3, 64, 64), dtype=np.uint8)
            for start in range(0, n, 8192):
                stop = min(n, start + 8192)
                images[start:stop] = rng.integers(0, 256, (stop - start, 3, 64, 64), dtype=np.uint8)
            f["factors"] = rng.integers(0, 3, (n, 9))
            f.attrs.update(factor_names=[f"f{i}" for i in range(9)], factor_sizes=[3] * 9, complete=True)
        modules = {
            "prepared (memory-mapped)": PreparedDataModule("isaac3d", root=tmp, eval_size=10),
            "procedural shapes2d 64px": ProceduralDataModule("shapes2d", eval_size=10),
        }
        if dev.type == "cuda":
            modules["prepared (on_device)"] = PreparedDataModule("isaac3d", root=tmp, eval_size=10, on_device=True)
        print(f"batch assembly on {dev}: {n} cached images of 3x64x64, median of {repeats} random batches")
        for label, dm in modules.items():
            for bs in batch_sizes:
                rates = []
                for i in range(repeats + 2):
                    idx = torch.randint(0, dm.num_samples, (bs,), device=dev)
                    sync(dev)
                    start = time.perf_counter()
                    dm.gather(idx)
                    sync(dev)
                    if i >= 2:
                        rates.append(bs / (time.perf_counter() - start))
                print(f"  {label:<26} batch {bs:>4}: {statistics.median(rates):>10,.0f} images/s")
