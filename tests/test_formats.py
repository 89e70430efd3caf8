"""Readers of the official raw formats and their conversion into the prepared cache (small fixtures)."""
from __future__ import annotations

import io
import warnings
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import raw_fixtures as rf
import yaml
from PIL import Image

from disentangle.data.convert import convert, is_complete, partial_path
from disentangle.data.formats import OFFICIAL, FormatError, downsample, find_raw, read_raw

CONF = Path(__file__).resolve().parents[1] / "conf" / "data"
CASES = ["shapes3d", "dsprites", "mpi3d", "falcor3d", "isaac3d", "falcor3d.zip", "isaac3d.zip"]


def _write(case: str, directory: Path):
    name, _, ext = case.partition(".")
    kwargs = {"archive": True} if ext == "zip" else {}
    path, truth = rf.WRITERS[name](directory, **kwargs)
    return name, path, truth


def _convert(name, path, cache, **kw):
    kw.setdefault("factor_sizes", rf.MPI3D_SIZES if name == "mpi3d" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return convert(name, path, cache, progress=False, **kw)


def _raw_images(name: str, path: Path) -> np.ndarray:
    """The raw images as (N, C, 64, 64) uint8, read independently of the readers under test."""
    if name == "shapes3d":
        with h5py.File(path) as f:
            return f["images"][()].transpose(0, 3, 1, 2)
    if name == "dsprites":
        return (np.load(path)["imgs"] * 255).astype(np.uint8)[:, None]
    if name == "mpi3d":
        return np.load(path)["images"].transpose(0, 3, 1, 2)
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            members = sorted(m for m in zf.namelist() if m.endswith(".png"))
            big = [np.asarray(Image.open(io.BytesIO(zf.read(m)))) for m in members]
    else:
        big = [np.asarray(Image.open(p)) for p in sorted((path / "images").glob("*.png"))]
    return downsample(np.stack(big).transpose(0, 3, 1, 2))


def _one_line_naming(exc: pytest.ExceptionInfo, filename: str) -> None:
    msg = str(exc.value)
    assert filename in msg, msg
    assert "\n" not in msg


def test_official_matches_conf():
    for name, official in OFFICIAL.items():
        conf = yaml.safe_load((CONF / f"{name}.yaml").read_text())
        assert list(official.factor_names) == conf["factor_names"]
        if "variant_sizes" in conf:
            for variant, sizes in conf["variant_sizes"].items():
                assert list(official.sizes(variant)) == sizes and official.file(variant)
            assert list(official.sizes(None)) == conf["variant_sizes"][conf["variant"]]
        else:
            assert list(official.sizes(None)) == conf["factor_sizes"]
    assert OFFICIAL["shapes3d"].sizes(None) == (10, 10, 15, 8, 4, 10)
    assert OFFICIAL["mpi3d"].sizes("toy") == (6, 6, 2, 3, 3, 40, 40)
    assert OFFICIAL["mpi3d"].file("real") == "mpi3d_real.npz"


@pytest.mark.parametrize("case", CASES)
def test_convert_roundtrip(tmp_path, case):
    name, path, truth = _write(case, tmp_path / "raw")
    assert find_raw(name, tmp_path / "raw") == path
    cache = _convert(name, path, tmp_path / f"{name}.h5", chunk=7)
    assert cache == tmp_path / f"{name}.h5" and is_complete(cache)
    assert not partial_path(cache).exists()
    channels = 1 if name == "dsprites" else 3
    with h5py.File(cache) as f:
        images, factors = f["images"], f["factors"]
        assert images.shape == (len(truth), channels, 64, 64) and images.dtype == np.uint8
        assert images.chunks is None and images.compression is None  # contiguous: memory-mappable
        assert images.id.get_offset() is not None
        assert factors.dtype == np.int64
        assert list(f.attrs["factor_names"]) == list(OFFICIAL[name].factor_names)
        assert list(f.attrs["factor_sizes"]) == list(truth.max(axis=0) + 1)
        assert f.attrs["source"] == path.name and bool(f.attrs["complete"])
        images, factors = images[()], factors[()]
    np.testing.assert_array_equal(factors, truth)  # per row, in the conf order
    assert [rf.decode_index(im) for im in images] == list(range(len(truth)))  # each image is its own
    np.testing.assert_array_equal(images, _raw_images(name, path))


@pytest.mark.parametrize("case", ["shapes3d", "falcor3d.zip"])
def test_iter_images_streams_in_order(tmp_path, case):
    name, path, truth = _write(case, tmp_path)
    with pytest.warns(UserWarning, match="differ from the official"):
        raw = read_raw(name, path)
    assert raw.n == len(truth)
    starts = [(s, len(b)) for s, b in raw.iter_images(5)]
    assert [s for s, _ in starts] == list(range(0, raw.n, 5))
    assert sum(b for _, b in starts) == raw.n


def test_warnings_for_counts(tmp_path):
    path, _ = rf.write_shapes3d(tmp_path)
    with pytest.warns(UserWarning, match=r"shapes3d.*differ from the official \[10, 10, 15, 8, 4, 10\]"):
        read_raw("shapes3d", path)
    path, _ = rf.write_mpi3d(tmp_path)
    with pytest.warns(UserWarning, match="mpi3d.*differ from the official"):
        raw = read_raw("mpi3d", path, factor_sizes=rf.MPI3D_SIZES)
    assert raw.factor_sizes == rf.MPI3D_SIZES


def test_mpi3d_grid_and_variants(tmp_path):
    path, _ = rf.write_mpi3d(tmp_path)
    with pytest.raises(FormatError) as exc:  # 48 images, not the official 460,800
        read_raw("mpi3d", path)
    _one_line_naming(exc, path.name)
    with pytest.raises(FormatError, match="factor grid"):
        read_raw("mpi3d", path, factor_sizes=(2, 2, 1, 2, 1, 3, 3))
    toy, truth = rf.write_mpi3d(tmp_path / "toy", sizes=(3, 2, 1, 1, 1, 2, 2), variant="toy")
    assert toy.name == "mpi3d_toy.npz"
    assert find_raw("mpi3d", tmp_path / "toy", variant="toy") == toy
    assert find_raw("mpi3d", tmp_path / "toy") is None
    with pytest.warns(UserWarning):
        raw = read_raw("mpi3d", toy, variant="toy", factor_sizes=(3, 2, 1, 1, 1, 2, 2))
    np.testing.assert_array_equal(raw.factors, truth)


def test_find_raw(tmp_path):
    assert find_raw("falcor3d", tmp_path) is None
    zpath, _ = rf.write_falcor3d(tmp_path, archive=True)
    assert find_raw("falcor3d", tmp_path) == zpath
    folder, _ = rf.write_falcor3d(tmp_path)
    assert find_raw("falcor3d", tmp_path) == folder  # the extracted folder wins over the archive
    with pytest.raises(FormatError, match="unknown dataset"):
        find_raw("nope", tmp_path)


# ------------------------------------------------------------------------------------------ format errors
def _rewrite_h5(path: Path, **datasets):
    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in f}
    data.update(datasets)
    path.unlink()
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            if v is not None:
                f.create_dataset(k, data=v)


@pytest.mark.parametrize("change, match", [
    ({"labels": None}, "missing dataset 'labels'"),
    ({"images": np.zeros((144, 64, 64, 3), np.float32)}, "dtype uint8"),
    ({"images": np.zeros((144, 32, 32, 3), np.uint8)}, r"shape \(N, 64, 64, 3\)"),
    ({"labels": np.zeros((144, 5))}, r"shape \(N, 6\)"),
    ({"labels": np.zeros((143, 6))}, "143"),
])
def test_shapes3d_errors(tmp_path, change, match):
    path, _ = rf.write_shapes3d(tmp_path)
    _rewrite_h5(path, **change)
    with pytest.raises(FormatError, match=match) as exc:
        read_raw("shapes3d", path)
    _one_line_naming(exc, path.name)


def _truncate(path: Path, fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


@pytest.mark.parametrize("name", ["shapes3d", "dsprites", "mpi3d"])
def test_truncated_files(tmp_path, name):
    path, _ = rf.WRITERS[name](tmp_path)
    _truncate(path)
    with pytest.raises(FormatError, match="truncated") as exc:
        read_raw(name, path, factor_sizes=rf.MPI3D_SIZES if name == "mpi3d" else None)
    _one_line_naming(exc, path.name)


def test_npz_errors(tmp_path):
    path, truth = rf.write_dsprites(tmp_path)
    np.savez_compressed(path, images=np.zeros((48, 64, 64), np.uint8), latents_classes=truth)
    with pytest.raises(FormatError, match="missing array 'imgs'") as exc:
        read_raw("dsprites", path)
    _one_line_naming(exc, path.name)
    np.savez_compressed(path, imgs=np.zeros((48, 64, 64), np.uint8), latents_classes=np.zeros((48, 6)))
    with pytest.raises(FormatError, match="integer dtype"):
        read_raw("dsprites", path)
    np.savez_compressed(path, imgs=np.zeros((47, 64, 64), np.uint8), latents_classes=np.zeros((48, 6), int))
    with pytest.raises(FormatError, match="47 rows"):
        read_raw("dsprites", path)
    mpath, _ = rf.write_mpi3d(tmp_path)
    np.savez_compressed(mpath, images=np.zeros((48, 3, 64, 64), np.uint8))
    with pytest.raises(FormatError, match=r"shape \(N, 64, 64, 3\)") as exc:
        read_raw("mpi3d", mpath, factor_sizes=rf.MPI3D_SIZES)
    _one_line_naming(exc, mpath.name)


def test_corrupt_npz_data_fails_mid_stream(tmp_path):
    path, _ = rf.write_mpi3d(tmp_path, sizes=(2, 2, 1, 2, 1, 5, 4))
    with zipfile.ZipFile(path) as zf:  # flip bytes inside the compressed images member
        info = zf.getinfo("images.npy")
    data = bytearray(path.read_bytes())
    mid = info.header_offset + 100 + info.compress_size // 2
    data[mid: mid + 64] = bytes(64)
    path.write_bytes(bytes(data))
    cache = tmp_path / "mpi3d.h5"
    with pytest.raises(FormatError) as exc:
        _convert("mpi3d", path, cache, factor_sizes=(2, 2, 1, 2, 1, 5, 4), chunk=8)
    _one_line_naming(exc, path.name)
    assert not cache.exists() and not partial_path(cache).exists() and not is_complete(cache)


@pytest.mark.parametrize("archive", [False, True])
def test_png_count_mismatch(tmp_path, archive):
    path, _ = rf.write_isaac3d(tmp_path, archive=archive)
    if archive:
        with zipfile.ZipFile(path) as zf:
            members = {m: zf.read(m) for m in zf.namelist()}
        members.pop("Isaac3D_down128/images/000015.png")
        with zipfile.ZipFile(path, "w") as zf:
            for m, d in members.items():
                zf.writestr(m, d)
    else:
        (path / "images" / "000015.png").unlink()
    with pytest.raises(FormatError, match="found 15 PNG images but the labels have 16 rows") as exc:
        read_raw("isaac3d", path)
    _one_line_naming(exc, "Isaac3D_down128")


def test_png_release_errors(tmp_path):
    path, _ = rf.write_falcor3d(tmp_path)
    labels = path / "train-rec.labels"
    good = labels.read_bytes()
    with open(labels, "wb") as fh:
        np.save(fh, np.zeros((16, 6)))
    with pytest.raises(FormatError, match=r"shape \(N, 7\)") as exc:
        read_raw("falcor3d", path)
    _one_line_naming(exc, "train-rec.labels")
    labels.write_bytes(good[:40])
    with pytest.raises(FormatError, match="unreadable labels") as exc:
        read_raw("falcor3d", path)
    _one_line_naming(exc, "train-rec.labels")
    labels.unlink()
    with pytest.raises(FormatError, match="missing labels file"):
        read_raw("falcor3d", path)
    zpath, _ = rf.write_falcor3d(tmp_path / "z", archive=True)
    _truncate(zpath, 0.7)
    with pytest.raises(FormatError, match="zip archive") as exc:
        read_raw("falcor3d", zpath)
    _one_line_naming(exc, zpath.name)


@pytest.mark.parametrize("archive", [False, True])
@pytest.mark.parametrize("defect", ["corrupt", "size"])
def test_bad_png_midway_leaves_no_cache(tmp_path, archive, defect):
    folder, _ = rf.write_falcor3d(tmp_path / "raw")
    bad = folder / "images" / "000009.png"
    if defect == "corrupt":
        bad.write_bytes(bad.read_bytes()[:200])
    else:
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(bad)
    path = folder
    if archive:
        path = tmp_path / "Falcor3D_down128.zip"
        with zipfile.ZipFile(path, "w") as zf:
            for p in sorted(folder.rglob("*")):
                if p.is_file():
                    zf.write(p, p.relative_to(folder.parent).as_posix())
    cache = tmp_path / "cache" / "falcor3d.h5"
    match = "unreadable or truncated PNG" if defect == "corrupt" else "expected a 128x128 PNG, got 64x64"
    with pytest.raises(FormatError, match=match) as exc:
        _convert("falcor3d", path, cache, chunk=4)
    _one_line_naming(exc, "images/000009.png")
    assert not cache.exists() and not partial_path(cache).exists() and not is_complete(cache)


def test_convert_is_idempotent(tmp_path):
    path, _ = rf.write_dsprites(tmp_path / "raw")
    cache = _convert("dsprites", path, tmp_path / "dsprites.h5")
    mtime = cache.stat().st_mtime_ns
    path.unlink()  # the second call must not even read the raw file
    assert _convert("dsprites", path, cache) == cache
    assert cache.stat().st_mtime_ns == mtime


def test_incomplete_cache_is_redone(tmp_path):
    path, truth = rf.write_shapes3d(tmp_path / "raw")
    cache = tmp_path / "shapes3d.h5"
    with h5py.File(cache, "w") as f:
        f.create_dataset("images", data=np.zeros((3, 3, 64, 64), np.uint8))
        f.create_dataset("factors", data=np.zeros((3, 6), np.int64))
    assert not is_complete(cache)
    cache.with_name("junk.h5").write_bytes(b"not hdf5")
    assert not is_complete(cache.with_name("junk.h5"))
    _convert("shapes3d", path, cache)
    assert is_complete(cache)
    with h5py.File(cache) as f:
        np.testing.assert_array_equal(f["factors"][()], truth)
