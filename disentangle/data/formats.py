"""Readers of the official raw dataset files (qlae.md §7.2-7.6, tripod.md §7).

``read_raw`` checks the structure of a raw file or folder, reads its factors as int64 class indices in the
order of ``conf/data/<name>.yaml`` and streams its images as uint8 (b, C, 64, 64) chunks in index order, so
that even the 737,280 Isaac3D PNGs never sit decoded in memory at once. ``convert.py`` writes them into the
cache that ``prepared.py`` reads. Every structural problem raises a one-line :class:`FormatError` naming the
file and what was expected; factor counts that differ from the official ones only warn.
"""
from __future__ import annotations

import io
import os
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

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
    variant), an optional zip archive name, and the factor names and sizes in the ``conf/data`` order."""

    files: dict[str | None, str]
    factor_names: tuple[str, ...]
    factor_sizes: dict[str | None, tuple[int, ...]]
    archive: str | None = None

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


def find_raw(name: str, root: Path, variant: str | None = None) -> Path | None:
    """The official raw file or folder of ``name`` in ``root`` (or, for Falcor3D/Isaac3D, the downloaded
    zip archive when the folder is absent); ``None`` when neither is there."""
    official = _check_name(name)
    root = Path(root).expanduser()
    expected = official.file(variant)
    if root.name == expected and root.exists():
        return root
    candidate = root / expected
    if candidate.exists():
        return candidate
    if official.archive:
        if root.name == official.archive and root.is_file():
            return root
        if (root / official.archive).is_file():
            return root / official.archive
    return None


def read_raw(name: str, path: Path, *, variant: str | None = None,
             factor_sizes: Sequence[int] | None = None) -> RawData:
    """Check and open the raw dataset ``name`` at ``path`` (see :func:`find_raw`).

    ``factor_sizes`` replaces the official grid of MPI3D (its product must equal the image count); for the
    other datasets, whose classes come from the labels, it is the expected sizes for the warning only.
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
    reader = {"shapes3d": _read_shapes3d, "dsprites": _read_dsprites, "mpi3d": _read_mpi3d,
              "falcor3d": _read_png_release, "isaac3d": _read_png_release}[name]
    raw = reader(name, path, expected)
    official_sizes = official.sizes(variant)
    problems = []
    if raw.factor_sizes != official_sizes:
        problems.append(f"the official {list(official_sizes)}")
    if factor_sizes is not None and raw.factor_sizes != expected:
        problems.append(f"the given {list(expected)}")
    if problems:
        warnings.warn(f"{name} ({path.name}): factor sizes {list(raw.factor_sizes)} differ from "
                      f"{' and '.join(problems)}", stacklevel=2)
    return raw


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
def downsample(images: np.ndarray, size: int = RESOLUTION) -> np.ndarray:
    """uint8 (b, C, H, W) -> uint8 (b, C, size, size): antialiased bicubic, rounded and clamped (§7.4)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(images)).float()
    y = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
    return y.round_().clamp_(0, 255).to(torch.uint8).numpy()


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
