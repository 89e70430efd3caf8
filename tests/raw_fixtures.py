"""Writers of small raw datasets in the exact official formats (names, keys, dtypes, layouts) on reduced
factor grids, for tests of the readers, the conversion and anything downstream of the cache.

Each writer returns ``(path, factors)``: the raw file/folder (or zip archive) as ``find_raw`` would find it
and the ground-truth class indices (N, n_factors) int64 in the ``conf/data`` order. Every image encodes its
own index: a constant colour ``index_colour(i)`` over its top half (an ``i``-dependent ramp below), or for
dSprites the bits of ``i`` in row 0, so that ``decode_index`` recovers it, also after the 128 -> 64 resize
(SmallNORB: a grey level over the top half, ``decode_grey``).
"""
from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
from PIL import Image

from disentangle.data.formats import OFFICIAL

# official column orders of the files and their reduced default grids
SHAPES3D_SIZES = (2, 3, 2, 2, 2, 3)  # floor_hue, wall_hue, object_hue, scale, shape, orientation
SHAPES3D_TO_CONF = (0, 2, 5, 3, 4, 1)
DSPRITES_SIZES = (1, 2, 2, 3, 2, 2)  # color, shape, scale, orientation, posX, posY
MPI3D_SIZES = (2, 2, 1, 2, 1, 3, 2)
FALCOR3D_SIZES = (2, 2, 1, 1, 2, 1, 2)
ISAAC3D_SIZES = (2, 2, 1, 1, 1, 1, 2, 1, 2)
CARS3D_FILES = ("car_001_mesh.mat", "car_007_mesh.mat", "car_012_mesh.mat")  # object types, in name order
CARS3D_GRID = (2, 3)  # elevations, azimuths (the official 4, 24)
SMALLNORB_SIZES = (2, 2, 2, 2)  # category, elevation, azimuth, lighting (the official 5, 9, 18, 6)
SMALLNORB_INSTANCES = ((4, 6), (0, 1))  # training, testing (the official 4, 6, 7, 8, 9 and 0, 1, 2, 3, 5)


def grid(sizes) -> np.ndarray:
    """All class combinations of a full factorial grid in C order, (prod(sizes), len(sizes)) int64."""
    n = int(np.prod(sizes))
    return np.stack(np.unravel_index(np.arange(n), sizes), axis=1).astype(np.int64)


def index_colour(i: int) -> tuple[int, int, int]:
    return i % 256, (i // 256) % 256, 40 + (i * 7) % 200


def decode_index(image: np.ndarray) -> int:
    """Index encoded in an image (C, H, W) uint8 written by these fixtures (read at the top-left)."""
    if image.shape[0] == 1:
        bits = image[0, 0, :20] > 127
        return int(sum(1 << k for k, b in enumerate(bits) if b))
    r, g = int(image[0, 4, 4]), int(image[1, 4, 4])
    return r + 256 * g


def rgb_image(i: int, size: int) -> np.ndarray:
    """(size, size, 3) uint8: top half the constant colour of ``i``, bottom half an ``i``-dependent ramp."""
    img = np.empty((size, size, 3), dtype=np.uint8)
    img[: size // 2] = index_colour(i)
    yy, xx = np.mgrid[size // 2: size, 0:size]
    for ch in range(3):
        img[size // 2:, :, ch] = (xx * (1 + (i + ch) % 5) + yy * 3 + 11 * i + 50 * ch) % 256
    return img


def _label_values(classes: np.ndarray, sizes, lows=None, highs=None) -> np.ndarray:
    values = np.empty(classes.shape, dtype=np.float64)
    for j, k in enumerate(sizes):
        lo = 0.0 if lows is None else lows[j]
        hi = 1.0 if highs is None else highs[j]
        values[:, j] = np.linspace(lo, hi, k)[classes[:, j]] if k > 1 else lo
    return values


def write_shapes3d(directory, sizes=SHAPES3D_SIZES, seed: int = 0):
    """``3dshapes.h5``: images (N, 64, 64, 3) uint8, labels (N, 6) float64 in the official column order
    (rows shuffled so that classes must come from the values, not the row order)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    official = grid(sizes)[np.random.default_rng(seed).permutation(int(np.prod(sizes)))]
    lows = (0.0, 0.0, 0.0, 0.75, 0.0, -30.0)
    highs = (0.9, 0.9, 0.9, 1.25, float(sizes[4] - 1), 30.0)
    labels = _label_values(official, sizes, lows, highs)
    images = np.stack([rgb_image(i, 64) for i in range(len(labels))])
    path = directory / OFFICIAL["shapes3d"].files[None]
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images)
        f.create_dataset("labels", data=labels)
    return path, official[:, list(SHAPES3D_TO_CONF)]


def write_dsprites(directory, sizes=DSPRITES_SIZES):
    """``dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz``: imgs (N, 64, 64) uint8 in {0, 1},
    latents_classes (N, 6) int64 and latents_values (N, 6) float64 (colour first)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    classes = grid(sizes)
    n = len(classes)
    imgs = np.zeros((n, 64, 64), dtype=np.uint8)
    for i in range(n):
        imgs[i, 0, :20] = [(i >> k) & 1 for k in range(20)]
        s = 8 + 4 * int(classes[i, 2])
        x, y = 4 + 6 * int(classes[i, 4]), 4 + 6 * int(classes[i, 5])
        imgs[i, 10 + y: 10 + y + s, x: x + s] = 1
    values = _label_values(classes, sizes)
    path = directory / OFFICIAL["dsprites"].files[None]
    np.savez_compressed(path, imgs=imgs, latents_classes=classes, latents_values=values)
    return path, classes[:, 1:]


def write_mpi3d(directory, sizes=MPI3D_SIZES, variant: str | None = None):
    """MPI3D npz (``real3d_complicated_shapes_ordered.npz`` or the variant's file): key ``images``
    (N, 64, 64, 3) uint8, factors implicit in the C-order index."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n = int(np.prod(sizes))
    images = np.stack([rgb_image(i, 64) for i in range(n)])
    path = directory / OFFICIAL["mpi3d"].files[variant]
    np.savez_compressed(path, images=images)
    return path, grid(sizes)


def _png_bytes(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _write_png_release(name: str, labels_name: str, directory, sizes, archive: bool, seed: int):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n = int(np.prod(sizes))
    classes = grid(sizes)[np.random.default_rng(seed).permutation(n)]
    labels = _label_values(classes, sizes)
    folder = OFFICIAL[name].files[None]
    files = {f"{folder}/{labels_name}": _npy_bytes(labels)}
    for i in range(n):
        files[f"{folder}/images/{i:06d}.png"] = _png_bytes(rgb_image(i, 128))
    if archive:
        path = directory / OFFICIAL[name].archive
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
            for member, data in files.items():
                zf.writestr(member, data)
        return path, classes
    (directory / folder / "images").mkdir(parents=True, exist_ok=True)
    for member, data in files.items():
        (directory / member).write_bytes(data)
    return directory / folder, classes


def write_falcor3d(directory, sizes=FALCOR3D_SIZES, archive: bool = False, seed: int = 0):
    """``Falcor3D_down128/`` (or ``Falcor3D_down128.zip`` holding it): ``images/{i:06d}.png`` 128x128 RGB
    and ``train-rec.labels`` (.npy format) (N, 7) float64 in [0, 1]; rows shuffled."""
    return _write_png_release("falcor3d", "train-rec.labels", directory, sizes, archive, seed)


def write_isaac3d(directory, sizes=ISAAC3D_SIZES, archive: bool = False, seed: int = 0):
    """``Isaac3D_down128/`` (or ``Isaac3D_down128.zip``): ``images/{i:06d}.png`` 128x128 RGB and
    ``labels.npy`` (N, 9) float64 in [0, 1]; rows shuffled."""
    return _write_png_release("isaac3d", "labels.npy", directory, sizes, archive, seed)



# --------------------------------------------------------------------------------------------- cars3d
def write_cars3d(directory, grid_shape=CARS3D_GRID, files=CARS3D_FILES, archive: bool = False):
    """Cars3D as in ``nips2015-analogy-data.tar.gz``: a folder ``cars/`` of ``car_*_mesh.mat`` (MATLAB v5,
    compressed), each holding ``im`` uint8 (128, 128, 3, azimuth, elevation); or the tar.gz itself with
    ``data/cars/*.mat`` (members out of name order, beside other folders). Image (elevation e, azimuth a,
    object o) encodes its cache index, the C-order index over (elevation, azimuth, object_type)."""
    from scipy.io import savemat

    directory = Path(directory)
    elevations, azimuths = grid_shape
    sizes = (elevations, azimuths, len(files))
    truth = grid(sizes)
    blobs = {}
    for o, filename in enumerate(files):
        im = np.empty((128, 128, 3, azimuths, elevations), dtype=np.uint8)
        for e in range(elevations):
            for a in range(azimuths):
                im[:, :, :, a, e] = rgb_image(int(np.ravel_multi_index((e, a, o), sizes)), 128)
        buf = io.BytesIO()
        savemat(buf, {"im": im, "label": np.array([o])}, do_compression=True)
        blobs[filename] = buf.getvalue()
    if archive:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / OFFICIAL["cars3d"].archive
        members = {"data/README": b"analogy data", "data/shapes/shape_001.mat": next(iter(blobs.values()))}
        members.update({f"data/cars/{name}": blob for name, blob in reversed(blobs.items())})
        with tarfile.open(path, "w:gz") as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path, truth
    folder = directory / OFFICIAL["cars3d"].files[None]
    folder.mkdir(parents=True, exist_ok=True)
    for filename, blob in blobs.items():
        (folder / filename).write_bytes(blob)
    return folder, truth


# --------------------------------------------------------------------------------------------- smallnorb
NORB_UINT8, NORB_INT32 = 0x1E3D4C55, 0x1E3D4C54


def norb_matrix(array: np.ndarray) -> bytes:
    """``array`` (uint8 or int32) in the small NORB binary matrix format: int32 magic, int32 ndim, max(3, ndim)
    int32 dimensions (padded with 1), then the little-endian data."""
    magic = NORB_UINT8 if array.dtype == np.uint8 else NORB_INT32
    dims = list(array.shape) + [1] * max(0, 3 - array.ndim)
    header = np.array([magic, array.ndim, *dims], dtype="<i4").tobytes()
    return header + np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def smallnorb_rows(sizes=SMALLNORB_SIZES, instances=SMALLNORB_INSTANCES, seed: int = 0):
    """Rows of the fixture's training and testing files, concatenated in file order: (factors (N, 4) int64 in
    the conf order, instance (N,) int64). Every (category, instance, elevation, azimuth, lighting) once per
    split, shuffled."""
    rng = np.random.default_rng(seed)
    factors, instance = [], []
    for split in instances:
        combos = grid((sizes[0], len(split), *sizes[1:]))[rng.permutation(int(np.prod(sizes)) * len(split))]
        factors.append(combos[:, [0, 2, 3, 4]])
        instance.append(np.asarray(split, dtype=np.int64)[combos[:, 1]])
    return np.concatenate(factors), np.concatenate(instance)


def norb_grey(i: int) -> int:
    return 20 + 3 * i


def decode_grey(image: np.ndarray) -> int:
    """Index encoded in a grey SmallNORB fixture image (1, H, W) uint8 (read at the top-left)."""
    return (int(image[0, 4, 4]) - 20) // 3


def write_smallnorb(directory, sizes=SMALLNORB_SIZES, instances=SMALLNORB_INSTANCES, gz: bool = True,
                    seed: int = 0):
    """The six small NORB files ``smallnorb-5x46789x9x18x6x2x96x96-training-{dat,cat,info}.mat`` and
    ``smallnorb-5x01235x9x18x6x2x96x96-testing-...`` (gzipped ``.mat.gz`` as distributed, or plain): ``dat``
    uint8 (N, 2, 96, 96) stereo pairs, ``cat`` int32 (N,), ``info`` int32 (N, 4) = instance, elevation,
    azimuth (0, 2, ...), lighting. Rows as :func:`smallnorb_rows`; the left image of row i (file order,
    training first) encodes i, the right one is its negative. Returns the training dat file and the factors."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    factors, instance = smallnorb_rows(sizes, instances, seed)
    official = OFFICIAL["smallnorb"]
    names = (official.files[None], *official.companions)
    half = len(factors) // 2
    yy, xx = np.mgrid[48:96, 0:96]
    for split, (lo, hi) in enumerate(((0, half), (half, len(factors)))):
        dat = np.empty((hi - lo, 2, 96, 96), dtype=np.uint8)
        for i in range(lo, hi):
            dat[i - lo, 0, :48] = norb_grey(i)
            dat[i - lo, 0, 48:] = (xx + 2 * yy + 13 * i) % 256
            dat[i - lo, 1] = 255 - dat[i - lo, 0]
        f = factors[lo:hi]
        info = np.stack([instance[lo:hi], f[:, 1], 2 * f[:, 2], f[:, 3]], axis=1).astype(np.int32)
        arrays = (dat, f[:, 0].astype(np.int32), info)
        for name, array in zip(names[3 * split: 3 * split + 3], arrays):
            data = norb_matrix(array)
            if gz:
                (directory / (name + ".gz")).write_bytes(gzip.compress(data, compresslevel=1))
            else:
                (directory / name).write_bytes(data)
    return directory / (names[0] + (".gz" if gz else "")), factors


# --------------------------------------------------------------------------------------------- causal chamber photos
PHOTOS_SIZES = (2, 2, 2, 2, 3)  # red, green, blue, pol_1, pol_2: levels of the fixture (binned back to classes)


def photo_colour(i: int) -> tuple[int, int, int]:
    """A colour that survives JPEG: steps of 8 per index."""
    return (8 * i) % 256, 8 * (i // 32) % 256, 128


def decode_photo_index(image: np.ndarray) -> int:
    """Index of a fixture photograph (C, H, W) uint8 (top-left block's colour, rounded to the steps of 8)."""
    r, g = (round(float(image[c, 2:10, 2:10].mean()) / 8) for c in (0, 1))
    return r + 32 * g


def write_causalchamber_photos(directory, sizes=PHOTOS_SIZES, archive: bool = True, experiment: str = "uniform",
                               seed: int = 0):
    """``lt_crl_benchmark_v1.zip`` as its owners publish it (or the extracted ``lt_crl_benchmark_v1/``):
    ``lt_crl_benchmark_v1/<experiment>/<experiment>.csv`` (sensor columns plus red, green, blue, pol_1, pol_2 and
    image_file; rows shuffled) and ``images_64/<image_file>`` 64x64 JPEGs. Each factor takes ``sizes[i]`` equally
    frequent levels (red/green/blue 0..255, angles -60..60), so equal-frequency binning recovers the classes.
    Returns the archive (or folder) and the classes in row order."""
    import csv

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    classes = grid(sizes)[np.random.default_rng(seed).permutation(int(np.prod(sizes)))]
    levels = [np.linspace(0, 255, n).round() for n in sizes[:3]] + [np.linspace(-60, 60, n) for n in sizes[3:]]
    files = {}
    rows = io.StringIO()
    writer = csv.writer(rows)
    writer.writerow(["timestamp", "red", "green", "blue", "pol_1", "pol_2", "angle_1", "aperture", "image_file"])
    for i, cls in enumerate(classes):
        values = [levels[k][c] for k, c in enumerate(cls)]
        name = f"{i}_{1700000000 + i}.jpg"
        writer.writerow([1700000000 + i, *values, values[3] + 0.03, 1.8, name])
        img = np.zeros((64, 64, 3), dtype=np.uint8)
        img[:32] = photo_colour(i)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=100, subsampling=0)
        files[f"lt_crl_benchmark_v1/{experiment}/images_64/{name}"] = buf.getvalue()
    files[f"lt_crl_benchmark_v1/{experiment}/{experiment}.csv"] = rows.getvalue().encode()
    if archive:
        path = directory / "lt_crl_benchmark_v1.zip"
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
            for member, data in files.items():
                zf.writestr(member, data)
        return path, classes
    for member, data in files.items():
        (directory / member).parent.mkdir(parents=True, exist_ok=True)
        (directory / member).write_bytes(data)
    return directory / "lt_crl_benchmark_v1", classes


WRITERS = {
    "shapes3d": write_shapes3d,
    "dsprites": write_dsprites,
    "mpi3d": write_mpi3d,
    "falcor3d": write_falcor3d,
    "isaac3d": write_isaac3d,
    "cars3d": write_cars3d,
    "smallnorb": write_smallnorb,
    "causalchamber_photos": write_causalchamber_photos,
}
