"""Benchmarks (not timed tests): ``python -m disentangle.bench steps|terms|data|metrics|precision|tf32 [--device cuda]``.

``steps`` times one full training step (forward, all loss terms, backward, optimizer step) of the
paper configurations at 64x64 with batch 64, and reports medians and ratios against QLAE measured in
the same process -- the comparison of the Tripod paper's App. D profiling table; ``steps --precision bf16-mixed``
times each case in fp32 and bf16 alternately and prints both and their ratio. ``precision`` trains the quickstarts
over three seeds in both precisions and compares their final metrics (:mod:`disentangle.bench_seeds`). ``terms`` times the
batch-level support/density regularizers alone (Cliff, IOSS, HFS: forward + backward on a random batch) against the
Cliff paper's Shapes3D training step with and without Cliff, in one process. ``data`` measures
batch assembly (random index batch -> float images on the device) in images/s. ``metrics`` times the full
evaluation (InfoMEC + depth-tuned DCI) against a straightforward scikit-learn implementation of the same
definitions, back to back in one process, and checks the values agree. ``tf32`` (CUDA) compares each paper model's
first-step terms and gradient under the TF32 settings with float32 (:mod:`disentangle.bench_tf32`).
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
from .bench_seeds import MODELS as SEED_MODELS
from .bench_seeds import compare_precisions
from .paths import config_dir
from .precision import autocast_for, float32_math

CONF = config_dir()

# (label, overrides): QLAE first, it is the baseline of the ratios
STEP_CASES = [
    ("qlae", ["model=qlae"]),
    ("ae", ["model=ae"]),
    ("betavae", ["model=betavae"]),
    ("betatcvae", ["model=betatcvae"]),
    ("bioae", ["model=bioae"]),
    ("vqvae", ["model=vqvae"]),
    ("vqvae_wd", ["model=vqvae_wd"]),
    ("qlae_no_wd", ["model=qlae_no_wd"]),
    ("qlae_global_codebook", ["model=qlae_global_codebook"]),
    ("qlae + klm", ["model=qlae", "+regularizer=klm"]),
    ("qlae, tripod arch", ["model=qlae", "model/arch=tripod"]),  # the Tripod paper's QLAE baseline
    ("betatcvae, tripod arch", ["model=betatcvae", "model/arch=tripod"]),  # Tripod's beta-TCVAE baseline
    ("tripod w/o nhp", ["model=tripod_no_nhp"]),
    ("tripod_naive", ["model=tripod_naive"]),
    ("tripod", ["model=tripod"]),
    ("tripod_no_klm", ["model=tripod_no_klm"]),
    ("tripod_finer", ["model=tripod_finer"]),
    ("ae_fq", ["model=ae_fq"]),  # the FactorQVAE paper's family, on its DALL-E-style networks
    ("betavae_fq", ["model=betavae_fq"]),
    ("bioae_fq", ["model=bioae_fq"]),
    ("qlae_fq", ["model=qlae_fq"]),
    ("qvae", ["model=qvae"]),
    ("dvae", ["model=dvae"]),
    ("factorqvae", ["model=factorqvae"]),
    # disentanglement_lib's 6-hidden-layer discriminator, the FactorQVAE family's default until issue 33
    ("factorqvae, 6-layer disc.", ["model=factorqvae", "model.regularizers.tc_discriminator.layers=6"]),
    ("factordvae", ["model=factordvae"]),
    ("factorvae", ["model=factorvae"]),
    ("dvae_friede", ["model=dvae_friede"]),  # Friede et al.'s, on disentanglement_lib's networks
    ("factordvae_friede", ["model=factordvae_friede"]),
    ("vae_friede", ["model=vae_friede"]),
    ("factorvae_friede", ["model=factorvae_friede"]),
    ("dvae_friede_masked + sup", ["model=dvae_friede_masked", "+regularizer=supervision"]),  # + a labelled batch
    ("factordvae_friede_masked + sup", ["model=factordvae_friede_masked", "+regularizer=supervision"]),
    # Locatello et al.'s models that Friede et al. quote (starred rows), on the same networks
    ("betavae_friede", ["model=betavae_friede"]),
    ("betatcvae_friede", ["model=betatcvae_friede"]),
    ("betatcvae_friede_chen", ["model=betatcvae_friede_chen"]),  # Chen et al.'s decomposition on the same nets
    ("dip_vae_i_friede", ["model=dip_vae_i_friede"]),
    ("dip_vae_ii_friede", ["model=dip_vae_ii_friede"]),
    ("annealed_vae_friede", ["model=annealed_vae_friede"]),
    ("betavae + cliff", ["model=betavae", "+regularizer=cliff"]),  # Cliff's KDE terms on the QLAE-paper beta-VAE
    ("betavae + hfs", ["model=betavae", "+regularizer=hfs"]),
    ("ae + ioss", ["model=ae", "+regularizer=ioss"]),
    ("cliff_shapes3d", ["experiment=cliff_shapes3d"]),  # Cliff's Shapes3D run: dlib networks, summed BCE
    ("cliff_balls", ["model=cliff_balls"]),  # Cliff Table 2: Lachapelle et al.'s ResNet-18 encoder + MLP decoder
    ("ioss_balls", ["model=ioss_balls"]),
    ("additive_decoder_balls", ["model=additive_decoder_balls"]),
    # the QLAE paper's GANs: one iteration = an encoder/critic update (+ gradient penalty), a generator update every
    # n_critic-th (timed over whole periods, see time_steps)
    ("infowgan_gp", ["model=infowgan_gp"]),
    ("qlinfowgan_gp", ["model=qlinfowgan_gp"]),
    ("qlinfowgan_gp_no_wd", ["model=qlinfowgan_gp_no_wd"]),
    ("wgan_gp", ["model=wgan_gp"]),
]
DATASET_SIZE = 480_000  # Shapes3D's, for beta-TCVAE's minibatch-weighted sampling


def bench_model(overrides, batch_size):
    """A case's model, composed as ``python -m disentangle.train`` would on procedural data, at 64x64."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides + ["data=shapes2d", "paths.output_dir=/tmp/bench",
                                                      f"model.batch_size={batch_size}"])
    model = instantiate(cfg.model, in_channels=3, resolution=64, dataset_size=DATASET_SIZE)
    if any(reg.needs_data for reg in model.regularizers.values()):  # the labelled examples a Trainer's setup draws
        from .data import ProceduralDataModule

        model.attach_data(ProceduralDataModule("shapes2d", eval_size=10))
    return model


def sync(device):
    """Wait for the device's queued work (CUDA), so a timer measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize()


class StepTimer:
    """One case's model, optimizers and batch, ready to time single training steps (:meth:`step`)."""

    def __init__(self, overrides, device, batch_size: int = 64, precision: str = "32-true"):
        self.device, self.precision = torch.device(device), precision
        self.model = bench_model(overrides, batch_size).to(self.device)
        # TF32 on CUDA as a run of this model sets it (tf32: auto; disentangle.run.precision_of)
        float32_math(self.device.type, not any(reg.exact_float32 for reg in self.model.regularizers.values()))
        configured = self.model.configure_optimizers()
        self.optimizers, self.schedulers = configured if isinstance(configured, tuple) else ([configured], [])
        self.x = torch.rand(batch_size * (2 if self.model.split_batch else 1), 3, 64, 64, device=self.device)
        self.period = self.model.steps_per_period

    def step(self) -> float:
        """Seconds per iteration of one whole period (one iteration for every model but the GANs)."""
        sync(self.device)
        start = time.perf_counter()
        for _ in range(self.period):
            with autocast_for(self.precision, self.device):
                self.model.optimization_step(self.x, self.optimizers)
            for scheduler in self.schedulers:
                scheduler.step()
        sync(self.device)
        return (time.perf_counter() - start) / self.period


def time_steps(overrides, device, batch_size=64, repeats=10, warmup=2, precision: str = "32-true") -> list[float]:
    """Seconds per :meth:`Autoencoder.optimization_step` (the model's update, then any discriminator's) and lr
    scheduler step; a model whose discriminator takes a second half-batch gets 2 x ``batch_size`` images, so its
    own update sees ``batch_size`` like the others. A GAN (``n_critic``) is timed over whole periods of n_critic
    iterations (one generator update each) and reported per iteration, so its generator updates are amortised.
    ``precision="bf16-mixed"`` (or ``"16-mixed"`` on CUDA) runs each step under autocast, as a Trainer would."""
    timer = StepTimer(overrides, device, batch_size, precision)
    times = [timer.step() for _ in range(warmup + repeats)]
    return times[warmup:]


def time_alternating(overrides, device, batch_size: int, repeats: int, precisions, warmup: int = 1
                     ) -> dict[str, list[float]]:
    """Seconds per step of one case in each of ``precisions``, the precisions' steps interleaved one by one after
    ``warmup`` steps each (a drift in the machine's speed hits all of them alike)."""
    timers = {p: StepTimer(overrides, device, batch_size, p) for p in precisions}
    for timer in timers.values():
        for _ in range(warmup):
            timer.step()
    times: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(repeats):
        for p, timer in timers.items():
            times[p].append(timer.step())
    return times


def bench_steps(device: str, repeats: int, batch_size: int, only: list[str] | None = None,
                precision: str | None = None) -> None:
    """Seconds per training step of every case (or those whose label contains one of ``only``), each as a ratio to
    QLAE's, measured first in the same process. With ``precision`` (``bf16-mixed``, or ``16-mixed`` on CUDA) each
    case is timed in fp32 and in that precision, ``repeats`` steps each interleaved one by one
    (:func:`time_alternating`), and the table gives both medians and their ratio."""
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    cases = [c for c in STEP_CASES if c[0] == "qlae" or not only or any(o in c[0] for o in only)]
    if precision in (None, "32-true"):
        print(f"training step, 64x64, batch {batch_size}, {name}, median of {repeats}")
        base = None
        for label, overrides in cases:
            med = statistics.median(time_steps(overrides, dev, batch_size, repeats))
            base = base or med
            print(f"  {label:<26} {med:8.3f} s/step   x{med / base:5.2f} vs qlae", flush=True)
        return
    print(f"training step, 64x64, batch {batch_size}, {name}: 32-true vs {precision} steps interleaved, median of "
          f"{repeats} each after 1 warm-up step")
    print(f"  {'case':<26} {'32-true':>10} {precision:>12} {'speed-up':>9}")
    for label, overrides in cases:
        times = time_alternating(overrides, dev, batch_size, repeats, ("32-true", precision))
        fp32, mixed = statistics.median(times["32-true"]), statistics.median(times[precision])
        print(f"  {label:<26} {fp32:8.3f} s {mixed:10.3f} s {fp32 / mixed:8.2f}x", flush=True)


def bench_terms(n: int, d: int, repeats: int, device: str) -> None:
    """Forward + backward of ``cliff_terms``, ``ioss`` and ``hausdorff_factorized_support`` on a random (n, d) batch,
    then the ``experiment=cliff_shapes3d`` step (β-VAE + Cliff, Locatello et al.'s networks, batch n) with and
    without its Cliff regularizer (alternating, 3 rounds of ``repeats``); medians, each term as a fraction of the step
    without Cliff."""
    from .regularizers import cliff_terms, hausdorff_factorized_support, ioss

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


def bench_data(n: int, batch_sizes: list[int], repeats: int, device: str) -> None:
    """Batch assembly from a prepared cache (memory-mapped uint8 HDF5) and from a procedural dataset:
    random index batches -> float images on ``device``; images/s, median over ``repeats`` batches."""
    import tempfile

    import h5py
    import numpy as np

    from .data import PreparedDataModule, ProceduralDataModule

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


def bench_metrics(n: int, n_latents: int, repeats: int, device: str, continuous: bool, seed: int) -> bool:
    """Full evaluation (InfoMEC + depth-tuned DCI): ``disentangle.metrics`` against the straightforward sklearn
    baseline (``disentangle.metrics.reference``), alternating, median of ``repeats`` each. Returns whether the
    values agree within 0.01 (InfoMEC) and 0.03 (DCI)."""
    import os

    from .metrics import dci, infomec
    from .metrics.reference import dci_reference, infomec_reference
    from .metrics.synthetic import ISAAC3D_SIZES, synthetic_representation

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m disentangle.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    steps = sub.add_parser("steps", help="seconds per training step of the paper configurations")
    steps.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    steps.add_argument("--repeats", type=int, default=10)
    steps.add_argument("--batch-size", type=int, default=64)
    steps.add_argument("--only", nargs="+", default=None,
                       help="cases whose label contains one of these (qlae, the baseline, always runs)")
    steps.add_argument("--precision", default=None, choices=["32-true", "bf16-mixed", "16-mixed"],
                       help="time fp32 and this precision alternately and print their ratio")
    terms = sub.add_parser("terms", help="Cliff, IOSS and HFS alone against the Cliff paper's Shapes3D step")
    terms.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    terms.add_argument("--n", type=int, default=64, help="batch size (Shapes3D's: 64)")
    terms.add_argument("--d", type=int, default=10, help="latents (Shapes3D's: 10)")
    terms.add_argument("--repeats", type=int, default=10)
    data = sub.add_parser("data", help="batch-assembly throughput (images/s) of prepared and procedural data")
    data.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    data.add_argument("--n", type=int, default=100_000, help="images in the synthetic cache")
    data.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    data.add_argument("--repeats", type=int, default=50)
    metrics = sub.add_parser("metrics", help="InfoMEC + DCI against a straightforward scikit-learn baseline")
    metrics.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                         help="torch device for the discrete MI tables and InfoE regressions")
    metrics.add_argument("--n", type=int, default=10_000)
    metrics.add_argument("--latents", type=int, default=18)
    metrics.add_argument("--repeats", type=int, default=3)
    metrics.add_argument("--continuous", action="store_true", help="continuous latents (KSG estimator)")
    metrics.add_argument("--seed", type=int, default=0)
    tf32 = sub.add_parser("tf32", help="each paper model's terms and gradient under TF32 against float32 (CUDA)")
    tf32.add_argument("--device", default="cuda")
    tf32.add_argument("--batch-size", type=int, default=64)
    tf32.add_argument("--repeats", type=int, default=5)
    tf32.add_argument("--only", nargs="+", default=None, help="cases whose label contains one of these")
    seeds = sub.add_parser("precision", help="quickstart metrics over seeds in fp32 and bf16-mixed (subprocesses)")
    seeds.add_argument("--out", type=Path, default=Path("outputs/bench_precision"),
                       help="run directories; finished runs are reused")
    seeds.add_argument("--models", nargs="+", default=list(SEED_MODELS))
    seeds.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    seeds.add_argument("overrides", nargs="*", help="extra training overrides for every run")
    args = parser.parse_args(argv)
    if args.what == "steps":
        if args.precision:  # the same refusals as a training run (16-mixed off CUDA names bf16-mixed)
            from .errors import ConfigError
            from .precision import resolve_precision

            try:
                resolve_precision(args.precision, args.device)
            except ConfigError as exc:
                parser.error(str(exc))
        bench_steps(args.device, args.repeats, args.batch_size, args.only, args.precision)
    elif args.what == "terms":
        bench_terms(args.n, args.d, args.repeats, args.device)
    elif args.what == "data":
        bench_data(args.n, args.batch_sizes, args.repeats, args.device)
    elif args.what == "metrics":
        ok = bench_metrics(args.n, args.latents, args.repeats, args.device, args.continuous, args.seed)
        raise SystemExit(0 if ok else 1)
    elif args.what == "tf32":
        from .bench_tf32 import bench_tf32

        bench_tf32(bench_model, sync, args.device, args.batch_size, args.repeats, args.only)
    elif args.what == "precision":
        raise SystemExit(0 if compare_precisions(args.out, args.models, args.seeds, args.overrides) else 1)


if __name__ == "__main__":
    main()
