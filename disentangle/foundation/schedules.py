"""Learning-rate schedules shared by the model's and the regularizers' optimizers (read from configs)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

KINDS = ("cosine",)
AFTER = ("hold", "periodic")


def cosine_factor(step: int, steps: int, final_ratio: float, after: str = "hold") -> float:
    """lr(step) / lr(0) of a cosine decay from 1 to ``final_ratio`` over ``steps`` steps. After that: ``hold``
    the final value (our choice: FactorQVAE App. A says nothing after ``steps``; docs/fidelity.md), or
    ``periodic``: PyTorch's CosineAnnealingLR formula, which rises back to 1 at 2·steps (the FactorQVAE
    authors' code)."""
    t = min(step, steps) if after == "hold" else step
    return final_ratio + (1.0 - final_ratio) * 0.5 * (1.0 + math.cos(math.pi * t / steps))


def build_scheduler(optimizer: torch.optim.Optimizer, schedule: Mapping | None, key: str):
    """A per-step LambdaLR for ``schedule`` = {kind: cosine, steps, final_lr, after} (None: constant lr).
    ``key`` names the config entry in errors."""
    if not schedule:
        return None
    kind = schedule.get("kind", "cosine")
    if kind not in KINDS:
        raise ValueError(f"{key}.kind must be one of {list(KINDS)} (got {kind!r})")
    steps = int(schedule.get("steps", 0))
    if steps < 1:
        raise ValueError(f"{key}.steps must be >= 1 (got {schedule.get('steps')})")
    after = schedule.get("after", "hold")
    if after not in AFTER:
        raise ValueError(f"{key}.after must be one of {list(AFTER)} (got {after!r})")
    base = optimizer.param_groups[0]["lr"]
    final = float(schedule.get("final_lr", 0.0))
    if not 0 <= final <= base:
        raise ValueError(f"{key}.final_lr must be in [0, lr={base}] (got {final})")
    ratio = final / base
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cosine_factor(step, steps, ratio, after))
