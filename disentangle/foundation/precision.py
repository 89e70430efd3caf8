"""Mixed precision that keeps every estimator right (``trainer.precision``).

Under ``bf16-mixed`` (CPU or CUDA) or ``16-mixed`` (CUDA) Lightning runs the training step inside
``torch.autocast``: convolutions and matrix products run in the low-precision type, which is where the time goes.
Some terms cannot be computed from low-precision values: a finite-difference Hessian divides second differences by
ε² = 0.01 and would measure rounding noise (bf16 keeps 8 significant bits), a softmax over codes or a KL between
nearly equal distributions loses its small differences, a covariance compared with 1 or a gradient norm pinned to
1 loses the difference. Those parts are **fp32 islands**: :func:`in_float32` (a function) or :func:`island` (a
block) switches autocast off and computes in float32, so they compute exactly what a float32 run computes from the
same inputs. Outside autocast (``32-true``, evaluation) the islands are plain calls: a float32 run is bitwise what
it was. Each island is registered by name in :data:`ISLANDS` and earns its place: tests/test_precision.py shows, for
every registered island, its term on a real model batch wrong under bf16 autocast with just that island switched
off (:func:`islands_disabled`) and right with it; docs/precision.md lists them, with the errors, and the islands
that were removed because no such test could justify them (what is elementwise on float32 inputs stays float32
under autocast without one).
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from ..checks import FP16_OFF_CUDA, PRECISION_ALIASES, PRECISIONS
from ..errors import ConfigError

DEVICE_TYPES = ("cpu", "cuda")

F = TypeVar("F", bound=Callable[..., Any])


def autocast_for(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The autocast region a Trainer with ``precision`` opens around a training step on ``device`` (a no-op for a
    ``*-true`` precision): what the benchmark and the tests use outside a Trainer."""
    kind = torch.device(device).type
    if precision == "bf16-mixed":
        return torch.autocast(kind, dtype=torch.bfloat16)
    if precision == "16-mixed":
        return torch.autocast(kind, dtype=torch.float16)
    return contextlib.nullcontext()


def autocast_active() -> bool:
    """Whether an autocast region is open on any device type."""
    return any(torch.is_autocast_enabled(kind) for kind in DEVICE_TYPES)


_TF32_GUARD = {"on": False}  # set by float32_math for a CUDA run: the islands then also switch TF32 off


@contextlib.contextmanager
def tf32_flags(matmul: bool, conv: bool, islands_exact: bool = True) -> Iterator[None]:
    """TF32 for CUDA matrix products (``matmul``) and convolutions (``conv``) inside, restored after; with
    ``islands_exact`` false the fp32 islands keep TF32 too (JAX's default precision everywhere; only the benchmark
    ``python -m disentangle.bench tf32`` asks for that)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, _TF32_GUARD["on"])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv
    _TF32_GUARD["on"] = islands_exact
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, _TF32_GUARD["on"] = saved


def tf32_active() -> bool:
    """Whether float32 products may run in TF32 right now (only ever on CUDA, after :func:`float32_math`)."""
    return _TF32_GUARD["on"] and (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """Autocast switched off inside (on every device type where it is on), and on CUDA TF32 products too (10
    significant bits would again round away a finite difference); tensors keep their dtypes."""
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with contextlib.ExitStack() as stack:
        for kind in DEVICE_TYPES:
            if torch.is_autocast_enabled(kind):
                stack.enter_context(torch.autocast(kind, enabled=False))
        if _TF32_GUARD["on"]:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            yield
        finally:
            if _TF32_GUARD["on"]:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def to_float32(value: Any) -> Any:
    """Floating tensors (also inside lists, tuples and dicts) as float32; everything else unchanged."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, (list, tuple)):
        return type(value)(to_float32(v) for v in value)
    if isinstance(value, dict):
        return {k: to_float32(v) for k, v in value.items()}
    return value


# -- the islands, by name --------------------------------------------------------------------------------
ISLANDS: dict[str, str] = {}  # every fp32 island of the package: name -> what it computes (its docstring's first line)
# The islands kept because each earned its place, listed once: name -> the term it keeps right (its model).
# docs/precision.md's table has exactly these rows, each must be registered when the package is imported, and
# tests/test_precision.py measures each one (an island deleted with its registration still fails there).
KEPT_ISLANDS: dict[str, str] = {
    "models.base.LatentModel.run_latent": "kl (dvae_friede)",
    "models.gan.InfoWGAN.gradient_penalty_at": "the gradient of gradient_penalty (infowgan_gp)",
    "regularizers.nhp.NormalizedHessianPenalty.forward": "nhp (tripod)",
}
_DISABLED: set[str] = set()  # islands that are plain calls under autocast too (islands_disabled, for the tests)


def register_island(name: str, doc: str = "") -> str:
    """Add an fp32 island to :data:`ISLANDS` (at import time) and return its name: the place it is, relative to the
    package (``"regularizers.cliff.cliff_terms"``)."""
    ISLANDS[name] = doc.strip().split("\n")[0] if doc else ""
    return name


def island_on(name: str) -> bool:
    """Whether island ``name`` computes in float32 under autocast (true unless :func:`islands_disabled` says not)."""
    return name not in _DISABLED


@contextlib.contextmanager
def islands_disabled(*names: str) -> Iterator[None]:
    """The named islands are plain calls inside, under autocast too: what the code computed without them (the
    tests' check that each island matters). Unknown names are a KeyError."""
    unknown = [name for name in names if name not in ISLANDS]
    if unknown:
        raise KeyError(f"no fp32 island named {unknown[0]!r}; the islands are {sorted(ISLANDS)}")
    saved = set(_DISABLED)
    _DISABLED.update(names)
    try:
        yield
    finally:
        _DISABLED.clear()
        _DISABLED.update(saved)


def island(name: str) -> contextlib.AbstractContextManager:
    """The block form of an island (a region of code rather than a function; register ``name`` with
    :func:`register_island` at import time): :func:`full_precision` inside, unless the island is disabled."""
    return full_precision() if island_on(name) else contextlib.nullcontext()


def in_float32(fn: F | None = None, *, name: str | None = None) -> F:
    """Decorate a function whose result must be computed in float32 (an fp32 island): under autocast its tensor
    arguments are cast to float32 and autocast is off while it runs; outside autocast it is called unchanged.
    A function of the package (or one given a ``name``) is registered in :data:`ISLANDS` as ``name``, by default its
    place (``module.qualname`` without ``disentangle.``); :func:`islands_disabled` switches it off by that name."""
    if fn is None:
        return functools.partial(in_float32, name=name)  # type: ignore[return-value]
    module = getattr(fn, "__module__", None) or ""
    if name is not None or module.startswith("disentangle."):
        name = name or f"{module.removeprefix('disentangle.')}.{fn.__qualname__}"
        register_island(name, fn.__doc__ or "")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not (autocast_active() or tf32_active()) or name in _DISABLED:
            return fn(*args, **kwargs)
        with full_precision():
            return fn(*to_float32(args), **to_float32(kwargs))

    wrapper.island = name  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


# -- trainer.precision: what may run where ------------------------------------------------------------------
_ALIASES = PRECISION_ALIASES  # PRECISIONS and these are defined torch-free in disentangle.checks


def device_type(accelerator: str) -> str:
    """The torch device type a Trainer's ``accelerator`` trains on (``auto``: CUDA when present)."""
    kind = str(accelerator).lower()
    if kind in ("gpu", "cuda"):
        return "cuda"
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return kind


def cuda_bf16_native() -> bool:
    """Whether the current CUDA device computes in bf16 natively (Ampere and later). ``torch.cuda.is_bf16_supported()``
    also counts emulation (a V100 or T4 "supports" bf16, slower than fp32), which is not support here."""
    if not torch.cuda.is_available():
        return False
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch before 2.4 has no including_emulation
        return torch.cuda.get_device_capability() >= (8, 0)


def resolve_precision(requested, accelerator: str, *, updates_per_step: int = 1) -> str:
    """The precision a run trains in: ``auto`` is ``bf16-mixed`` on a CUDA device that computes in bf16 and
    ``32-true`` elsewhere (on this project's CPU bf16 is faster, but the demo's metrics were measured in fp32; see
    docs/benchmarks.md). What the device or the method cannot do fails here, in one line, before any work:
    ``16-mixed`` off CUDA (it names ``bf16-mixed``), ``16-mixed`` for a model with several optimizer updates per
    step (the second optimizer steps outside Lightning's gradient scaler), ``bf16-mixed`` on a GPU without native
    bf16 (:func:`cuda_bf16_native`: emulation does not count)."""
    value = _ALIASES.get(str(requested), str(requested))
    if value not in PRECISIONS:
        raise ConfigError(f"trainer.precision={requested!r} is not supported; choose one of {list(PRECISIONS)}")
    kind = device_type(accelerator)
    if value == "auto":
        return "bf16-mixed" if kind == "cuda" and cuda_bf16_native() else "32-true"
    if value == "16-mixed":
        if kind != "cuda":
            raise ConfigError(FP16_OFF_CUDA.format(device=kind.upper()))
        if updates_per_step > 1:
            raise ConfigError("trainer.precision=16-mixed cannot train this model: it makes several optimizer updates "
                              "per step (an adversary or a generator) and float16 needs every backward pass loss-scaled "
                              "through one gradient scaler; use trainer.precision=bf16-mixed or 32-true")
    if value == "bf16-mixed":
        if kind == "cuda" and not cuda_bf16_native():
            raise ConfigError(f"trainer.precision=bf16-mixed: {torch.cuda.get_device_name()} has no native bf16 (torch "
                              f"would emulate it, slower than fp32); use trainer.precision=16-mixed or 32-true")
        if kind not in ("cpu", "cuda"):
            raise ConfigError(f"trainer.precision=bf16-mixed is supported on CPU and CUDA, not on {kind}; use 32-true")
    return value


TF32_MODES = ("auto", "true", "false", "conv")


def tf32_mode(value) -> str:
    """``tf32`` from a config (a bool or one of :data:`TF32_MODES`) as one of :data:`TF32_MODES`."""
    mode = str(value).lower()
    if mode not in TF32_MODES:
        raise ConfigError(f"tf32={value!r}: choose one of {list(TF32_MODES)}")
    return mode


def float32_math(accelerator: str, tf32: bool | str) -> bool | str:
    """On CUDA: TF32 products for the float32 work outside the islands (10 significant bits in the products, float32
    accumulation), and the islands switch it off for their forward passes. ``tf32``: True (matrix products and
    convolutions: what JAX's default precision does on an Ampere or newer GPU), ``"conv"`` (convolutions only:
    PyTorch's own defaults since 1.12, cuDNN on, matmul off) or False. A model whose regularizer also needs exact
    float32 gradients (``Regularizer.exact_float32``: the Hessian penalties) runs with it off (``tf32: auto``).
    Returns what is on (True, ``"conv"`` or False); nothing changes off CUDA (False)."""
    if device_type(accelerator) != "cuda":
        return False
    conv_only = str(tf32).lower() == "conv"
    matmul = not conv_only and str(tf32).lower() == "true"
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = matmul or conv_only
    _TF32_GUARD["on"] = True
    return "conv" if conv_only else matmul
