"""Scores out of distribution: a ``data.split`` run's held-out combinations, against the combinations it trained on.

Schott et al. (ICLR 2022, §3-4) fit a readout from the representation to the factors on training combinations and
score its R² on held-out ones; Montero et al. (ICLR 2021, §3) score the reconstruction of held-out combinations.
:func:`readout_scores` gives both sides of the readout for one representation:

* ``in``: fitted on 80% of the in-distribution evaluation rows (combinations training could draw), scored on the
  other 20%, so that the in and out numbers come from readouts fitted the same way;
* ``out``: fitted on every in-distribution evaluation row, scored on the held-out set.

A factor with one class (nothing to read out) gets ``None`` and is left out of the mean.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .readout import READOUTS, readout_r2

__all__ = ["IN_FRACTION", "MIN_READOUT_ROWS", "readout_scores"]

IN_FRACTION = 0.8  # the share of in-distribution rows the ``in`` readout is fitted on
MIN_READOUT_ROWS = 10  # in-distribution rows below which no readout is fitted


def _score(fit_z, fit_y, test_z, test_y, sizes: np.ndarray, kind: str, seed: int) -> dict:
    varying = sizes >= 2
    got = readout_r2(fit_z, fit_y[:, varying], test_z, test_y[:, varying], sizes[varying], kind=kind, seed=seed)
    per_factor: list[float | None] = [None] * len(sizes)
    for slot, value in zip(np.flatnonzero(varying), got["per_factor"]):
        per_factor[int(slot)] = float(value)
    return {"per_factor": per_factor, "mean": got["mean"]}


def readout_scores(in_latents: np.ndarray, in_factors: np.ndarray, out_latents: np.ndarray,
                   out_factors: np.ndarray, factor_sizes: Sequence[int], *, kinds: Sequence[str] = READOUTS,
                   seed: int = 0) -> dict:
    """``{kind: {"in": {"per_factor", "mean"}, "out": {...}}}`` for each readout ``kind`` (module doc).

    ``in_*`` are the in-distribution rows (at least 10), ``out_*`` the held-out ones (at least 2)."""
    sizes = np.asarray([int(s) for s in factor_sizes])
    in_latents, out_latents = np.asarray(in_latents), np.asarray(out_latents)
    in_factors, out_factors = np.asarray(in_factors), np.asarray(out_factors)
    if len(in_latents) < MIN_READOUT_ROWS or len(out_latents) < 2:
        raise ValueError(f"readout: needs at least {MIN_READOUT_ROWS} in-distribution and 2 held-out rows (got {len(in_latents)} "
                         f"and {len(out_latents)})")
    if not (sizes >= 2).any():
        raise ValueError(f"readout: no factor has two classes or more (factor sizes {sizes.tolist()})")
    order = np.random.default_rng(seed).permutation(len(in_latents))
    cut = round(IN_FRACTION * len(order))
    fit, test = order[:cut], order[cut:]
    out = {}
    for kind in kinds:
        out[kind] = {
            "in": _score(in_latents[fit], in_factors[fit], in_latents[test], in_factors[test], sizes, kind, seed),
            "out": _score(in_latents, in_factors, out_latents, out_factors, sizes, kind, seed),
        }
    return out
