"""Input checks shared by the procedural renderers: one ValueError naming the problem for any bad input."""
from __future__ import annotations

from collections.abc import Sequence

import torch


def check_factors(
    dataset: str, factors: torch.Tensor, resolution: int, names: Sequence[str], sizes: Sequence[int]
) -> torch.Tensor:
    """Validate a renderer's ``(factors, resolution)``; return the factors as int64."""
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 8:
        raise ValueError(f"{dataset}: resolution must be an int >= 8, got {resolution!r}")
    if not isinstance(factors, torch.Tensor):
        # ValueError, not TypeError: the renderers' contract is one exception type for any bad input.
        raise ValueError(f"{dataset}: factors must be a torch.Tensor, got {type(factors).__name__}")  # noqa: TRY004
    if factors.dtype.is_floating_point or factors.dtype.is_complex or factors.dtype == torch.bool:
        raise ValueError(f"{dataset}: factors must be an integer tensor of class indices, got {factors.dtype}")
    if factors.ndim != 2 or factors.shape[1] != len(names):
        raise ValueError(
            f"{dataset}: factors must have shape (B, {len(names)}) for factors {tuple(names)}, "
            f"got shape {tuple(factors.shape)}"
        )
    factors = factors.long()
    if factors.shape[0] > 0:
        lo, hi = factors.min(dim=0).values.tolist(), factors.max(dim=0).values.tolist()
        for k, (name, size) in enumerate(zip(names, sizes)):
            if lo[k] < 0 or hi[k] >= size:
                bad = lo[k] if lo[k] < 0 else hi[k]
                raise ValueError(f"{dataset}: factor {name!r} (column {k}) has index {bad} outside [0, {size})")
    return factors
