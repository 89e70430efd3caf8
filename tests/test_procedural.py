"""Tests of the procedural renderers (disentangle.data.procedural): contract, determinism, factor
sensitivity, rough injectivity, factor semantics and input validation. Also writes one PNG montage per
dataset to /tmp for visual inspection."""
from __future__ import annotations

import pytest
import torch

from disentangle.data.procedural import RENDERERS, shapes2d, sprites

MODULES = list(RENDERERS.items())
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
RES = 64
# One pixel changing fully (0 -> 1 in every channel) moves the mean absolute difference of a RES x RES
# image by 1 / RES^2. Sprites are binary, so "the image changed" means exactly "at least one pixel
# flipped", i.e. MAD >= 1 / RES^2. For shapes2d we demand the same one full pixel's worth of change:
# far above float noise (the renderer is deterministic, so unchanged images differ by exactly 0) and
# several times below the smallest change seen for any single-factor step (about 7 pixels' worth, for
# the smallest scale step of the smallest object).
MIN_MAD = 1.0 / RES**2


def random_factors(module, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, s, (n,), generator=g) for s in module.FACTOR_SIZES], dim=1)


def mad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-sample mean absolute difference."""
    return (a - b).abs().flatten(1).mean(dim=1)


def sprite_orientation_period(shape_index: torch.Tensor) -> torch.Tensor:
    """Orientation steps after which a sprite looks the same: the square is invariant under 90-degree
    rotations (10 of the 40 steps) and the ellipse under 180-degree ones (20 steps); the heart has no
    rotational symmetry (40)."""
    periods = torch.tensor([sprites.SYMMETRY_PERIOD[name] for name in sprites.SHAPE_NAMES])
    return periods[shape_index]


def canonical(module, factors: torch.Tensor) -> torch.Tensor:
    """Factors with known image symmetries quotiented out (only sprites' orientation has any)."""
    if module is not sprites:
        return factors
    out = factors.clone()
    out[:, 2] = factors[:, 2] % sprite_orientation_period(factors[:, 0])
    return out


# ---------------------------------------------------------------------------------------------------
# Contract
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", MODULES)
@pytest.mark.parametrize("resolution", [8, 16, 32, 33, 48, 64])
@pytest.mark.parametrize("device", DEVICES)
def test_output_contract(name, module, resolution, device):
    factors = random_factors(module, 12, seed=resolution).to(device)
    images = module.render(factors, resolution)
    assert images.shape == (12, module.NUM_CHANNELS, resolution, resolution)
    assert images.dtype == torch.float32
    assert images.device == factors.device
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert len(module.FACTOR_NAMES) == len(module.FACTOR_SIZES)


def test_registry_and_metadata():
    assert RENDERERS["sprites"] is sprites and RENDERERS["shapes2d"] is shapes2d  # others register beside them
    assert sprites.FACTOR_NAMES == ("shape", "scale", "orientation", "pos_x", "pos_y")
    assert sprites.FACTOR_SIZES == (3, 6, 40, 32, 32) and sprites.NUM_CHANNELS == 1
    assert shapes2d.FACTOR_NAMES == ("floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation")
    assert shapes2d.FACTOR_SIZES == (10, 10, 10, 8, 4, 15) and shapes2d.NUM_CHANNELS == 3


@pytest.mark.parametrize("name,module", MODULES)
def test_empty_batch_and_default_resolution(name, module):
    empty = torch.zeros(0, len(module.FACTOR_SIZES), dtype=torch.long)
    assert module.render(empty).shape == (0, module.NUM_CHANNELS, 64, 64)


# ---------------------------------------------------------------------------------------------------
# Determinism
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", MODULES)
def test_deterministic_across_calls_and_batches(name, module):
    factors = random_factors(module, 40, seed=1)
    batch = module.render(factors, RES)
    assert torch.equal(batch, module.render(factors, RES))
    # Reversed batch order, and every sample alone: bitwise the same image.
    assert torch.equal(module.render(factors.flip(0), RES), batch.flip(0))
    for i in range(0, 40, 3):
        assert torch.equal(module.render(factors[i:i + 1], RES)[0], batch[i])
    # Other integer dtypes give the same result.
    assert torch.equal(module.render(factors.int(), RES), batch)


@pytest.mark.parametrize("name,module", MODULES)
def test_chunking_does_not_change_images(name, module, monkeypatch):
    factors = random_factors(module, 23, seed=2)
    whole = module.render(factors, 32)
    monkeypatch.setattr(module, "_CHUNK_PIXELS", 5 * 32 * 32)   # chunks of 5 samples (last one of 3)
    assert torch.equal(module.render(factors, 32), whole)


# ---------------------------------------------------------------------------------------------------
# Every factor matters; distinct factors give distinct images
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", MODULES)
def test_every_factor_changes_the_image(name, module):
    """For 200 random base combinations and each factor, moving only that factor to (a) the next
    value and (b) a random other value changes the image by more than MIN_MAD. The next value is the
    hardest case (smallest change). For sprites, orientation values that are symmetry-equivalent for
    the sprite's shape (square: 90 degrees apart, ellipse: 180 degrees) are excluded: those images may
    legitimately coincide."""
    n = 200
    base = random_factors(module, n, seed=3)
    base_images = module.render(base, RES)
    g = torch.Generator().manual_seed(4)
    for k, (factor, size) in enumerate(zip(module.FACTOR_NAMES, module.FACTOR_SIZES)):
        period = torch.full((n,), size)
        if module is sprites and factor == "orientation":
            period = sprite_orientation_period(base[:, 0])
        # Offsets in [1, size) that are not a multiple of the symmetry period.
        offsets = torch.randint(1, size, (n,), generator=g)
        offsets = torch.where(offsets % period == 0, offsets + 1, offsets)
        for label, offset in (("next", torch.ones(n, dtype=torch.long)), ("random", offsets)):
            other = base.clone()
            other[:, k] = (base[:, k] + offset) % size
            diff = mad(module.render(other, RES), base_images)
            worst = int(diff.argmin())
            assert diff.min() > MIN_MAD * 0.999, (
                f"{name}: changing {factor} ({label}) from {base[worst].tolist()} to {other[worst].tolist()} "
                f"changes the image by only {diff.min().item():.2e}"
            )


@pytest.mark.parametrize("name,module", MODULES)
def test_distinct_factors_give_distinct_images(name, module):
    """Rough injectivity: 1000 random pairs of different combinations (modulo sprites' rotational
    symmetries) all render to different images."""
    a = random_factors(module, 1000, seed=5)
    b = random_factors(module, 1000, seed=6)
    keep = (canonical(module, a) != canonical(module, b)).any(dim=1)
    a, b = a[keep], b[keep]
    assert len(a) > 900
    diff = mad(module.render(a, RES), module.render(b, RES))
    assert diff.min() > MIN_MAD * 0.999


def test_sprites_symmetric_orientations_coincide():
    """The flip side of the exclusions above: a square rotated by 90 degrees and an ellipse rotated by
    180 degrees are the same set of points, so at most a few boundary pixels (float rounding of the
    rotation) may differ."""
    base = random_factors(sprites, 100, seed=7)
    base[:, 0] = torch.arange(100) % 2            # squares and ellipses
    other = base.clone()
    other[:, 2] = (base[:, 2] + sprite_orientation_period(base[:, 0])) % 40
    diff = mad(sprites.render(other, RES), sprites.render(base, RES))
    assert diff.max() <= 2 * MIN_MAD


# ---------------------------------------------------------------------------------------------------
# Factor semantics
# ---------------------------------------------------------------------------------------------------

def test_sprites_binary_and_inside_frame():
    images = sprites.render(random_factors(sprites, 300, seed=8), RES)
    assert set(images.unique().tolist()) == {0.0, 1.0}
    # Largest sprites of every shape and orientation at the four extreme positions touch no border pixel.
    grid = torch.cartesian_prod(torch.arange(3), torch.tensor([5]), torch.arange(40),
                                torch.tensor([0, 31]), torch.tensor([0, 31]))
    images = sprites.render(grid, RES)[:, 0]
    assert images.sum(dim=(1, 2)).min() > 0
    border = images[:, 0].sum() + images[:, -1].sum() + images[:, :, 0].sum() + images[:, :, -1].sum()
    assert border == 0


def test_sprites_position_and_scale_semantics():
    """pos_x moves the sprite right, pos_y moves it down, scale makes it larger."""
    base = torch.tensor([2, 3, 5, 16, 16])
    coords = torch.arange(RES, dtype=torch.float32)

    def sweep(k: int, values: range) -> torch.Tensor:
        factors = base.repeat(len(values), 1)
        factors[:, k] = torch.tensor(list(values))
        return sprites.render(factors, RES)[:, 0]

    imgs = sweep(3, range(32))
    centroid_x = (imgs * coords).sum(dim=(1, 2)) / imgs.sum(dim=(1, 2))
    assert (centroid_x.diff() > 0).all()
    imgs = sweep(4, range(32))
    centroid_y = (imgs * coords[:, None]).sum(dim=(1, 2)) / imgs.sum(dim=(1, 2))
    assert (centroid_y.diff() > 0).all()
    area = sweep(1, range(6)).sum(dim=(1, 2))
    assert (area.diff() > 0).all()
    # Sprite size at max scale, as a fraction of the frame: about a fifth to a third (like dSprites).
    big = sprites.render(torch.tensor([[s, 5, 0, 16, 16] for s in range(3)]), RES)[:, 0]
    widths = big.amax(dim=1).sum(dim=1) / RES
    assert ((widths > 0.2) & (widths < 0.45)).all(), widths


def test_shapes2d_colourful_and_continuous():
    images = shapes2d.render(random_factors(shapes2d, 100, seed=9), RES)
    r, g, b = images.unbind(dim=1)
    # Non-trivial colour: channels differ substantially (not a grey image repeated 3 times).
    assert (r - g).abs().mean() > 0.05 and (g - b).abs().mean() > 0.05 and (r - b).abs().mean() > 0.05
    # Soft edges: many values strictly between 0 and 1, not a handful of flat colours.
    assert images.unique().numel() > 1000


def test_shapes2d_hues_act_on_their_surface():
    """The top row is always wall: wall_hue changes it; floor_hue and object_hue never do. The object
    hue changes only a minority of the image (the object), the wall and floor hues a large part."""
    n = 100
    base = random_factors(shapes2d, n, seed=10)
    images = shapes2d.render(base, RES)
    changed = {}
    for k, name in enumerate(shapes2d.FACTOR_NAMES[:3]):
        other = base.clone()
        other[:, k] = (base[:, k] + 5) % 10
        changed[name] = (shapes2d.render(other, RES) != images).any(dim=1)    # (n, H, W) bool
    assert changed["wall_hue"][:, 0].all()
    assert not changed["floor_hue"][:, 0].any() and not changed["object_hue"][:, 0].any()
    fraction = {k: v.float().mean(dim=(1, 2)) for k, v in changed.items()}
    assert (fraction["wall_hue"] > 0.25).all() and (fraction["floor_hue"] > 0.2).all()
    assert ((fraction["object_hue"] > 0.01) & (fraction["object_hue"] < 0.25)).all()


def test_shapes2d_scale_and_orientation_semantics():
    """scale enlarges the object (pixels an object_hue change touches); orientation tilts the horizon
    monotonically (wall height of the left minus the right image column changes sign at the middle value)."""
    for shape in range(4):
        factors = torch.tensor([[1, 3, 6, s, shape, 7] for s in range(8)])
        recoloured = factors.clone()
        recoloured[:, 2] = 0
        area = (shapes2d.render(factors, RES) != shapes2d.render(recoloured, RES)).any(dim=1).sum(dim=(1, 2))
        assert (area.diff() > 0).all(), (shape, area)
    factors = torch.tensor([[1, 3, 6, 4, 0, o] for o in range(15)])
    rewalled = factors.clone()
    rewalled[:, 1] = 8
    wall = (shapes2d.render(factors, RES) != shapes2d.render(rewalled, RES)).any(dim=1)
    tilt = wall[:, :, 0].sum(dim=1) - wall[:, :, -1].sum(dim=1)   # left minus right wall height
    # Negative angles: horizon higher on the right; zero: level; positive: higher on the left.
    assert (tilt[:7] > 0).all() and tilt[7] == 0 and (tilt[8:] < 0).all(), tilt
    assert (tilt.diff() < 0).all(), tilt


# ---------------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", MODULES)
def test_invalid_inputs_raise(name, module):
    n = len(module.FACTOR_SIZES)
    good = torch.zeros(4, n, dtype=torch.long)
    with pytest.raises(ValueError, match="shape"):
        module.render(torch.zeros(n, dtype=torch.long))
    with pytest.raises(ValueError, match="shape"):
        module.render(torch.zeros(4, n + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        module.render(good.float())
    with pytest.raises(ValueError, match="resolution"):
        module.render(good, 7)
    with pytest.raises(ValueError, match="resolution"):
        module.render(good, 32.0)
    with pytest.raises(ValueError, match="Tensor"):
        module.render(good.tolist())
    for k, (factor, size) in enumerate(zip(module.FACTOR_NAMES, module.FACTOR_SIZES)):
        for bad in (size, -1):
            factors = good.clone()
            factors[2, k] = bad
            with pytest.raises(ValueError, match=f"'{factor}'.*{bad}"):
                module.render(factors)


# ---------------------------------------------------------------------------------------------------
# Montage for visual inspection
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,module", MODULES)
def test_save_montage(name, module, tmp_path):
    """Rows: one factor swept over all its values (10 evenly spaced ones if it has more), the others at
    their middle value. Written to /tmp/<name>_montage.png for a human to look at."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 10
    rows = len(module.FACTOR_SIZES)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.2))
    middle = torch.tensor([s // 2 for s in module.FACTOR_SIZES])
    if module is sprites:
        middle[2] = 0    # upright sprites in the other rows (the middle orientation is 180 degrees)
    for k, (factor, size) in enumerate(zip(module.FACTOR_NAMES, module.FACTOR_SIZES)):
        values = torch.arange(size) if size <= cols else torch.linspace(0, size - 1, cols).round().long()
        factors = middle.repeat(len(values), 1)
        factors[:, k] = values
        images = module.render(factors, RES).permute(0, 2, 3, 1).squeeze(-1)
        for c, ax in enumerate(axes[k]):
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(values):
                ax.axis("off")
                continue
            ax.imshow(images[c].numpy(), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(str(int(values[c])), fontsize=7)
        axes[k, 0].set_ylabel(factor, fontsize=8)
    fig.tight_layout()
    path = f"/tmp/{name}_montage.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
