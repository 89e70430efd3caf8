"""Benchmarks (not timed tests): ``python -m disentangle.bench steps [--device cuda] [--repeats 10]``.

``steps`` times one full training step (forward, all loss terms, backward, optimizer step) of the
paper configurations at 64x64 with batch 64, and reports medians and ratios against QLAE measured in
the same process -- the comparison of the Tripod paper's App. D profiling table.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from . import config as _config  # noqa: F401

CONF = Path(__file__).resolve().parents[1] / "conf"

# (label, overrides): QLAE first, it is the baseline of the ratios
STEP_CASES = [
    ("qlae", ["model=qlae"]),
    ("qlae + klm", ["model=qlae", "+regularizer=klm"]),
    ("qlae, tripod arch", ["model=qlae", "model/arch=tripod"]),  # the Tripod paper's QLAE baseline
    ("tripod w/o nhp", ["model=tripod_no_nhp"]),
    ("tripod", ["model=tripod"]),
]


def _model(overrides, batch_size):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides + ["data=shapes2d", "paths.output_dir=/tmp/bench",
                                                      f"model.batch_size={batch_size}"])
    return instantiate(cfg.model, in_channels=3, resolution=64)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(overrides, device, batch_size=64, repeats=10, warmup=1) -> list[float]:
    model = _model(overrides, batch_size).to(device)
    opt = model.configure_optimizers()
    x = torch.rand(batch_size, 3, 64, 64, device=device)
    times = []
    for i in range(warmup + repeats):
        _sync(device)
        start = time.perf_counter()
        terms, weights = model.loss_terms(x)
        loss = sum(weights[k] * v for k, v in terms.items())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        model.on_before_optimizer_step(opt)
        opt.step()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def bench_steps(device: str, repeats: int, batch_size: int) -> None:
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"training step, 64x64, batch {batch_size}, {name}, median of {repeats}")
    base = None
    for label, overrides in STEP_CASES:
        med = statistics.median(time_steps(overrides, dev, batch_size, repeats))
        base = base or med
        print(f"  {label:<18} {med:8.3f} s/step   x{med / base:5.2f} vs qlae")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m disentangle.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    steps = sub.add_parser("steps", help="seconds per training step of the paper configurations")
    steps.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    steps.add_argument("--repeats", type=int, default=10)
    steps.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    if args.what == "steps":
        bench_steps(args.device, args.repeats, args.batch_size)


if __name__ == "__main__":
    main()
