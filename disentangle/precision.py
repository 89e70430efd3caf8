"""Mixed precision that keeps every estimator right (``trainer.precision``).

Under ``bf16-mixed`` (CPU or CUDA) or ``16-mixed`` (CUDA) Lightning runs the training step inside
``torch.autocast``: convolutions and matrix products run in the low-precision type, which is where the time goes.
Some terms cannot be computed from low-precision values: a finite-difference Hessian divides second differences by
ε² = 0.01 and would measure rounding noise (bf16 keeps 8 significant bits), a kernel density or a log-density table
sums many exponentials of nearly equal numbers, a softmax over codes or a KL between nearly equal distributions
loses its small differences. Those parts are **fp32 islands**: :func:`in_float32` switches autocast off and casts
their inputs to float32, so they compute exactly what a float32 run computes from the same inputs. Each module
says in its docstring which of its parts are islands and why. Outside autocast (``32-true``, evaluation) the
islands are plain calls: a float32 run is bitwise what it was.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

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


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """Autocast switched off inside (on every device type where it is on); tensors keep their dtypes."""
    with contextlib.ExitStack() as stack:
        for kind in DEVICE_TYPES:
            if torch.is_autocast_enabled(kind):
                stack.enter_context(torch.autocast(kind, enabled=False))
        yield


def to_float32(value: Any) -> Any:
    """Floating tensors (also inside lists, tuples and dicts) as float32; everything else unchanged."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, (list, tuple)):
        return type(value)(to_float32(v) for v in value)
    if isinstance(value, dict):
        return {k: to_float32(v) for k, v in value.items()}
    return value


def in_float32(fn: F) -> F:
    """Decorate a function whose result must be computed in float32 (an fp32 island): under autocast its tensor
    arguments are cast to float32 and autocast is off while it runs; outside autocast it is called unchanged."""

    @functools.wraps(fn)
    def island(*args, **kwargs):
        if not autocast_active():
            return fn(*args, **kwargs)
        with full_precision():
            return fn(*to_float32(args), **to_float32(kwargs))

    return island  # type: ignore[return-value]
