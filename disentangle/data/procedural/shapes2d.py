"""A 2-D RGB scene with Shapes3D-like factors, rendered procedurally from factor indices (no download).

The scene is a wall (top) meeting a floor (bottom) at a horizon, with one shaded object standing on the
floor in front of the wall, and its soft shadow. Factors, in Shapes3D's order:

* ``floor_hue`` (10): hue of the floor, ``k / 10`` on the colour wheel. The floor is darker and more
  saturated than the wall and brightens towards the viewer, so floor and wall differ even at equal hues.
* ``wall_hue`` (10): hue of the wall, ``k / 10``; a light pastel.
* ``object_hue`` (10): hue of the object, ``k / 10``; fully saturated and shaded, so it stands out from
  a wall or floor of the same hue.
* ``scale`` (8): object size, linearly from 0.75 to 1.25 of the base size (as in Shapes3D). The object
  keeps resting on the floor, so it grows upwards.
* ``shape`` (4): 0 = cube (a square with a vertical light gradient), 1 = cylinder (narrower, upright,
  with elliptic top and bottom and a lit top face), 2 = sphere (a disc with a radial highlight),
  3 = pill (a capsule lying on the floor: wider than tall, with round ends).
* ``orientation`` (15): camera angle, linearly over [-30, 30] degrees (index 7 is level). The camera
  rolls by that angle, so the whole scene appears rotated the other way (at positive angles it turns
  clockwise: the horizon drops on the right, the object leans right) and pans sideways in proportion
  (the object shifts right at positive angles). So every step visibly changes the image, even for the
  rotation-symmetric sphere.

Edges are anti-aliased with a smoothstep over one pixel of the (approximate) signed distance to each
outline, so images are continuous-valued in [0, 1] and look the same at any resolution.

Determinism: colours and angles come from small lookup tables indexed by the factors, and the per-pixel
work uses only correctly rounded arithmetic (+, -, *, /, sqrt, abs, min/max, clamp), so a sample's image
is bitwise identical whatever batch it is rendered in.
"""
from __future__ import annotations

import math

import torch

from .validation import check_factors

FACTOR_NAMES: tuple[str, ...] = ("floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation")
FACTOR_SIZES: tuple[int, ...] = (10, 10, 10, 8, 4, 15)
NUM_CHANNELS: int = 3

SHAPE_NAMES: tuple[str, ...] = ("cube", "cylinder", "sphere", "pill")

# --- Scene layout, in frame units (the frame is [-0.5, 0.5]^2, y grows downwards). ---
HORIZON_Y = 0.05        # wall above, floor below (before the camera roll)
GROUND_Y = 0.30         # where the object touches the floor
BASE_HALF_HEIGHT = 0.15  # object half-height at scale 1.0 (cube side = 0.3 of the frame)
MAX_ROLL_DEG = 30.0
MAX_PAN = 0.12          # horizontal camera shift at +-30 degrees
# (half-width, half-height) of each shape's outline, relative to the scaled base half-height.
_SHAPE_EXTENT = ((1.0, 1.0), (0.8, 1.0), (1.0, 1.0), (1.3, 0.55))
# Cylinder caps: ellipses whose height is this fraction of the cylinder's width (a view from slightly above).
_CAP_RATIO = 0.3
# Pill: radius of its round ends (it lies along x, so its half-width is the half-length of its straight
# part plus this radius, see _SHAPE_EXTENT).
_PILL_RADIUS = 0.55

# --- Colours (HSV saturation, value). Different saturation/value per surface keeps surfaces apart. ---
_WALL_SV = (0.40, 1.00)
_FLOOR_SV = (0.65, 0.80)
_OBJECT_SV = (1.00, 1.00)
_SHADOW_STRENGTH = 0.45

# Pixels rendered per internal chunk: bounds peak memory (~30 float32 temporaries of this size).
_CHUNK_PIXELS = 1 << 18


def render(factors: torch.Tensor, resolution: int = 64) -> torch.Tensor:
    """Render scenes for integer factor indices.

    Args:
        factors: integer tensor (B, 6) of class indices in ``FACTOR_NAMES`` order,
            each in ``[0, FACTOR_SIZES[k])``.
        resolution: output height and width in pixels (>= 8).

    Returns:
        float32 tensor (B, 3, resolution, resolution) with values in [0, 1], on ``factors.device``.
    """
    factors = check_factors("shapes2d", factors, resolution, FACTOR_NAMES, FACTOR_SIZES)
    out = torch.empty(factors.shape[0], NUM_CHANNELS, resolution, resolution, device=factors.device)
    chunk = max(1, _CHUNK_PIXELS // (resolution * resolution))
    for start in range(0, factors.shape[0], chunk):
        part = factors[start:start + chunk]
        # Sort by shape so each shape's outline runs on a contiguous slice (a view, no gather), then put
        # the images back in input order with one gather.
        order = torch.argsort(part[:, 4], stable=True)
        images = _render_sorted(part[order], resolution)
        out[start:start + chunk] = images.index_select(0, torch.argsort(order))   # inverse permutation
    return out


def hsv_to_rgb(h: torch.Tensor, s: float, v: float) -> torch.Tensor:
    """Hues ``h`` in [0, 1) (any shape) -> RGB in [0, 1], shape ``h.shape + (3,)``."""
    # Standard closed form: channel n uses k = (n + 6h) mod 6 and v - v*s*clamp(min(k, 4 - k), 0, 1).
    n = torch.tensor([5.0, 3.0, 1.0], device=h.device)
    k = torch.remainder(n + 6.0 * h.unsqueeze(-1), 6.0)
    return v - v * s * torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)


# ----------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------

def _render_sorted(factors: torch.Tensor, resolution: int) -> torch.Tensor:
    """(B, 6) int64, sorted by shape -> (B, 3, H, W) float32 image."""
    device = factors.device
    pixel = 1.0 / resolution
    floor_i, wall_i, object_i, scale_i, shape, orient_i = factors.unbind(dim=1)

    # Lookup tables, computed in Python float64 and rounded once, then indexed: per-sample values never
    # depend on the batch or on the device's implementation of linspace/sin/cos (see module docstring).
    hues = _table([k / FACTOR_SIZES[0] for k in range(FACTOR_SIZES[0])], device)
    scales = _table([0.75 + 0.5 * k / (FACTOR_SIZES[3] - 1) for k in range(FACTOR_SIZES[3])], device)
    degrees = [-MAX_ROLL_DEG + 2 * MAX_ROLL_DEG * k / (FACTOR_SIZES[5] - 1) for k in range(FACTOR_SIZES[5])]
    cos_t = _table([math.cos(math.radians(d)) for d in degrees], device)
    sin_t = _table([math.sin(math.radians(d)) for d in degrees], device)
    pan_t = _table([MAX_PAN * d / MAX_ROLL_DEG for d in degrees], device)
    extent_t = _table(_SHAPE_EXTENT, device)

    def per_sample(t: torch.Tensor) -> torch.Tensor:   # (B,) or (B, C) -> broadcastable over (B, [C,] H, W)
        return t.reshape(t.shape + (1, 1))

    wall_rgb = per_sample(hsv_to_rgb(hues, *_WALL_SV)[wall_i])          # (B, 3, 1, 1)
    floor_rgb = per_sample(hsv_to_rgb(hues, *_FLOOR_SV)[floor_i])
    object_rgb = per_sample(hsv_to_rgb(hues, *_OBJECT_SV)[object_i])

    # Camera: roll the image plane by the orientation angle and pan sideways (scene coords xs, ys).
    cos, sin, pan = per_sample(cos_t[orient_i]), per_sample(sin_t[orient_i]), per_sample(pan_t[orient_i])
    centres = (torch.arange(resolution, device=device, dtype=torch.float32) + 0.5) / resolution - 0.5
    u, v = centres.view(1, 1, -1), centres.view(1, -1, 1)
    xs = cos * u + sin * v - pan
    ys = cos * v - sin * u

    # Object size and placement: it stands on the ground line, centred at xs = 0, so in object-centred
    # coordinates (ox, oy) only the vertical offset depends on the sample.
    size = BASE_HALF_HEIGHT * scales[scale_i]                           # (B,)
    half_w, half_h = size * extent_t[shape, 0], size * extent_t[shape, 1]
    ox = xs
    oy = ys - per_sample(GROUND_Y - half_h)

    floor_weight, floor_light = _background(xs, ys, ox, oy, per_sample(half_w), per_sample(half_h), pixel)
    alpha, shade = _object(ox, oy, shape, size, pixel)
    # Composite wall, floor and object as a weighted sum of three flat colours: the weights are computed
    # on one channel and sum to at most 1, so only three multiply-adds per colour channel remain.
    behind = 1.0 - alpha
    image = (wall_rgb * ((1.0 - floor_weight) * behind).unsqueeze(1)
             + floor_rgb * (floor_light * floor_weight * behind).unsqueeze(1)
             + object_rgb * (shade * alpha).unsqueeze(1))
    return image.clamp_(0.0, 1.0)


def _background(xs, ys, ox, oy, half_w, half_h, pixel) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the floor is (a weight, 1 below the rolled horizon, 0 on the wall above it) and how lit it is,
    including the object's soft shadow; each (B, H, W)."""
    below = ys - HORIZON_Y
    floor_weight = _coverage(-below, pixel)
    # Floor brightens towards the viewer (a cue of depth, and it separates floor from wall).
    floor_light = 0.6 + 0.4 * (below * 2.0).clamp(0.0, 1.0)
    # Shadow: a flat ellipse on the ground line, slightly to the right (light from the upper left).
    sx = (ox - 0.25 * half_w) / (1.3 * half_w)
    sy = (oy - half_h) / (0.35 * half_h)
    shadow = (1.0 - (sx * sx + sy * sy)).clamp(0.0, 1.0)
    return floor_weight, floor_light * (1.0 - _SHADOW_STRENGTH * shadow * shadow)


def _object(x, y, shape, size, pixel) -> tuple[torch.Tensor, torch.Tensor]:
    """Coverage alpha and brightness shade (each (B, H, W)) of every sample's object.

    ``x, y`` are object-centred coordinates; samples are sorted by shape, so each shape's outline is
    evaluated only on its own contiguous slice of the batch.
    """
    alpha = torch.empty_like(x)
    shade = torch.empty_like(x)
    start = 0
    for draw, count in zip((_cube, _cylinder, _sphere, _pill), _counts(shape, 4)):
        rows = slice(start, start + count)
        a = size[rows].view(-1, 1, 1)
        distance, shade[rows] = draw(x[rows] / a, y[rows] / a)
        # The outlines work in units of the half-height a; convert the distance back to frame units.
        alpha[rows] = _coverage(distance * a, pixel)
        start += count
    return alpha, shade


# Each shape below works in object coordinates divided by the scaled half-height (so the outline does
# not depend on the scale) and returns (signed distance to the outline, negative inside; shade in [0, 1]).

def _cube(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Square of half-side 1, lit from above: brightness falls from 1.0 at the top to 0.55 at the bottom."""
    distance = _box_distance(x, y, 1.0, 1.0)
    shade = 0.775 - 0.225 * y.clamp(-1.0, 1.0)
    return distance, shade


def _cylinder(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Upright cylinder seen from slightly above: a body with elliptic ends and a bright top face."""
    w = _SHAPE_EXTENT[1][0]
    cap = _CAP_RATIO * w
    body = _box_distance(x, y, w, 1.0 - cap)
    top = _ellipse_distance(x, y + (1.0 - cap), w, cap)
    bottom = _ellipse_distance(x, y - (1.0 - cap), w, cap)
    distance = torch.minimum(body, torch.minimum(top, bottom))
    # Curved side: brightest a little left of the axis, darker towards the silhouette.
    t = x / w + 0.3
    side = (1.0 - 0.45 * t * t).clamp(0.35, 1.0)
    top_weight = _coverage(top, 0.08)
    shade = side + (1.0 - side) * top_weight
    return distance, shade


def _sphere(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Disc of radius 1 with a highlight towards the upper left."""
    distance = (x * x + y * y).sqrt() - 1.0
    hx, hy = x + 0.4, y + 0.4
    shade = (1.0 - 0.3 * (hx * hx + hy * hy)).clamp(0.35, 1.0)
    return distance, shade


def _pill(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Capsule lying along x: a straight part with half-circle ends, lit from above."""
    r = _PILL_RADIUS
    half_length = _SHAPE_EXTENT[3][0] - r
    dx = (x.abs() - half_length).clamp(min=0.0)
    distance = (dx * dx + y * y).sqrt() - r
    t = y / r + 0.3
    shade = (1.0 - 0.45 * t * t).clamp(0.35, 1.0)
    return distance, shade


# ----------------------------------------------------------------------------------------------------
# Geometry helpers
# ----------------------------------------------------------------------------------------------------

def _counts(sorted_classes: torch.Tensor, n: int) -> list[int]:
    """How many samples of each class (bincount without its nondeterministic CUDA kernel)."""
    classes = torch.arange(n, device=sorted_classes.device)
    return (sorted_classes.unsqueeze(1) == classes).sum(dim=0).tolist()


def _table(values, device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)


def _coverage(distance: torch.Tensor, width: float) -> torch.Tensor:
    """Smoothstep from 1 (``distance <= -width/2``, inside) to 0 (``distance >= width/2``, outside)."""
    t = (0.5 - distance / width).clamp(0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _box_distance(x: torch.Tensor, y: torch.Tensor, hw: float, hh: float) -> torch.Tensor:
    """Exact signed distance to an axis-aligned box with half-sizes (hw, hh)."""
    qx, qy = x.abs() - hw, y.abs() - hh
    ox, oy = qx.clamp(min=0.0), qy.clamp(min=0.0)
    return (ox * ox + oy * oy).sqrt() + torch.maximum(qx, qy).clamp(max=0.0)


def _ellipse_distance(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Approximate signed distance to an ellipse with semi-axes (a, b): f / |grad f|, first-order exact
    at the outline, which is all a one-pixel smoothstep needs. Deep inside it tends to -inf (clamped by
    the smoothstep), never NaN."""
    xa, yb = x / a, y / b
    f = xa * xa + yb * yb - 1.0
    gx, gy = xa / a, yb / b
    grad = 2.0 * (gx * gx + gy * gy).sqrt()
    return f / grad.clamp(min=1e-6)
