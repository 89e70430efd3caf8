"""``torch.compile`` where it pays (``trainer.compile``: auto, true, false).

What is compiled: the networks a training step runs, each on its own (``torch.compile(network)``, kept outside the
module tree so checkpoints keep their keys): the encoder and decoder of an autoencoder (the decoder passes of a
Hessian penalty included), a GAN's generator, a TC discriminator. The model reaches them through
:meth:`~disentangle.models.base.LatentModel.network`; everything else (the latent module and the fp32 islands, the
losses, the optimizers) runs eager.

What runs eager by design:

* **evaluation** (``represent``, ``embed``, the figures, ``evaluate``): its batch sizes vary, and a static graph
  per size would recompile; it goes through the eager modules, which share the compiled ones' weights;
* **a GAN's encoder/critic trunk and critic head**: the gradient penalty differentiates the critic's input gradient
  (a double backward), which compiled graphs do not support;
* **the TC discriminator inside the model's loss**: it runs with detached parameters through
  ``torch.func.functional_call`` (its own update, the larger pass, is compiled).

Graphs are static (``dynamic=False``): a network sees a few fixed shapes (the training batch, a Hessian penalty's
perturbed batch, a labelled batch), each compiled once and then reused; :func:`compile_counts` counts them, and the
tests bound them.

``auto`` decides once per run, before the first step, from a measurement: the networks' eager forward and backward
pass on a batch of the run's shape is timed on copies (:func:`probe_seconds`), and the networks are compiled when the
time the remaining steps would save, at the expected speed-up, exceeds the expected compile cost
(:data:`EXPECTED`, with the speed-up measured per network where there is one, :data:`MEASURED_SPEEDUP`; from
``python -m disentangle.bench steps --compile``, docs/benchmarks.md). The decision is stored
in the checkpoint, and a resumed ``auto`` run keeps it, so that a run resumed compiled continues as it started.
"""
from __future__ import annotations

import copy
import logging
import os
import shutil
import time
from dataclasses import dataclass

import pytorch_lightning as pl
import torch

from ..checks import check_one_of
from ..errors import ConfigError
from ..foundation.precision import autocast_for

log = logging.getLogger(__name__)

SETTINGS = ("auto", "true", "false")


@dataclass(frozen=True)
class Expectation:
    """What compiling is expected to give on a device type: ``speedup`` of the compiled networks' forward and
    backward pass, and the one-time ``cost_s`` of compiling them (cold cache), from the benchmark's table."""

    speedup: float
    cost_s: float


# Conservative figures (docs/compile.md, docs/benchmarks.md "Compiled steps" and "On a GPU"), so that `auto`
# compiles only runs that clearly gain. CPU: more than the largest cold compile of a paper model in compile_mode auto
# (naive Tripod's, 179 s); the speed-up of a network not in MEASURED_SPEEDUP. CUDA (`make gpu-check` on an H200,
# torch 2.11, fp32, batch 64): 1.3 x the largest cold compile (Tripod's, 74.5 s), rounded up; an unmeasured network
# is expected to gain 1.05x, below the least gain measured there above MIN_GAIN (1.07x)
EXPECTED = {
    "cpu": Expectation(speedup=1.15, cost_s=240.0),
    "cuda": Expectation(speedup=1.05, cost_s=100.0),
}
# The training step's speed-up measured per network on a CPU (`bench steps --compile`, compile_mode auto, fp32;
# docs/benchmarks.md "Compiled steps"): for each network class (or "<model class>:<network class>" where the model's
# uncompiled part changes it) the smallest over the cases that compile it, so that `auto` expects no more than the
# least it gained (a step's uncompiled parts are in it: conservative). A network not measured takes EXPECTED's
# speed-up. Below MIN_GAIN (compiled slower, or a gain within the timing noise) `auto` leaves the run eager however
# long it is.
MEASURED_SPEEDUP: dict[str, dict[str, float]] = {
    "cpu": {
        "ConvEncoder": 1.15, "StyleDecoder": 1.15,  # the QLAE paper's autoencoders: 1.15-1.55x over 13 cases
        "InfoWGAN:StyleDecoder": 0.97,  # its GANs, 0.97-1.09x: the generator compiles, not the critic (double backward)
        "ResidualEncoder": 1.11, "ResidualDecoder": 1.11,  # the Tripod paper's: 1.11-1.46x over 7 cases
        "DalleEncoder": 1.68, "DalleDecoder": 1.68,  # the FactorQVAE paper's DALL-E-style: 1.68-1.89x over 10 cases
        "DlibEncoder": 0.96, "DlibDecoder": 0.96,  # disentanglement_lib's: 0.96-1.18x (convolution-bound, oneDNN)
        "LachapelleEncoder": 0.83, "LachapelleDecoder": 0.83, "AdditiveDecoder": 0.86,  # the balls' ResNet-18: slower
    },
    # `make gpu-check` on an H200 (docs/gpu-check.json; one case per network, fp32, TF32 as the runs set it): small
    # steps (7-120 ms at batch 64) leave little for Inductor to fuse
    "cuda": {
        "ConvEncoder": 1.10, "StyleDecoder": 1.10,  # QLAE's autoencoder
        "InfoWGAN:StyleDecoder": 1.07,  # its GAN's generator
        "ResidualEncoder": 1.00, "ResidualDecoder": 1.00,  # Tripod's: eager
        "DalleEncoder": 0.99, "DalleDecoder": 0.99,  # FactorQVAE's DALL-E-style: eager
        "DlibEncoder": 0.81, "DlibDecoder": 0.81,  # disentanglement_lib's: slower compiled
        "LachapelleEncoder": 0.96, "LachapelleDecoder": 0.96, "AdditiveDecoder": 0.98,  # the balls': eager
    },
}
MIN_GAIN = 1.02


def compile_setting(value) -> str:
    """``trainer.compile`` as one of :data:`SETTINGS` (YAML booleans accepted); one ConfigError line otherwise."""
    text = str(value).lower() if isinstance(value, bool) or value is not None else "none"
    try:
        check_one_of("trainer.compile", text, SETTINGS)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return text


def compiler_missing(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot build kernels for ``device_type`` here (None when it can): on the CPU Inductor
    needs a C++ compiler, on CUDA Triton."""
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed (pip install triton)"
    if device_type == "cpu":
        cxx = os.environ.get("CXX", "g++")
        if shutil.which(cxx) or shutil.which("clang++"):
            return None
        return f"no C++ compiler ({cxx}) on PATH: Inductor builds the CPU kernels with one"
    return f"torch.compile is not used on {device_type}"


MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# auto: on a CPU, Inductor's autotuned GEMM and convolution choices (measured here: disentanglement_lib's networks
# 1.16x over eager instead of 0.98x with the default mode, QLAE's 1.47x instead of 1.37x, for ~10-50 s more compile);
# on CUDA the default mode (max-autotune benchmarks many Triton kernels: minutes of compile)
AUTO_MODE = {"cpu": "max-autotune-no-cudagraphs", "cuda": "default"}


def compile_mode(value, device_type: str) -> str:
    """``trainer.compile_mode`` checked (one ConfigError line naming the allowed values) and ``auto`` settled."""
    text = str(value)
    try:
        check_one_of("trainer.compile_mode", text, MODES)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return AUTO_MODE.get(device_type, "default") if text == "auto" else text


def compile_options(mode: str = "auto", device_type: str = "cpu") -> dict:
    """The options every network is compiled with: static shapes (see the module docstring) and the mode."""
    return {"dynamic": False, "mode": compile_mode(mode, device_type)}


def use_cache_dir(path) -> None:
    """Inductor's compile cache in ``path`` for this process (``paths.compile_cache``, or a sweep's
    ``.compile_cache``: its jobs share it, so only the first pays the cold compile; ``disentangle.runtime.run``). Set
    before anything is compiled; Inductor reads it at every cache access and creates it when it first writes (an eager
    run leaves no empty directory behind)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(os.path.abspath(path))


def probe_seconds(model, batch: int, device, precision: str, repeats: int = 1) -> float:
    """Seconds of one eager forward and backward pass of the networks ``model`` compiles among its encoder and decoder
    (``model.network_examples``) on a random batch of the run's shape, under the run's precision: median of
    ``repeats`` after one warm-up. Runs on copies, with a generator of its own, so the run's weights, BatchNorm
    statistics and random streams are untouched."""
    examples = model.network_examples(batch, torch.Generator(device="cpu").manual_seed(0))
    if not examples:
        return 0.0
    nets = [copy.deepcopy(net).to(device).train() for net, _ in examples]
    data = [x.to(device) for _, x in examples]
    cuda = torch.device(device).type == "cuda"

    def once() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with autocast_for(precision, device):
            total = sum(net(x).float().sum() for net, x in zip(nets, data))
        total.backward()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    once()
    times = sorted(once() for _ in range(max(1, repeats)))
    return times[len(times) // 2]


@dataclass
class Decision:
    """Whether a run compiles, and why (recorded in metrics.json's runtime and the checkpoint)."""

    compiled: bool
    reason: str
    probe_s: float | None = None

    def record(self) -> dict:
        out = {"compiled": self.compiled, "compile_reason": self.reason}
        if self.probe_s is not None:
            out["compile_probe_s"] = round(self.probe_s, 6)
        return out


def expected_speedup(device_type: str, networks=(), model: str | None = None) -> tuple[float, str | None]:
    """The speed-up ``auto`` expects for these network classes of a ``model`` class on ``device_type``: the smallest
    measured one (:data:`MEASURED_SPEEDUP`, "<model>:<network>" before "<network>"), else :data:`EXPECTED`'s; and
    the network that sets it (None for the default)."""
    default = EXPECTED[device_type].speedup
    measured = MEASURED_SPEEDUP.get(device_type, {})
    keys = [f"{model}:{n}" if f"{model}:{n}" in measured else n for n in networks]
    known = [(measured[k], k) for k in keys if k in measured]
    if not known:
        return default, None
    return min(known)


def decide_auto(probe_s: float, remaining_steps: int, device_type: str, networks=(), model: str | None = None
                ) -> Decision:
    """The ``auto`` rule: compile when ``remaining_steps`` x the networks' eager time ``probe_s`` x (1 - 1/speed-up)
    exceeds the compile cost (:data:`EXPECTED` for ``device_type``); the speed-up is the one measured for the
    ``networks`` (class names) of a ``model`` class where there is one (:func:`expected_speedup`), and a measured one below
    :data:`MIN_GAIN` leaves the run eager."""
    expected = EXPECTED.get(device_type)
    if expected is None:
        return Decision(False, f"auto: not compiled on {device_type}")
    speedup, network = expected_speedup(device_type, networks, model)
    if network is not None and speedup < MIN_GAIN:
        return Decision(False, f"auto: compiled {network} measured {speedup:.2f}x eager on {device_type} "
                               f"(bench steps --compile), below {MIN_GAIN}x: eager", probe_s)
    saving = remaining_steps * probe_s * (1 - 1 / speedup)
    verdict = saving > expected.cost_s
    return Decision(verdict, f"auto: {remaining_steps} steps x {probe_s:.4f} s of networks x "
                             f"(1 - 1/{speedup}) = {saving:.0f} s saved "
                             f"{'>' if verdict else '<='} {expected.cost_s:.0f} s to compile", probe_s)


def compile_counts() -> dict[str, int]:
    """Graphs Dynamo has compiled in this process so far (``unique_graphs``) and frames it recompiled
    (``recompilations``): what the tests bound."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
            "recompilations": int(sum(counters["recompiles"].values()))}


class CompileNetworks(pl.Callback):
    """Compile the model's networks at ``on_fit_start`` when ``setting`` (``trainer.compile``) says so."""

    def __init__(self, setting: str = "auto", mode: str = "auto", cache_dir=None):
        self.setting = compile_setting(setting)
        self.mode = mode
        self.cache_dir = cache_dir  # set just before compiling: an eager run touches no cache
        compile_mode(mode, "cpu")  # a bad value fails at build, before any work
        self.decision: Decision | None = None
        self._resumed: dict | None = None  # the decision stored in the checkpoint being resumed
        self._first_step_start: float | None = None

    def state_dict(self) -> dict:
        return {"setting": self.setting, **(self.decision.record() if self.decision else {})}

    def load_state_dict(self, state_dict: dict) -> None:
        self._resumed = dict(state_dict)

    def decide(self, trainer: pl.Trainer, pl_module) -> Decision:
        """What this run does: the setting, or for ``auto`` the resumed run's decision or the probe's rule."""
        if self.setting != "auto":
            return Decision(self.setting == "true", f"trainer.compile={self.setting}")
        if self._resumed is not None and "compiled" in self._resumed:
            return Decision(bool(self._resumed["compiled"]), "auto: as decided when the run started (checkpoint)")
        if trainer.ckpt_path is not None:  # a checkpoint from before trainer.compile: that run was eager
            return Decision(False, "auto: resumed from a checkpoint without a compile decision (it ran eager)")
        device_type = pl_module.device.type
        missing = compiler_missing(device_type)
        if missing:
            return Decision(False, f"auto: {missing}")
        batch = max(1, pl_module.batch_size // max(1, trainer.world_size))
        probe = probe_seconds(pl_module, batch, pl_module.device, str(trainer.precision))
        return decide_auto(probe, int(trainer.max_steps) - int(trainer.global_step), device_type,
                           pl_module.compilable_network_classes(), type(pl_module).__name__)

    def on_fit_start(self, trainer: pl.Trainer, pl_module) -> None:
        decision = self.decide(trainer, pl_module)
        if trainer.world_size > 1:  # one decision for every process (a probe's timing differs per process)
            decision = trainer.strategy.broadcast(decision, src=0)
        if decision.compiled and not pl_module.compiled:
            if self.cache_dir is not None:
                use_cache_dir(self.cache_dir)
            options = compile_options(self.mode, pl_module.device.type)
            names = pl_module.compile_networks(**options)
            pl_module.runtime["compile_mode"] = options["mode"]
            log.info("compiled %s, mode %s (%s)", ", ".join(names), options["mode"], decision.reason)
        else:
            log.info("networks run eager (%s)", decision.reason)
        pl_module.runtime.update(decision.record())
        self.decision = decision
        self._first_step_start = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        if "first_step_s" not in pl_module.runtime and self._first_step_start is None:
            self._first_step_start = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """The first step's seconds (a compiled run's first step compiles): in metrics.json's runtime."""
        if self._first_step_start is not None and "first_step_s" not in pl_module.runtime:
            pl_module.runtime["first_step_s"] = round(time.perf_counter() - self._first_step_start, 3)
