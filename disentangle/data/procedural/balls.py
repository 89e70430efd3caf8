"""Two coloured balls on white (Cliff's balls data, Cliff paper App. E: Ahuja et al.'s balls as
rendered by Lachapelle et al.'s code), drawn on the device from continuous ball positions.

Unlike the other procedural renderers this one takes **positions**, not factor class indices: the balls data set is
a sample of continuous coordinates (:class:`~disentangle.data.synthetic.BallsDataModule` draws them from the grid
density and keeps them as fixed-point factors), not a factorial grid, so it is not in ``RENDERERS``.

Positions ``(x1, y1, x2, y2)`` are in frame units: x from the left edge, y from the **bottom** edge (Lachapelle et
al. draw with pygame and flip the surface vertically), centre pixel position ``(x R, (1 - y) R)``. As in their code:
64 x 64 RGB at the default resolution, white background, radius ``int(RADIUS * R)`` pixels (10 px at 64, from
``ball_rad = 2 * 0.08``), ball 1 teal [2, 156, 154], ball 2 red [222, 100, 100] drawn on top of ball 1 (the balls
may overlap and occlude). Their pygame circles snap centres to whole pixels; here the edge is anti-aliased with the
area-coverage approximation ``clamp(r + 0.5 - distance, 0, 1)`` (as :mod:`.circles`) so sub-pixel moves change the
image. Pixels are in [0, 1] (our choice; their default keeps [0, 255]).

Determinism: only elementwise, correctly rounded float32 arithmetic per pixel, so a sample's image is bitwise the
same whatever batch or chunk it is rendered in.
"""
from __future__ import annotations

import torch

__all__ = ["BALL_COLOURS", "NUM_BALLS", "NUM_CHANNELS", "RADIUS", "radius_pixels", "render"]

NUM_BALLS = 2
NUM_CHANNELS = 3
RADIUS = 0.16                                      # frame units (Lachapelle et al.: ball_rad = 2.0 * 0.08)
BALL_COLOURS = ((2, 156, 154), (222, 100, 100))    # 8-bit RGB of ball 1 and ball 2 (their COLOURS_[:2])
BACKGROUND = 1.0                                   # white

# Pixels rendered per internal chunk: bounds peak memory.
_CHUNK_PIXELS = 1 << 20


def radius_pixels(resolution: int) -> int:
    """Ball radius in pixels at ``resolution``: ``int(RADIUS * resolution)``, as pygame receives it."""
    return int(RADIUS * resolution)


def render(positions: torch.Tensor, resolution: int = 64) -> torch.Tensor:
    """Render balls at ``positions`` (Cliff paper App. E).

    Args:
        positions: float tensor (B, 4): (x1, y1, x2, y2) in frame units (x from the left, y from the bottom),
            finite; values outside [0, 1] put a ball (partly) out of the frame.
        resolution: output height and width in pixels (int >= 8).

    Returns:
        float32 (B, 3, resolution, resolution) in [0, 1] on ``positions.device``.
    """
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 8:
        raise ValueError(f"balls: resolution must be an int >= 8, got {resolution!r}")
    if not isinstance(positions, torch.Tensor):
        raise ValueError(f"balls: positions must be a torch.Tensor, got {type(positions).__name__}")  # noqa: TRY004
    if not positions.dtype.is_floating_point:
        raise ValueError(f"balls: positions must be a float tensor of frame coordinates, got {positions.dtype}")
    if positions.ndim != 2 or positions.shape[1] != 2 * NUM_BALLS:
        raise ValueError(f"balls: positions must have shape (B, {2 * NUM_BALLS}) = (x1, y1, x2, y2), "
                         f"got shape {tuple(positions.shape)}")
    if not bool(torch.isfinite(positions).all()):
        raise ValueError("balls: positions must be finite")
    device = positions.device
    positions = positions.float()
    n = positions.shape[0]
    out = torch.empty(n, NUM_CHANNELS, resolution, resolution, device=device)
    colours = torch.tensor(BALL_COLOURS, dtype=torch.float32, device=device) / 255.0     # (2, 3)
    pixel = torch.arange(resolution, device=device, dtype=torch.float32) + 0.5          # pixel centres, px
    cols, rows = pixel.view(1, 1, -1), pixel.view(1, -1, 1)
    radius = float(radius_pixels(resolution))
    chunk = max(1, _CHUNK_PIXELS // (resolution * resolution))
    for start in range(0, n, chunk):
        part = positions[start:start + chunk]
        image = torch.full((part.shape[0], NUM_CHANNELS, resolution, resolution), BACKGROUND, device=device)
        for ball in range(NUM_BALLS):   # ball 2 last: on top
            cx = (part[:, 2 * ball] * resolution).view(-1, 1, 1)
            cy = ((1.0 - part[:, 2 * ball + 1]) * resolution).view(-1, 1, 1)
            dx, dy = cols - cx, rows - cy
            coverage = (radius + 0.5 - (dx * dx + dy * dy).sqrt()).clamp_(0.0, 1.0).unsqueeze(1)
            image = image * (1.0 - coverage) + colours[ball].view(1, -1, 1, 1) * coverage
        out[start:start + chunk] = image
    return out
