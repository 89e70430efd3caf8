"""Friede et al.'s "Circles" toy data (§3.3, App. 6): one filled grey disc on black, rendered procedurally
from factor indices (the paper renders with Spriteworld, App. 6; this cheap stand-in is our choice).

Factors:

* ``pos_x`` (40): horizontal position of the centre, linearly over [0.2, 0.8] of the frame width, left to right.
* ``pos_y`` (40): vertical position of the centre, linearly over [0.2, 0.8] of the frame height, top to bottom.

The disc has radius 0.1 of the frame (6.4 px at 64 × 64) and grey level ``GREY`` = 0.8; the paper's X/Y ranges
and circle size are missing from its text, so these values are our choice. One position step moves
the centre by 0.6 / 39 of the frame (0.98 px at 64 × 64), so 40 values per axis sample the range about once per
pixel; the full grid has 1,600 images.

The edge is anti-aliased: a pixel's coverage falls linearly from 1 to 0 over one pixel of signed distance
between its centre and the circle, ``clamp(0.5 - distance / pixel, 0, 1)`` (the standard area-coverage
approximation), so images take values in [0, GREY] and sub-pixel moves change them.

Determinism: the centres come from a lookup table computed in Python float64 and rounded once, and the per-pixel
work uses only correctly rounded arithmetic (-, *, /, +, sqrt, clamp), so a sample's image is bitwise identical
whatever batch (or chunk) it is rendered in.
"""
from __future__ import annotations

import torch

from .validation import check_factors

FACTOR_NAMES: tuple[str, ...] = ("pos_x", "pos_y")
FACTOR_SIZES: tuple[int, ...] = (40, 40)
NUM_CHANNELS: int = 1

RADIUS = 0.1                 # frame units (our choice: r ≈ 0.1·64 px)
POSITION_RANGE = (0.2, 0.8)  # centre range, frame units (our choice)
GREY = 0.8                   # disc intensity on a black (0) background

# Pixels rendered per internal chunk: bounds peak memory (~6 float32 temporaries of this size).
_CHUNK_PIXELS = 1 << 20


def centres(size: int) -> list[float]:
    """Centre coordinate (frame units) of each of a position factor's ``size`` values (range: our choice)."""
    lo, hi = POSITION_RANGE
    return [lo + (hi - lo) * k / (size - 1) for k in range(size)]


def render(factors: torch.Tensor, resolution: int = 64) -> torch.Tensor:
    """Render discs for integer factor indices (Friede et al.'s Circles, §3.3).

    Args:
        factors: integer tensor (B, 2) of class indices ``(pos_x, pos_y)``, each in ``[0, 40)``.
        resolution: output height and width in pixels (>= 8).

    Returns:
        float32 tensor (B, 1, resolution, resolution) with values in [0, GREY], on ``factors.device``.
    """
    factors = check_factors("circles", factors, resolution, FACTOR_NAMES, FACTOR_SIZES)
    device = factors.device
    out = torch.empty(factors.shape[0], NUM_CHANNELS, resolution, resolution, device=device)
    cx_table = torch.tensor(centres(FACTOR_SIZES[0]), dtype=torch.float32, device=device)
    cy_table = torch.tensor(centres(FACTOR_SIZES[1]), dtype=torch.float32, device=device)
    pixel_centres = (torch.arange(resolution, device=device, dtype=torch.float32) + 0.5) / resolution
    u, v = pixel_centres.view(1, 1, -1), pixel_centres.view(1, -1, 1)   # x along columns, y along rows
    pixel = 1.0 / resolution
    chunk = max(1, _CHUNK_PIXELS // (resolution * resolution))
    for start in range(0, factors.shape[0], chunk):
        part = factors[start:start + chunk]
        dx = u - cx_table[part[:, 0]].view(-1, 1, 1)
        dy = v - cy_table[part[:, 1]].view(-1, 1, 1)
        distance = (dx * dx + dy * dy).sqrt() - RADIUS
        coverage = (0.5 - distance / pixel).clamp_(0.0, 1.0)
        out[start:start + chunk, 0] = coverage * GREY
    return out
