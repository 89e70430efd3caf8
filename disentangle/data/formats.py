"""Readers of the official raw dataset files (QLAE paper App. C.1, Tripod App. B.1, Friede et al. App. 6).

``read_raw`` checks the structure of a raw file or folder, reads its factors as int64 class indices in the
order of ``conf/data/<name>.yaml`` and streams its images as uint8 (b, C, 64, 64) chunks in index order, so
that even the 737,280 Isaac3D PNGs never sit decoded in memory at once. ``convert.py`` writes them into the
cache that ``prepared.py`` reads. Every structural problem raises a one-line :class:`FormatError` naming the
file and what was expected; factor counts that differ from the official ones only warn.

A dataset may also carry *nuisance* variables (SmallNORB's object instance): varied by the data but not factors,
so several images share one factor vector. ``RawData.nuisance`` holds them; the cache stores them beside the
factors.
"""
from __future__ import annotations

import gzip
import io
import os
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

RESOLUTION = 64
PNG_RESOLUTION = 128

_CORRUPT = (OSError, EOFError, zipfile.BadZipFile, zlib.error, ValueError, KeyError, RuntimeError)


class FormatError(ValueError):
    """A raw dataset file does not have the official structure; the message names the file and what was
    expected."""


@dataclass(frozen=True)
class Official:
    """Official raw layout of one dataset: the raw file/folder name per variant (``None`` = default
    variant), an optional archive name, and the factor names and sizes in the ``conf/data`` order.

    ``extracted``: other paths (relative to the data root) where the raw folder may sit once the archive is
    unpacked; ``companions``: further files needed beside the main one (SmallNORB's six files);
    ``gzip``: each file may also be present gzipped, as ``<name>.gz``."""

    files: dict[str | None, str]
    factor_names: tuple[str, ...]
    factor_sizes: dict[str | None, tuple[int, ...]]
    archive: str | None = None
    extracted: tuple[str, ...] = ()
    companions: tuple[str, ...] = ()
    gzip: bool = False
    binned: bool = False  # measured continuous factors cut into factor_sizes bins: the sizes are a setting

    def file(self, variant: str | None) -> str:
        if variant not in self.files:
            raise FormatError(f"unknown variant {variant!r}; expected one of {sorted(map(str, self.files))}")
        return self.files[variant]

    def sizes(self, variant: str | None) -> tuple[int, ...]:
        return self.factor_sizes.get(variant, self.factor_sizes[None])


_MPI3D_NAMES = ("object_color", "object_shape", "object_size", "camera_height", "background_color",
                "robot_x", "robot_y")
_MPI3D_SMALL = (6, 6, 2, 3, 3, 40, 40)

OFFICIAL: dict[str, Official] = {
    "shapes3d": Official(
        files={None: "3dshapes.h5"},
        factor_names=("floor_hue", "object_hue", "orientation", "scale", "shape", "wall_hue"),
        factor_sizes={None: (10, 10, 15, 8, 4, 10)},
    ),
    "dsprites": Official(
        files={None: "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"},
        factor_names=("shape", "scale", "orientation", "pos_x", "pos_y"),
        factor_sizes={None: (3, 6, 40, 32, 32)},
    ),
    "mpi3d": Official(
        files={None: "real3d_complicated_shapes_ordered.npz",
               "complex": "real3d_complicated_shapes_ordered.npz",
               "toy": "mpi3d_toy.npz", "realistic": "mpi3d_realistic.npz", "real": "mpi3d_real.npz"},
        factor_names=_MPI3D_NAMES,
        factor_sizes={None: (4, 4, 2, 3, 3, 40, 40), "complex": (4, 4, 2, 3, 3, 40, 40),
                      "toy": _MPI3D_SMALL, "realistic": _MPI3D_SMALL, "real": _MPI3D_SMALL},
    ),
    "falcor3d": Official(
        files={None: "Falcor3D_down128"},
        factor_names=("lighting_intensity", "lighting_x", "lighting_y", "lighting_z",
                      "camera_x", "camera_y", "camera_z"),
        factor_sizes={None: (5, 6, 6, 6, 6, 6, 6)},
        archive="Falcor3D_down128.zip",
    ),
    "isaac3d": Official(
        files={None: "Isaac3D_down128"},
        factor_names=("object_shape", "robot_x", "robot_y", "camera_height", "object_scale",
                      "lighting_intensity", "lighting_direction", "object_color", "wall_color"),
        factor_sizes={None: (3, 8, 5, 4, 4, 4, 6, 4, 4)},
        archive="Isaac3D_down128.zip",
    ),
    # The causal chamber's light-tunnel photographs with their measured factors (Gamella, Bing and Runge 2025's
    # lt_crl_benchmark_v1): one experiment per variant, each factor cut into factor_sizes equal-frequency bins
    "causalchamber_photos": Official(
        files={None: "lt_crl_benchmark_v1", **{e: "lt_crl_benchmark_v1" for e in (
            "uniform", "buchholz_1_obs", "buchholz_1_red", "buchholz_1_green", "buchholz_1_blue",
            "buchholz_1_pol_1", "buchholz_1_pol_2", "citris_1")}},
        factor_names=("red", "green", "blue", "pol_1", "pol_2"),
        factor_sizes={None: (8, 8, 8, 8, 8)},
        archive="lt_crl_benchmark_v1.zip",
        binned=True,
    ),
    # Reed et al. 2015's car renderings as disentanglement_lib reads them (Friede et al. App. 6): the folder
    # cars/ of the analogy-data archive (data/cars/ inside it), one car_*_mesh.mat per object type
    "cars3d": Official(
        files={None: "cars"},
        factor_names=("elevation", "azimuth", "object_type"),
        factor_sizes={None: (4, 24, 183)},
        archive="nips2015-analogy-data.tar.gz",
        extracted=("data/cars",),
    ),
    # NYU's small NORB v1.0 (Friede et al. App. 6): training and testing sets concatenated, as in
    # disentanglement_lib; the object instance is a nuisance, not a factor
    "smallnorb": Official(
        files={None: "smallnorb-5x46789x9x18x6x2x96x96-training-dat.mat"},
        factor_names=("category", "elevation", "azimuth", "lighting"),
        factor_sizes={None: (5, 9, 18, 6)},
        companions=("smallnorb-5x46789x9x18x6x2x96x96-training-cat.mat",
                    "smallnorb-5x46789x9x18x6x2x96x96-training-info.mat",
                    "smallnorb-5x01235x9x18x6x2x96x96-testing-dat.mat",
                    "smallnorb-5x01235x9x18x6x2x96x96-testing-cat.mat",
                    "smallnorb-5x01235x9x18x6x2x96x96-testing-info.mat"),
        gzip=True,
    ),
}

# official label files of the 128-px NVlabs releases (inside their folder)
_LABELS = {"falcor3d": "train-rec.labels", "isaac3d": "labels.npy"}
# Shapes3D h5 label columns are floor, wall, object hue, scale, shape, orientation; conf order picks:
_SHAPES3D_COLUMNS = (0, 2, 5, 3, 4, 1)


@dataclass
class RawData:
    """A raw dataset read lazily: factors in memory, images streamed by ``iter_images``."""

    name: str
    source: Path
    factor_names: tuple[str, ...]
    factor_sizes: tuple[int, ...]
    factors: np.ndarray  # (n, n_factors) int64 class indices
    num_channels: int
    _iter: Callable[[int], Iterator[tuple[int, np.ndarray]]] = field(repr=False)
    nuisance: np.ndarray | None = None  # (n, n_nuisance) int64 class indices of the nuisance variables, if any
    nuisance_names: tuple[str, ...] = ()
    nuisance_sizes: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return int(self.factors.shape[0])

    def iter_images(self, chunk: int = 2048) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, images)`` with images uint8 (b, C, 64, 64), consecutive and in index order."""
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        return self._iter(int(chunk))


def _check_name(name: str) -> Official:
    if name not in OFFICIAL:
        raise FormatError(f"unknown dataset {name!r}; expected one of {sorted(OFFICIAL)}")
    return OFFICIAL[name]


def present(directory: Path, filename: str, gz: bool) -> Path | None:
    """``directory/filename``, or its gzipped ``.gz`` when ``gz`` allows it; ``None`` when neither exists."""
    for candidate in (filename, filename + ".gz") if gz else (filename,):
        if (Path(directory) / candidate).is_file():
            return Path(directory) / candidate
    return None


def find_raw(name: str, root: Path, variant: str | None = None) -> Path | None:
    """The official raw file or folder of ``name`` in ``root`` (or, for Falcor3D/Isaac3D/Cars3D, the
    downloaded archive when the folder is absent); ``None`` when neither is there. For SmallNORB, the
    training ``dat`` file (``.mat`` or ``.mat.gz``), and only when all six files are there."""
    official = _check_name(name)
    root = Path(root).expanduser()
    expected = official.file(variant)
    if official.companions:
        if root.is_file() and root.name in (expected, expected + ".gz"):
            root = root.parent
        main = present(root, expected, official.gzip)
        if main is None or any(present(root, c, official.gzip) is None for c in official.companions):
            return None
        return main
    if root.name == expected and root.exists():
        return root
    candidate = root / expected
    if candidate.exists():
        return candidate
    for other in official.extracted:
        if (root / other).is_dir():
            return root / other
    if official.archive:
        if root.name == official.archive and root.is_file():
            return root
        if (root / official.archive).is_file():
            return root / official.archive
    return None


def read_raw(name: str, path: Path, *, variant: str | None = None,
             factor_sizes: Sequence[int] | None = None, progress: bool = False) -> RawData:
    """Check and open the raw dataset ``name`` at ``path`` (see :func:`find_raw`).

    ``factor_sizes`` replaces the official grid of MPI3D (its product must equal the image count); for the
    other datasets, whose classes come from the labels, it is the expected sizes for the warning only.
    ``progress`` shows a bar where reading is a step of its own (Cars3D decodes all its meshes up front).
    """
    official = _check_name(name)
    official.file(variant)  # validates the variant
    path = Path(path).expanduser()
    if not path.exists():
        raise FormatError(f"{path}: not found; expected the official {official.file(variant)}")
    expected = tuple(int(s) for s in factor_sizes) if factor_sizes is not None else official.sizes(variant)
    if len(expected) != len(official.factor_names):
        raise FormatError(f"{path}: factor_sizes {list(expected)} must have {len(official.factor_names)} "
                          f"entries ({', '.join(official.factor_names)})")
    if name == "cars3d":
        raw = _read_cars3d(name, path, expected, progress=progress)
    elif name == "causalchamber_photos":
        raw = _read_lt_photos(name, path, expected, variant or "uniform")
    else:
        reader = {"shapes3d": _read_shapes3d, "dsprites": _read_dsprites, "mpi3d": _read_mpi3d,
                  "falcor3d": _read_png_release, "isaac3d": _read_png_release,
                  "smallnorb": _read_smallnorb}[name]
        raw = reader(name, path, expected)
    official_sizes = official.sizes(variant)
    problems = []
    if raw.factor_sizes != official_sizes and not official.binned:
        problems.append(f"the official {list(official_sizes)}")
    if factor_sizes is not None and raw.factor_sizes != expected:
        problems.append(f"the given {list(expected)}")
    if problems:
        warnings.warn(f"{name} ({path.name}): factor sizes {list(raw.factor_sizes)} differ from "
                      f"{' and '.join(problems)}", stacklevel=2)
    return raw


def _read_lt_photos(name: str, path: Path, expected: tuple[int, ...], experiment: str) -> RawData:
    """The causal chamber's photographs (``causalchamber_photos``), its layout errors as :class:`FormatError`."""
    from . import causalchamber_photos as photos

    try:
        classes, iterate = photos.read(path, expected, experiment)
    except photos.LayoutError as exc:
        raise FormatError(str(exc)) from exc

    def checked(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        try:
            yield from iterate(chunk)
        except photos.LayoutError as exc:
            raise FormatError(str(exc)) from exc

    return RawData(name, path, OFFICIAL[name].factor_names, tuple(int(b) for b in expected), classes, 3, checked)


# --------------------------------------------------------------------------------------------- helpers
def _rank(labels: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """Class index of each value = its rank among the distinct values of its column."""
    classes = np.empty(labels.shape, dtype=np.int64)
    sizes = []
    for j in range(labels.shape[1]):
        values, inverse = np.unique(labels[:, j], return_inverse=True)
        classes[:, j] = inverse.reshape(-1)
        sizes.append(len(values))
    return classes, tuple(sizes)


def _check_labels(arr: np.ndarray, file: str, what: str, n_cols: int, integer: bool = False) -> None:
    kinds = "iu" if integer else "fiu"
    if arr.dtype.kind not in kinds:
        raise FormatError(f"{file}: expected {what} of {'integer' if integer else 'numeric'} dtype, "
                          f"got {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != n_cols:
        raise FormatError(f"{file}: expected {what} of shape (N, {n_cols}), got {tuple(arr.shape)}")
    if integer is False and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise FormatError(f"{file}: {what} contains non-finite values")


def _check_images(shape: tuple[int, ...], dtype: np.dtype, file: str, what: str, hw_c: tuple[int, ...]) -> int:
    if np.dtype(dtype) != np.uint8:
        raise FormatError(f"{file}: expected {what} of dtype uint8, got {np.dtype(dtype)}")
    if len(shape) != 1 + len(hw_c) or tuple(shape[1:]) != hw_c:
        want = ", ".join(["N", *map(str, hw_c)])
        raise FormatError(f"{file}: expected {what} of shape ({want}), got {tuple(shape)}")
    return int(shape[0])


class _Npz:
    """Streaming access to the arrays of an .npz archive (read members directly; no full load)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            with zipfile.ZipFile(path) as zf:
                self.keys = {n[:-4]: n for n in zf.namelist() if n.endswith(".npy")}
        except (zipfile.BadZipFile, OSError) as exc:
            raise FormatError(f"{path}: unreadable or truncated .npz archive ({exc})") from exc

    def require(self, key: str) -> str:
        if key not in self.keys:
            raise FormatError(f"{self.path}: missing array '{key}' (found {sorted(self.keys)})")
        return self.keys[key]

    @staticmethod
    def _header(fp) -> tuple[tuple[int, ...], bool, np.dtype]:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(fp)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(fp)
        return np.lib.format._read_array_header(fp, version)  # (3, 0): no public reader

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        member = self.require(key)
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(member) as fp:
                shape, fortran, dtype = self._header(fp)
        except _CORRUPT as exc:
            raise FormatError(f"{self.path}: unreadable array '{key}' ({exc})") from exc
        if fortran and len(shape) > 1:
            raise FormatError(f"{self.path}: expected '{key}' in C order, got Fortran order")
        return tuple(shape), np.dtype(dtype)

    def load(self, key: str) -> np.ndarray:
        member = self.require(key)
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(member) as fp:
                return np.lib.format.read_array(fp, allow_pickle=False)
        except _CORRUPT as exc:
            raise FormatError(f"{self.path}: unreadable or truncated array '{key}' ({exc})") from exc

    def iter_rows(self, key: str, chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        member = self.require(key)
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(member) as fp:
                shape, _, dtype = self._header(fp)
                row = (int(np.prod(shape[1:])) if len(shape) > 1 else 1) * np.dtype(dtype).itemsize
                n = int(shape[0])
                for start in range(0, n, chunk):
                    b = min(chunk, n - start)
                    buf = fp.read(b * row)
                    if len(buf) != b * row:
                        raise FormatError(f"{self.path}: array '{key}' is truncated at row {start} "
                                          f"(expected {n} rows)")
                    yield start, np.frombuffer(buf, dtype=dtype).reshape((b, *shape[1:]))
        except FormatError:
            raise
        except _CORRUPT as exc:
            raise FormatError(f"{self.path}: unreadable or truncated array '{key}' ({exc})") from exc


# --------------------------------------------------------------------------------------------- shapes3d
def _read_shapes3d(name: str, path: Path, expected: tuple[int, ...]) -> RawData:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            for key in ("images", "labels"):
                if key not in f or not isinstance(f[key], h5py.Dataset):
                    raise FormatError(f"{path}: missing dataset '{key}' (found {sorted(f.keys())})")
            n = _check_images(f["images"].shape, f["images"].dtype, str(path), "'images'", (64, 64, 3))
            labels = np.asarray(f["labels"][()])
    except FormatError:
        raise
    except _CORRUPT as exc:
        raise FormatError(f"{path}: unreadable or truncated HDF5 file ({exc})") from exc
    _check_labels(labels, str(path), "'labels'", 6)
    if labels.shape[0] != n:
        raise FormatError(f"{path}: 'images' has {n} rows but 'labels' has {labels.shape[0]}")
    classes, sizes = _rank(labels[:, list(_SHAPES3D_COLUMNS)])

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        try:
            with h5py.File(path, "r") as f:
                images = f["images"]
                for start in range(0, n, chunk):
                    block = images[start:start + chunk]
                    yield start, np.ascontiguousarray(block.transpose(0, 3, 1, 2))
        except _CORRUPT as exc:
            raise FormatError(f"{path}: unreadable or truncated HDF5 file ({exc})") from exc

    return RawData(name, path, OFFICIAL[name].factor_names, sizes, classes, 3, iterate)


# --------------------------------------------------------------------------------------------- dsprites
def _read_dsprites(name: str, path: Path, expected: tuple[int, ...]) -> RawData:
    npz = _Npz(path)
    shape, dtype = npz.header("imgs")
    n = _check_images(shape, dtype, str(path), "'imgs'", (64, 64))
    latents = npz.load("latents_classes")
    _check_labels(latents, str(path), "'latents_classes'", 6, integer=True)
    if latents.shape[0] != n:
        raise FormatError(f"{path}: 'imgs' has {n} rows but 'latents_classes' has {latents.shape[0]}")
    if n and latents.min() < 0:
        raise FormatError(f"{path}: 'latents_classes' must be non-negative class indices")
    classes = np.ascontiguousarray(latents[:, 1:], dtype=np.int64)  # drop the constant colour
    sizes = tuple(int(s) for s in classes.max(axis=0) + 1) if n else (0,) * 5

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        for start, block in npz.iter_rows("imgs", chunk):
            if block.max(initial=0) > 1:
                raise FormatError(f"{path}: expected 'imgs' values in {{0, 1}}, got {int(block.max())}")
            yield start, (block * np.uint8(255))[:, None]

    return RawData(name, path, OFFICIAL[name].factor_names, sizes, classes, 1, iterate)


# --------------------------------------------------------------------------------------------- mpi3d
def _read_mpi3d(name: str, path: Path, expected: tuple[int, ...]) -> RawData:
    npz = _Npz(path)
    shape, dtype = npz.header("images")
    n = _check_images(shape, dtype, str(path), "'images'", (64, 64, 3))
    if int(np.prod(expected)) != n:
        raise FormatError(f"{path}: {n} images do not match the factor grid {list(expected)} "
                          f"(product {int(np.prod(expected))}); pass the right factor_sizes")
    classes = np.stack(np.unravel_index(np.arange(n), expected), axis=1).astype(np.int64)

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        for start, block in npz.iter_rows("images", chunk):
            yield start, np.ascontiguousarray(block.transpose(0, 3, 1, 2))

    return RawData(name, path, OFFICIAL[name].factor_names, expected, classes, 3, iterate)


# --------------------------------------------------------------------------------------------- falcor3d / isaac3d
def downsample(images: np.ndarray, size: int = RESOLUTION, mode: str = "bicubic") -> np.ndarray:
    """uint8 (b, C, H, W) -> uint8 (b, C, size, size), rounded and clamped.

    ``bicubic``: antialiased bicubic (Falcor3D/Isaac3D, as in the QLAE authors' code); ``box``: exact area
    averaging, every output pixel the mean of the input area it covers, weighted by overlap (Cars3D
    128 -> 64 = 2x2 means, SmallNORB 96 -> 64)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(images)).float()
    if mode == "bicubic":
        y = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
    elif mode == "box":
        rows = torch.from_numpy(_box_weights(x.shape[-2], size))
        cols = torch.from_numpy(_box_weights(x.shape[-1], size))
        y = torch.einsum("oh,bchw,pw->bcop", rows, x, cols)
    else:
        raise ValueError(f"downsample mode must be 'bicubic' or 'box', got {mode!r}")
    return y.round_().clamp_(0, 255).to(torch.uint8).numpy()


def _box_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) float32 area weights of the box filter: row i = overlap of each input pixel with output
    pixel i's footprint [i, i + 1) * n_in / n_out, divided by the footprint's width (rows sum to 1)."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in), dtype=np.float64)
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            weights[i, j] = min(hi, j + 1) - max(lo, j)
    return (weights / scale).astype(np.float32)


class _PngRelease:
    """The NVlabs ``*_down128`` release: a folder or its zip archive with ``images/{i:06d}.png`` and a
    labels file (.npy format)."""

    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        folder, labels = OFFICIAL[name].files[None], _LABELS[name]
        self.labels_name = labels
        if path.is_dir():
            if not (path / "images").is_dir() and (path / folder).is_dir():
                path = path / folder
            self.zip = None
            self.base = path
            self.labels_where = str(path / labels)
            if not (path / labels).is_file():
                raise FormatError(f"{path}: missing labels file '{labels}' (expected {folder}/{labels})")
            if not (path / "images").is_dir():
                raise FormatError(f"{path}: missing folder 'images/' (expected {folder}/images/000000.png...)")
        else:
            try:
                with zipfile.ZipFile(path) as zf:
                    names = zf.namelist()
            except (zipfile.BadZipFile, OSError) as exc:
                raise FormatError(f"{path}: unreadable or truncated zip archive ({exc})") from exc
            hits = [m for m in names if m == labels or m.endswith("/" + labels)]
            if not hits:
                raise FormatError(f"{path}: missing labels file '{labels}' (expected {folder}/{labels})")
            self.zip = path
            self.prefix = min(hits, key=len)[: -len(labels)]
            self.labels_where = f"{path}:{self.prefix}{labels}"
            self.members = {m for m in names if m.startswith(self.prefix + "images/") and m.endswith(".png")}

    def load_labels(self) -> np.ndarray:
        try:
            if self.zip is None:
                return np.load(self.base / self.labels_name, allow_pickle=False)
            with zipfile.ZipFile(self.zip) as zf:
                data = zf.read(self.prefix + self.labels_name)
            return np.load(io.BytesIO(data), allow_pickle=False)
        except _CORRUPT as exc:
            raise FormatError(f"{self.labels_where}: unreadable labels, expected an .npy-format array "
                              f"({exc})") from exc

    def count_images(self) -> int:
        if self.zip is None:
            with os.scandir(self.base / "images") as it:
                return sum(1 for e in it if e.name.endswith(".png"))
        return len(self.members)

    def where(self, i: int) -> str:
        if self.zip is None:
            return str(self.base / "images" / f"{i:06d}.png")
        return f"{self.zip}:{self.prefix}images/{i:06d}.png"

    def reader(self, stack) -> Callable[[int], bytes]:
        if self.zip is None:
            def read(i: int) -> bytes:
                try:
                    return (self.base / "images" / f"{i:06d}.png").read_bytes()
                except OSError as exc:
                    raise FormatError(f"{self.where(i)}: missing or unreadable PNG ({exc})") from exc
            return read
        zf = stack.enter_context(zipfile.ZipFile(self.zip))

        def read_member(i: int) -> bytes:
            try:
                return zf.read(f"{self.prefix}images/{i:06d}.png")
            except _CORRUPT as exc:
                raise FormatError(f"{self.where(i)}: missing or unreadable PNG ({exc})") from exc
        return read_member


def _decode_png(data: bytes, where: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "PNG":
                raise FormatError(f"{where}: expected a PNG image, got {im.format}")
            if im.size != (PNG_RESOLUTION, PNG_RESOLUTION):
                raise FormatError(f"{where}: expected a {PNG_RESOLUTION}x{PNG_RESOLUTION} PNG, "
                                  f"got {im.size[0]}x{im.size[1]}")
            arr = np.asarray(im.convert("RGB") if im.mode != "RGB" else im)
    except FormatError:
        raise
    except (*_CORRUPT, SyntaxError, Image.DecompressionBombError) as exc:
        raise FormatError(f"{where}: unreadable or truncated PNG ({exc})") from exc
    return arr


def _read_png_release(name: str, path: Path, expected: tuple[int, ...]) -> RawData:
    from contextlib import ExitStack

    release = _PngRelease(name, path)
    labels = release.load_labels()
    n_cols = len(OFFICIAL[name].factor_names)
    _check_labels(labels, release.labels_where, "labels", n_cols)
    n = labels.shape[0]
    count = release.count_images()
    if count != n:
        raise FormatError(f"{release.where(0).rsplit('/', 1)[0]}: found {count} PNG images but the labels "
                          f"have {n} rows; expected one image per label row")
    classes, sizes = _rank(labels)
    workers = max(1, min(8, os.cpu_count() or 1))

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        with ExitStack() as stack:
            read = release.reader(stack)
            pool = stack.enter_context(ThreadPoolExecutor(workers))
            sub = min(chunk, 256)  # bounds the float32 128-px buffer of the resize
            for start in range(0, n, chunk):
                stop = min(n, start + chunk)
                out = np.empty((stop - start, 3, RESOLUTION, RESOLUTION), dtype=np.uint8)
                for s in range(start, stop, sub):
                    idx = range(s, min(stop, s + sub))
                    blobs = [read(i) for i in idx]
                    decoded = list(pool.map(_decode_png, blobs, [release.where(i) for i in idx]))
                    big = np.stack(decoded).transpose(0, 3, 1, 2)
                    out[s - start: s - start + len(idx)] = downsample(big)
                yield start, out

    return RawData(name, release.base if release.zip is None else path, OFFICIAL[name].factor_names,
                   sizes, classes, 3, iterate)


def _brief(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


# --------------------------------------------------------------------------------------------- cars3d
CARS3D_RESOLUTION = 128


def _mat_errors() -> tuple[type[BaseException], ...]:
    from scipy.io.matlab import MatReadError

    # NotImplementedError: scipy's answer to MATLAB v7.3 (HDF5) files
    return (*_CORRUPT, MatReadError, NotImplementedError, tarfile.TarError)


def _car_mesh(source, where: str) -> np.ndarray:
    """The renderings of one car, from its ``car_*_mesh.mat`` (a path or the file's bytes): the MATLAB
    variable ``im``, uint8 (128, 128, 3, azimuth, elevation) as disentanglement_lib's Cars3D reader expects it
    (Friede et al. App. 6), returned as uint8 (elevation, azimuth, 3, 64, 64), box-downsampled to 64 px."""
    from scipy.io import loadmat

    try:
        mat = loadmat(io.BytesIO(source) if isinstance(source, bytes) else source, variable_names=["im"])
    except _mat_errors() as exc:
        raise FormatError(f"{where}: unreadable or truncated .mat file ({_brief(exc)})") from exc
    if "im" not in mat:
        raise FormatError(f"{where}: missing MATLAB variable 'im' (expected a Cars3D car_*_mesh.mat file)")
    im = mat["im"]
    if not isinstance(im, np.ndarray) or im.dtype != np.uint8:
        raise FormatError(f"{where}: expected 'im' of dtype uint8, got {getattr(im, 'dtype', type(im).__name__)}")
    r = CARS3D_RESOLUTION
    if im.ndim != 5 or im.shape[:3] != (r, r, 3) or min(im.shape) < 1:
        raise FormatError(f"{where}: expected 'im' of shape ({r}, {r}, 3, azimuth, elevation), "
                          f"got {tuple(im.shape)}")
    azimuths, elevations = im.shape[3], im.shape[4]
    stacked = np.ascontiguousarray(im.transpose(4, 3, 2, 0, 1)).reshape(elevations * azimuths, 3, r, r)
    return downsample(stacked, mode="box").reshape(elevations, azimuths, 3, RESOLUTION, RESOLUTION)


def _cars_folder(path: Path) -> Path:
    """The folder of ``car_*_mesh.mat`` files given it, its parent ``cars/`` or the archive's ``data/cars/``."""
    if any(path.glob("*.mat")):
        return path
    for sub in ("cars", "data/cars"):
        if (path / sub).is_dir():
            return path / sub
    return path


def _iter_car_sources(path: Path) -> Iterator[tuple[str, object, str]]:
    """``(file name, path or bytes, where)`` of every car .mat file: the files of a folder in name order, or
    the members ``.../cars/*.mat`` of the (gzipped) tar archive in archive order, read in one streaming pass."""
    if path.is_dir():
        folder = _cars_folder(path)
        for file in sorted(p for p in folder.glob("*.mat") if p.is_file()):
            yield file.name, str(file), str(file)
        return
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for member in tar:
                where = f"{path}:{member.name}"
                member_path = PurePosixPath(member.name)
                if not member.isfile() or member_path.suffix != ".mat" or member_path.parent.name != "cars":
                    continue
                fh = tar.extractfile(member)
                data = fh.read() if fh is not None else b""
                if len(data) != member.size:
                    raise FormatError(f"{where}: truncated archive member")
                yield member_path.name, data, where
    except FormatError:
        raise
    except (*_CORRUPT, tarfile.TarError) as exc:
        raise FormatError(f"{path}: unreadable or truncated tar.gz archive ({_brief(exc)})") from exc


def _read_cars3d(name: str, path: Path, expected: tuple[int, ...], progress: bool = False) -> RawData:
    """Cars3D (Reed et al. 2015, via disentanglement_lib; Friede et al. App. 6) from the folder ``cars/`` of
    ``car_*_mesh.mat`` files or from ``nips2015-analogy-data.tar.gz`` itself. Object type = rank of the file
    name; elevation and azimuth = the last two axes of ``im``. Cache order: C order over (elevation, azimuth,
    object_type). All meshes are decoded up front (17,568 64-px images, 216 MB), then streamed."""
    from tqdm.auto import tqdm

    meshes: dict[str, np.ndarray] = {}
    grid_shape, first = None, ""
    bar = tqdm(desc=f"{name}: reading meshes", unit="file", disable=not progress, dynamic_ncols=True)
    try:
        for filename, source, where in _iter_car_sources(path):
            if filename in meshes:
                raise FormatError(f"{where}: a second car file named {filename}")
            mesh = _car_mesh(source, where)
            if grid_shape is None:
                grid_shape, first = mesh.shape[:2], filename
            elif mesh.shape[:2] != grid_shape:
                raise FormatError(f"{where}: {mesh.shape[1]} azimuths x {mesh.shape[0]} elevations, but "
                                  f"{first} has {grid_shape[1]} x {grid_shape[0]}; expected the same grid in "
                                  f"every car file")
            meshes[filename] = mesh
            bar.update(1)
    finally:
        bar.close()
    if not meshes:
        raise FormatError(f"{path}: no car_*_mesh.mat files found (expected the folder cars/ of "
                          f"{OFFICIAL[name].archive}, or the archive itself)")
    names = sorted(meshes)
    images = np.stack([meshes.pop(n) for n in names], axis=2).reshape(-1, 3, RESOLUTION, RESOLUTION)
    sizes = (*grid_shape, len(names))
    classes = np.stack(np.unravel_index(np.arange(len(images)), sizes), axis=1).astype(np.int64)

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, len(images), chunk):
            yield start, images[start:start + chunk]

    return RawData(name, path, OFFICIAL[name].factor_names, sizes, classes, 3, iterate)


# --------------------------------------------------------------------------------------------- smallnorb
NORB_RESOLUTION = 96
# type codes of the NORB binary matrix format (its magic numbers); SmallNORB uses the first two
_NORB_TYPES = {0x1E3D4C55: np.dtype("u1"), 0x1E3D4C54: np.dtype("<i4"), 0x1E3D4C51: np.dtype("<f4"),
               0x1E3D4C53: np.dtype("<f8"), 0x1E3D4C56: np.dtype("<i2")}


def _norb_open(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


class _NorbMatrix:
    """One file of NYU's small NORB binary matrix format (Friede et al. App. 6; the format of the NORB
    dataset page): little-endian int32 magic number giving the element type (0x1E3D4C55 uint8,
    0x1E3D4C54 int32), int32 ndim, max(3, ndim) int32 dimensions (only the first ndim count), then the
    elements in C order. Read plain or gzipped (``.mat.gz``, as distributed), checked against
    ``dtype`` and ``(N, *tail)``."""

    def __init__(self, path: Path, dtype: np.dtype, tail: tuple[int, ...], what: str):
        self.path, self.dtype = path, np.dtype(dtype)
        try:
            with _norb_open(path) as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise FormatError(f"{path}: truncated header (expected a small NORB binary matrix)")
                magic, ndim = (int(v) for v in np.frombuffer(head, dtype="<i4"))
                if magic & 0xFFFFFFFF not in _NORB_TYPES:
                    raise FormatError(f"{path}: not a small NORB binary matrix (magic 0x{magic & 0xFFFFFFFF:08X})")
                if not 1 <= ndim <= 8:
                    raise FormatError(f"{path}: invalid number of dimensions {ndim} in the matrix header")
                stored = max(3, ndim)
                dims = fh.read(4 * stored)
                if len(dims) < 4 * stored:
                    raise FormatError(f"{path}: truncated header (expected {stored} dimensions)")
        except FormatError:
            raise
        except _CORRUPT as exc:
            raise FormatError(f"{path}: unreadable or truncated file ({_brief(exc)})") from exc
        found = _NORB_TYPES[magic & 0xFFFFFFFF]
        if found != self.dtype:
            raise FormatError(f"{path}: expected a {what} matrix of {self.dtype.name} "
                              f"(magic 0x{_norb_magic(self.dtype):08X}), got {found.name} (magic 0x{magic:08X})")
        self.shape = tuple(int(d) for d in np.frombuffer(dims, dtype="<i4")[:ndim])
        if len(self.shape) != 1 + len(tail) or self.shape[1:] != tail or self.shape[0] < 0:
            want = ", ".join(["N", *map(str, tail)])
            raise FormatError(f"{path}: expected {what} of shape ({want}), got {self.shape}")
        self.offset = 8 + 4 * stored
        self.n = self.shape[0]
        self.row = int(np.prod(tail, dtype=np.int64)) * self.dtype.itemsize
        if not path.name.endswith(".gz"):
            size, want_size = path.stat().st_size, self.offset + self.n * self.row
            if size != want_size:
                raise FormatError(f"{path}: {size} bytes, expected {want_size} for a {what} matrix of shape "
                                  f"{self.shape} (truncated or not a small NORB file)")

    def rows(self, chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, rows)`` blocks of at most ``chunk`` rows, in order."""
        try:
            with _norb_open(self.path) as fh:
                fh.read(self.offset)
                for start in range(0, self.n, chunk):
                    b = min(chunk, self.n - start)
                    buf = fh.read(b * self.row)
                    if len(buf) != b * self.row:
                        raise FormatError(f"{self.path}: truncated at row {start} (expected {self.n} rows)")
                    yield start, np.frombuffer(buf, dtype=self.dtype).reshape((b, *self.shape[1:]))
        except FormatError:
            raise
        except _CORRUPT as exc:
            raise FormatError(f"{self.path}: unreadable or truncated file ({_brief(exc)})") from exc

    def load(self) -> np.ndarray:
        blocks = [block for _, block in self.rows(max(1, self.n))]
        return np.concatenate(blocks) if blocks else np.zeros(self.shape, self.dtype)


def _norb_magic(dtype: np.dtype) -> int:
    return next(k for k, v in _NORB_TYPES.items() if v == dtype)


def _read_smallnorb(name: str, path: Path, expected: tuple[int, ...]) -> RawData:
    """SmallNORB (LeCun et al. 2004, via disentanglement_lib; Friede et al. App. 6) from the six official
    files, plain or gzipped, in the folder of ``path``: per split (training, then testing, concatenated as
    disentanglement_lib does) ``dat`` uint8 (N, 2, 96, 96) stereo pairs, of which the first (left) camera
    image is used, ``cat`` int32 (N,) category, ``info`` int32 (N, 4) instance, elevation, azimuth (0, 2, ..,
    34; halved to a class), lighting. Factors: category, elevation, azimuth, lighting; the instance is a
    nuisance. Images are box-downsampled 96 -> 64, in file order."""
    official = OFFICIAL[name]
    folder = path if path.is_dir() else path.parent
    wanted = (official.files[None], *official.companions)
    found = {f: present(folder, f, official.gzip) for f in wanted}
    missing = [f for f in wanted if found[f] is None]
    if missing:
        raise FormatError(f"{folder}: missing {', '.join(missing)} (plain or .gz); expected the six small NORB "
                          f"files (training and testing dat, cat, info)")
    splits = []
    for dat_name in (wanted[0], wanted[3]):
        prefix = dat_name[: -len("dat.mat")]
        dat = _NorbMatrix(found[dat_name], np.dtype("u1"), (2, NORB_RESOLUTION, NORB_RESOLUTION), "'dat'")
        cat = _NorbMatrix(found[prefix + "cat.mat"], np.dtype("<i4"), (), "'cat'")
        info = _NorbMatrix(found[prefix + "info.mat"], np.dtype("<i4"), (4,), "'info'")
        if not dat.n == cat.n == info.n:
            raise FormatError(f"{dat.path}: {dat.n} images but {cat.path.name} has {cat.n} rows and "
                              f"{info.path.name} {info.n}; expected one label row per image")
        categories, labels = cat.load().astype(np.int64), info.load().astype(np.int64)
        if dat.n and (categories.min() < 0 or labels.min() < 0):
            bad = cat.path if categories.min() < 0 else info.path
            raise FormatError(f"{bad}: expected non-negative labels")
        if (labels[:, 2] % 2).any():
            raise FormatError(f"{info.path}: expected even azimuths 0, 2, ..., 34 in column 2, "
                              f"got {int(labels[labels[:, 2] % 2 == 1, 2][0])}")
        factors = np.stack([categories, labels[:, 1], labels[:, 2] // 2, labels[:, 3]], axis=1)
        splits.append((dat, factors, labels[:, :1]))
    factors = np.ascontiguousarray(np.concatenate([s[1] for s in splits]))
    nuisance = np.ascontiguousarray(np.concatenate([s[2] for s in splits]))
    n = len(factors)
    sizes = tuple(int(s) for s in factors.max(axis=0) + 1) if n else (0,) * 4
    nuisance_sizes = (int(nuisance.max()) + 1,) if n else (0,)

    def iterate(chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        offset = 0
        for dat, _, _ in splits:
            for start, block in dat.rows(chunk):
                yield offset + start, downsample(block[:, :1], mode="box")
            offset += dat.n

    return RawData(name, splits[0][0].path, official.factor_names, sizes, factors, 1, iterate,
                   nuisance=nuisance, nuisance_names=("instance",), nuisance_sizes=nuisance_sizes)
