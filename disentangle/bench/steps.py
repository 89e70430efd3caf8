"""``python -m disentangle.bench steps``: one full training step (forward, all loss terms, backward, optimizer step)
of the paper configurations at 64x64 with batch 64, medians and ratios against QLAE measured in the same process --
the comparison of the Tripod paper's App. D profiling table; ``steps --precision bf16-mixed`` times each case in
fp32 and bf16 alternately and prints both and their ratio.

:class:`StepTimer` is the one timed training step of the project: ``time_steps``, the doctor's timing and its
concurrency workers (:mod:`disentangle.doctor.worker`) all use it.
"""
from __future__ import annotations

import statistics
import time

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from ..runtime import config as _config  # noqa: F401  (registers the resolvers used by conf/)
from ..runtime.compilation import compile_options
from ..runtime.paths import config_dir
from ..foundation.precision import autocast_for, float32_math

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


def bench_model(overrides, batch_size, resolution: int = 64):
    """A case's model, composed as ``python -m disentangle.train`` would on procedural data, at ``resolution``
    (64x64, the papers')."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides) + ["data=shapes2d", "paths.output_dir=/tmp/bench",
                                                            f"model.batch_size={batch_size}"])
    model = instantiate(cfg.model, in_channels=3, resolution=resolution, dataset_size=DATASET_SIZE)
    if any(reg.needs_data for reg in model.regularizers.values()):  # the labelled examples a Trainer's setup draws
        from ..data import ProceduralDataModule

        model.attach_data(ProceduralDataModule("shapes2d", resolution=resolution, eval_size=10))
    return model


def sync(device):
    """Wait for the device's queued work (CUDA), so a timer measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    """One case's model, optimizers and batch, ready to time training steps (:meth:`step`, :meth:`run`); ``overrides``
    are the case's (:data:`STEP_CASES`) and any others, ``resolution`` the images' side."""

    def __init__(self, overrides, device, batch_size: int = 64, precision: str = "32-true", resolution: int = 64,
                 compiled: bool = False):
        self.device, self.precision = torch.device(device), precision
        self.model = bench_model(overrides, batch_size, resolution).to(self.device)
        if compiled:  # as trainer.compile=true does (disentangle.runtime.compilation); compiled at the first step
            self.model.compile_networks(**compile_options("auto", self.device.type))
        # TF32 on CUDA as a run of this model sets it (tf32: auto; disentangle.runtime.run.precision_of)
        float32_math(self.device.type, not any(reg.exact_float32 for reg in self.model.regularizers.values()))
        configured = self.model.configure_optimizers()
        self.optimizers, self.schedulers = configured if isinstance(configured, tuple) else ([configured], [])
        self.x = torch.rand(batch_size * (2 if self.model.split_batch else 1), 3, resolution, resolution,
                            device=self.device)
        self.period = self.model.steps_per_period

    def run(self, periods: int = 1) -> float:
        """Train ``periods`` whole periods (one iteration each for every model but the GANs, whose period is
        ``n_critic`` iterations), the device synchronised before and after only; seconds per iteration."""
        sync(self.device)
        start = time.perf_counter()
        for _ in range(periods * self.period):
            with autocast_for(self.precision, self.device):
                self.model.optimization_step(self.x, self.optimizers)
            for scheduler in self.schedulers:
                scheduler.step()
        sync(self.device)
        return (time.perf_counter() - start) / max(1, periods * self.period)

    def step(self) -> float:
        """Seconds per iteration of one whole period."""
        return self.run(1)


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


def time_compiled(overrides, device, batch_size: int, repeats: int, precisions, warmup: int = 1,
                  resolution: int = 64) -> dict:
    """One case eager and compiled in each of ``precisions``, the timers' steps interleaved one by one after
    ``warmup`` steps each. Returns {(precision, compiled): seconds per step} medians (``median``), the case's
    compiled network classes and model class (``networks``, ``model_class``), and the compile costs:
    ``cold`` = a compiled timer's first step minus a compiled step (median), in an empty compile cache of the case's
    own and after ``torch.compiler.reset()`` (an earlier case with the same networks must not serve it); ``warm`` =
    the same for a second compiled timer, after ``torch.compiler.reset()`` and clearing the in-memory kernels, with
    that cache now filled (what a sweep's later job pays, but for its process start). Every cold start comes before
    the reset, every warm one after it, so no timer being timed has lost its compiled code."""
    import tempfile

    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    from torch._dynamo import config as dynamo_config
    from torch._inductor.utils import clear_caches

    from ..runtime.compilation import compile_counts

    timers = {}
    cost = {p: {} for p in precisions}
    before = compile_counts()
    limit = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"  # < 2.7
    # Both precisions' compiled timers live in one process and share the networks' code objects, so each frame holds
    # the variants of both (dtype, autocast, the fp32 islands, TF32 on CUDA): on an H200, Tripod's decoder blocks hit
    # Dynamo's default limit of 8 and ran eager from then on. A run compiles one precision; here the limit is raised
    # so that every timer runs its compiled graphs
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as cache, temporary_cache_dir(cache), \
            dynamo_config.patch(**{limit: 8 * 4 * len(precisions)}):
        for p in precisions:
            eager = StepTimer(overrides, device, batch_size, p, resolution)
            for _ in range(1 + max(1, warmup)):  # the eager timer's warm-up
                eager.step()
            timers[(p, False)] = eager
        torch.compiler.reset()
        clear_caches()
        for p in precisions:  # cold: an empty cache, nothing in memory
            cost[p]["cold_first"] = StepTimer(overrides, device, batch_size, p, resolution, compiled=True).step()
        torch.compiler.reset()  # forget the compiled frames and the in-memory kernels; the on-disk cache stays
        clear_caches()
        for p in precisions:  # warm: the filled cache
            warm = StepTimer(overrides, device, batch_size, p, resolution, compiled=True)
            cost[p]["warm_first"] = warm.step()
            for _ in range(max(0, warmup - 1)):
                warm.step()
            timers[(p, True)] = warm
        times: dict = {key: [] for key in timers}
        for _ in range(repeats):
            for key, timer in timers.items():
                times[key].append(timer.step())
    median = {key: statistics.median(v) for key, v in times.items()}
    for p, c in cost.items():  # what the first compiled step costs beyond a compiled step
        c["cold"] = max(0.0, c["cold_first"] - median[(p, True)])
        c["warm"] = max(0.0, c["warm_first"] - median[(p, True)])
    eager_model = timers[(precisions[0], False)].model
    after = compile_counts()
    return {"median": median, "cost": cost, "networks": eager_model.compilable_network_classes(),
            "model_class": type(eager_model).__name__,
            "compile_counts": {k: after[k] - before[k] for k in after}}


def bench_compiled(device: str, repeats: int, batch_size: int, only: list[str] | None = None,
                   precision: str | None = None, resolution: int = 64, extra: list[str] | None = None,
                   on_row=None, exact: bool = False) -> list[dict]:
    """``bench steps --compile``: every case (or those matching ``only``; with ``exact`` those named exactly, in
    ``only``'s order) eager and compiled, in fp32 and, with ``precision``, in that precision too, steps interleaved
    (:func:`time_compiled`); speed-ups are against eager fp32 of the same case. ``extra`` overrides go to every case
    (e.g. ``model/arch=small`` for a rehearsal). Prints the table as it goes, passes each row to ``on_row`` when it is
    done, and returns the rows."""
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    precisions = ["32-true"] + ([precision] if precision not in (None, "32-true") else [])
    cases = select_cases(only, exact)
    print(f"training step, {resolution}x{resolution}, batch {batch_size}, {name}: eager vs compiled "
          f"(trainer.compile=true), steps interleaved, median of {repeats}; compile cost = first compiled step - a "
          f"compiled step, cold (empty cache) and warm (cache filled, Dynamo reset)")
    head = f"  {'case':<30} {'eager fp32':>10} {'compiled':>9} {'x':>5}"
    for p in precisions[1:]:
        head += f" {'eager ' + p[:4]:>10} {'compiled':>9} {'x':>5}"
    print(head + f" {'cold s':>7} {'warm s':>7}")
    rows = []
    for label, overrides in cases:
        result = time_compiled([*overrides, *(extra or [])], dev, batch_size, repeats, precisions,
                               resolution=resolution)
        med, cost = result["median"], result["cost"]
        base = med[("32-true", False)]
        line = f"  {label:<30} {base:8.3f} s {med[('32-true', True)]:7.3f} s {base / med[('32-true', True)]:5.2f}"
        for p in precisions[1:]:
            line += f" {med[(p, False)]:8.3f} s {med[(p, True)]:7.3f} s {base / med[(p, True)]:5.2f}"
        cold = sum(c["cold"] for c in cost.values())
        warm = sum(c["warm"] for c in cost.values())
        print(line + f" {cold:7.1f} {warm:7.1f}", flush=True)
        row = {"case": label, "median_s": {f"{p}{' compiled' if c else ''}": v for (p, c), v in med.items()},
               "compile_cold_s": cold, "compile_warm_s": warm, "networks": result["networks"],
               "compile_cold_s_by_precision": {p: c["cold"] for p, c in cost.items()},
               "model_class": result["model_class"], "compile_counts": result["compile_counts"]}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def select_cases(only: list[str] | None, exact: bool = False) -> list[tuple[str, list[str]]]:
    """The cases of :data:`STEP_CASES` whose label contains one of ``only`` (all without it); with ``exact``, the
    cases labelled exactly so, in ``only``'s order (an unknown label is a ValueError naming the labels)."""
    if not exact:
        return [c for c in STEP_CASES if not only or any(o in c[0] for o in only)]
    cases = dict(STEP_CASES)
    unknown = [label for label in only or () if label not in cases]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a bench step label; choose from {', '.join(cases)}")
    return [(label, cases[label]) for label in only or ()]
