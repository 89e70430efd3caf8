"""Argument checks shared across the package, written once.

Each check raises ``ValueError`` with a one-line message naming the key, the bad value and what is allowed, and
returns the (converted) value when it passes. Standard library only, so any module can import it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CAUSALCHAMBER_MISSING", "FP16_OFF_CUDA", "PRECISIONS", "PRECISION_ALIASES", "TF32_NEEDS_CUDA", "check_choice", "check_counts", "check_int", "check_nonnegative", "check_one_of"]

# trainer.precision's values and their short forms (Lightning's names): here, torch-free, so that a command's
# config checks can name them before torch is imported; what may run where is disentangle.foundation.precision's
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "64-true")
PRECISION_ALIASES = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed", "64": "64-true"}
FP16_OFF_CUDA = ("trainer.precision=16-mixed needs a CUDA GPU (float16 with a gradient scaler); on the {device} use "
                 "trainer.precision=bf16-mixed")
# bench tf32 on another device: refused by the command line before torch is imported, and by bench_tf32 itself
TF32_NEEDS_CUDA = "bench tf32 needs a CUDA device: TF32 exists only there (--device cuda)"
# data=causalchamber without its extra: said before torch is imported (preflight), and by the data module
CAUSALCHAMBER_MISSING = ("data=causalchamber needs the causalchamber package, which is not installed: "
                         "pip install 'disentangle-quantized[causalchamber]'")


def check_choice(key: str, value: str, allowed: Iterable[str]) -> str:
    """``value`` unless it is not among ``allowed``: "key='x' is not supported; allowed values: 'a', 'b'"."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{key}={value!r} is not supported; allowed values: {', '.join(map(repr, allowed))}")
    return value


def check_one_of(key: str, value: str, allowed: Iterable[str]) -> str:
    """``value`` unless it is not among ``allowed``: "key must be one of ['a', 'b'] (got 'x')" (the wording of
    the config-facing modules; :func:`check_choice` is the metrics' wording)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{key} must be one of {list(allowed)} (got {value!r})")
    return value


def check_nonnegative(key: str, value: float) -> float:
    """``float(value)`` unless it is negative or NaN: "key must be a non-negative number (got -1.0)"."""
    value = float(value)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{key} must be a non-negative number (got {value})")
    return value


def check_int(key: str, value: object, minimum: int) -> int:
    """``int(value)`` unless it is not a whole number >= ``minimum`` (bools rejected):
    "key must be an integer >= 1 (got 0)"."""
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{key} must be an integer >= {minimum} (got {value})")
    return int(value)


def check_counts(**counts: tuple[int, int]) -> None:
    """Every ``key=(value, minimum)`` has ``int(value) >= minimum``, else "key must be >= minimum, got value"."""
    for key, (value, minimum) in counts.items():
        if int(value) < minimum:
            raise ValueError(f"{key} must be >= {minimum}, got {value}")
