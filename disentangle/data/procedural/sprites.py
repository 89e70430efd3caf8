"""dSprites-like binary sprites, rendered procedurally from factor indices (no download).

Factors, in the official dSprites order minus its constant ``color`` factor:

* ``shape`` (3): 0 = square, 1 = ellipse (2:1, so rotation is visible), 2 = heart.
* ``scale`` (6): sprite size, linearly from 0.5 to 1.0 of the largest size (as in dSprites).
* ``orientation`` (40): counter-clockwise rotation by ``2*pi*k/40``, i.e. uniform over [0, 2*pi).
  Symmetric shapes repeat: the square every 10 steps (90 degrees), the ellipse every 20 (180 degrees).
* ``pos_x`` (32): horizontal position, linearly over [0, 1] from the left edge to the right edge.
* ``pos_y`` (32): vertical position, linearly over [0, 1] from the top edge to the bottom edge.

Positions are mapped to sprite centres in ``[m, 1 - m]`` (frame units), where ``m`` is the radius of the
circle enclosing the largest sprite plus a small pad, so every sprite at every rotation stays inside the
frame without touching its border pixels.

Each shape is an implicit function ``f(x, y) <= 0`` in sprite-local coordinates in units of that
enclosing radius (the unit circle encloses every shape); it is evaluated at pixel centres, so the image
is a function of the factors alone and any resolution works. The output is exactly binary.

Sizes (at max scale, as fractions of the frame): square side 0.32, ellipse 0.38 x 0.19, heart about
0.35 wide, i.e. about dSprites' sizes. They are chosen so that at 64 x 64 every one-step change of any
factor (except symmetric orientations) flips at least two pixels, checked exhaustively over all 737,280
combinations: one scale step grows the square's half-side by just over one pixel, one position step
moves the sprite by 1.07 pixels, and one orientation step moves the smallest square's corners by 1.1.

Determinism: trigonometric values come from small lookup tables indexed by the factors, and the
per-pixel work uses only correctly rounded arithmetic (+, -, *, /, abs, max, compare). Hence a sample's
image is bitwise identical whatever batch it is rendered in (vectorised and scalar tails agree).
"""
from __future__ import annotations

import math

import torch

from .validation import check_factors

FACTOR_NAMES: tuple[str, ...] = ("shape", "scale", "orientation", "pos_x", "pos_y")
FACTOR_SIZES: tuple[int, ...] = (3, 6, 40, 32, 32)
NUM_CHANNELS: int = 1

SHAPE_NAMES: tuple[str, ...] = ("square", "ellipse", "heart")

# Radius (frame units) of the circle enclosing every sprite at scale 1.0: the square's circumradius.
MAX_RADIUS = 0.225
# Gap between that circle and the frame edge at the extreme positions (about one pixel at 64 x 64).
_PAD = 0.015
# Orientation periods (in steps of 2*pi/40) of shapes with rotational symmetry; the heart has none.
SYMMETRY_PERIOD: dict[str, int] = {"square": 10, "ellipse": 20, "heart": 40}

# Pixels rendered per internal chunk: bounds peak memory (~10 float32 temporaries of this size).
_CHUNK_PIXELS = 1 << 19

_HALF_SQRT2 = math.sqrt(0.5)
# Ellipse semi-axes, in units of MAX_RADIUS: 2:1 so that rotation is visible.
_ELLIPSE_AXES = (0.85, 0.425)
# The heart curve (x^2 + y^2 - 1)^3 - x^2 y^3 = 0 spans x in [-1.14, 1.14], y in [-1, 1.24]; its smallest
# enclosing circle is centred at (0, 0.25) with radius 1.25, which we map onto a circle of radius 0.85.
_HEART_SCALE = 1.25 / 0.85
_HEART_CENTRE_Y = 0.25


def render(factors: torch.Tensor, resolution: int = 64) -> torch.Tensor:
    """Render sprites for integer factor indices.

    Args:
        factors: integer tensor (B, 5) of class indices in ``FACTOR_NAMES`` order,
            each in ``[0, FACTOR_SIZES[k])``.
        resolution: output height and width in pixels (>= 8).

    Returns:
        float32 tensor (B, 1, resolution, resolution) with values in {0, 1}, on ``factors.device``.
    """
    factors = check_factors("sprites", factors, resolution, FACTOR_NAMES, FACTOR_SIZES)
    out = torch.empty(factors.shape[0], NUM_CHANNELS, resolution, resolution, device=factors.device)
    chunk = max(1, _CHUNK_PIXELS // (resolution * resolution))
    for start in range(0, factors.shape[0], chunk):
        part = factors[start:start + chunk]
        # Sort by shape so each shape's implicit function runs on a contiguous slice (a view, no gather),
        # then put the images back in input order with one gather.
        order = torch.argsort(part[:, 0], stable=True)
        images = _render_sorted(part[order], resolution).unsqueeze(1)
        out[start:start + chunk] = images.index_select(0, torch.argsort(order))   # inverse permutation
    return out


def _render_sorted(factors: torch.Tensor, resolution: int) -> torch.Tensor:
    """(B, 5) int64, sorted by shape -> (B, H, W) float32 binary image."""
    device = factors.device
    # Lookup tables, computed in Python float64 and rounded once, then indexed: per-sample values never
    # depend on the batch or on the device's implementation of linspace/sin/cos (see module docstring).
    scales = _table([0.5 + 0.5 * k / (FACTOR_SIZES[1] - 1) for k in range(FACTOR_SIZES[1])], device)
    angles = [2 * math.pi * k / FACTOR_SIZES[2] for k in range(FACTOR_SIZES[2])]
    cos_t = _table([math.cos(a) for a in angles], device)
    sin_t = _table([math.sin(a) for a in angles], device)
    positions = _table([k / (FACTOR_SIZES[3] - 1) for k in range(FACTOR_SIZES[3])], device)

    shape, scale_i, orient_i, px_i, py_i = factors.unbind(dim=1)
    radius = (MAX_RADIUS * scales[scale_i]).view(-1, 1, 1)
    cos = cos_t[orient_i].view(-1, 1, 1)
    sin = sin_t[orient_i].view(-1, 1, 1)
    # Keep the enclosing circle of the largest sprite (plus a pad) inside [0, 1]^2.
    margin = MAX_RADIUS + _PAD
    cx = (margin + (1 - 2 * margin) * positions[px_i]).view(-1, 1, 1)
    cy = (margin + (1 - 2 * margin) * positions[py_i]).view(-1, 1, 1)

    centres = (torch.arange(resolution, device=device, dtype=torch.float32) + 0.5) / resolution
    dx = centres.view(1, 1, -1) - cx                 # rightwards
    dy = cy - centres.view(1, -1, 1)                 # upwards (image rows grow downwards)
    # Rotate the sampling point by -theta, which rotates the sprite by +theta (counter-clockwise).
    x = (cos * dx + sin * dy) / radius
    y = (cos * dy - sin * dx) / radius

    inside = torch.empty_like(x, dtype=torch.bool)
    start = 0
    for implicit, count in zip((_square, _ellipse, _heart), _counts(shape, 3)):
        rows = slice(start, start + count)
        inside[rows] = implicit(x[rows], y[rows]) <= 0
        start += count
    return inside.float()


def _counts(sorted_classes: torch.Tensor, n: int) -> list[int]:
    """How many samples of each class (bincount without its nondeterministic CUDA kernel)."""
    classes = torch.arange(n, device=sorted_classes.device)
    return (sorted_classes.unsqueeze(1) == classes).sum(dim=0).tolist()


def _table(values: list[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)


def _square(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Axis-aligned square inscribed in the unit circle (corners on it)."""
    return torch.maximum(x.abs(), y.abs()) - _HALF_SQRT2


def _ellipse(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Ellipse with semi-axes 0.85 (along x at orientation 0) and 0.425."""
    x = x / _ELLIPSE_AXES[0]
    y = y / _ELLIPSE_AXES[1]
    return x * x + y * y - 1


def _heart(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Upright heart (x^2 + y^2 - 1)^3 - x^2 y^3 <= 0, rescaled so its enclosing circle has radius 0.85."""
    x = x * _HEART_SCALE
    y = y * _HEART_SCALE + _HEART_CENTRE_Y
    r = x * x + y * y - 1
    return r * r * r - x * x * y * y * y
