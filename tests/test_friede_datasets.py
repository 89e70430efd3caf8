"""Friede et al.'s extra datasets (categorical_vae.md §11, Table 8): Cars3D, SmallNORB and colour dSprites, from
official-format fixtures (tiny grids) through the readers, ``prepare`` and the data module."""
from __future__ import annotations

import gzip
import io
import tarfile
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import raw_fixtures as rf
import torch
import yaml
from conftest import CONF, compose_config
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from scipy.io import loadmat, savemat

from disentangle.data import PreparedDataModule
from disentangle.data.convert import convert, is_complete, partial_path
from disentangle.data.formats import OFFICIAL, FormatError, downsample, find_raw, read_raw
from disentangle.data.preparation import prepare
from disentangle.errors import DatasetNotFoundError

NORB_NAMES = (OFFICIAL["smallnorb"].files[None], *OFFICIAL["smallnorb"].companions)
NORB_N = len(rf.smallnorb_rows()[0])


def _read(name, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the fixtures' small grids differ from the official ones
        return read_raw(name, path, **kw)


def _prepare(name, root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return prepare(name, root, download=False, progress=False, **kw)


def _images(raw) -> np.ndarray:
    return np.concatenate([block for _, block in raw.iter_images(5)])


def _one_line(exc: pytest.ExceptionInfo, *names: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for name in names:
        assert name in msg, msg


def run_prepare(*overrides) -> int:
    """``python -m disentangle.prepare OVERRIDES`` in this process: the entry point's body on the config Hydra
    composes for it (a subprocess would spend most of the test importing torch); returns the exit status."""
    from disentangle import prepare as cli

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("prepare", overrides=list(overrides))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            cli.main.__wrapped__(cfg)
        return 0
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        GlobalHydra.instance().clear()


def _rows(images: torch.Tensor) -> torch.Tensor:
    """The fixture row each grey SmallNORB image (B, 1, 64, 64) in [0, 1] encodes (``rf.decode_grey``, batched)."""
    return ((images[:, 0, 4, 4] * 255).round().long() - 20) // 3


def _module(name, root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return PreparedDataModule(name, root=root, **kw)


# ------------------------------------------------------------------------------------------ configs, resizing
def test_configs_follow_the_official_tables():
    expected = {"cars3d": (["elevation", "azimuth", "object_type"], [4, 24, 183]),
                "smallnorb": (["category", "elevation", "azimuth", "lighting"], [5, 9, 18, 6]),
                "colour_dsprites": (["shape", "scale", "orientation", "pos_x", "pos_y"], [3, 6, 40, 32, 32])}
    for name, (names, sizes) in expected.items():
        text = (CONF / "data" / f"{name}.yaml").read_text()
        conf = yaml.safe_load(text)
        assert conf["name"] == name and conf["factor_names"] == names and conf["factor_sizes"] == sizes
        assert any(line.startswith("sampling: epochs   # ") for line in text.splitlines())
        if name in OFFICIAL:
            assert list(OFFICIAL[name].factor_names) == names and list(OFFICIAL[name].sizes(None)) == sizes
    colour = yaml.safe_load((CONF / "data" / "colour_dsprites.yaml").read_text())
    assert colour["cache_name"] == "dsprites" and colour["colour"] == "random_multipliers"
    assert np.prod(expected["cars3d"][1]) == 17_568 and np.prod(expected["smallnorb"][1]) * 10 == 48_600


def test_box_downsample_averages_areas():
    x = np.random.default_rng(0).integers(0, 256, (3, 2, 96, 96), dtype=np.uint8)
    fine = np.repeat(np.repeat(x.astype(np.float64), 2, axis=2), 2, axis=3)  # 192 px: 3 x 3 per output pixel
    reference = fine.reshape(3, 2, 64, 3, 64, 3).mean(axis=(3, 5))
    got = downsample(x, mode="box")
    assert got.dtype == np.uint8 and got.shape == (3, 2, 64, 64)
    assert np.abs(got - reference).max() <= 0.5 + 1e-3
    y = np.random.default_rng(1).integers(0, 256, (2, 3, 128, 128), dtype=np.uint8)
    means = y.reshape(2, 3, 64, 2, 64, 2).astype(np.float64).mean(axis=(3, 5))
    assert np.abs(downsample(y, mode="box") - means).max() <= 0.5
    with pytest.raises(ValueError, match="bicubic' or 'box"):
        downsample(y, mode="nearest")


# ------------------------------------------------------------------------------------------ Cars3D
@pytest.mark.parametrize("archive", [False, True])
def test_cars3d_reader(tmp_path, archive):
    path, truth = rf.write_cars3d(tmp_path, archive=archive)
    assert find_raw("cars3d", tmp_path) == path
    with pytest.warns(UserWarning, match=r"cars3d.*differ from the official \[4, 24, 183\]"):
        raw = read_raw("cars3d", path)
    assert raw.factor_names == ("elevation", "azimuth", "object_type") and raw.num_channels == 3
    assert raw.factor_sizes == (*rf.CARS3D_GRID, len(rf.CARS3D_FILES)) and raw.nuisance is None
    np.testing.assert_array_equal(raw.factors, truth)  # C order over (elevation, azimuth, object_type)
    images = _images(raw)
    assert images.shape == (len(truth), 3, 64, 64) and images.dtype == np.uint8
    assert [rf.decode_index(im) for im in images] == list(range(len(truth)))
    # independently: image (e, a, o) is im[..., a, e] of the o-th file in name order, 2 x 2 means
    folder = path if not archive else None
    if folder is not None:
        for row, (e, a, o) in enumerate(truth):
            im = loadmat(folder / rf.CARS3D_FILES[o])["im"][:, :, :, a, e].astype(np.float64)
            means = im.reshape(64, 2, 64, 2, 3).mean(axis=(1, 3)).transpose(2, 0, 1)
            assert np.abs(images[row] - means).max() <= 0.5


def test_cars3d_raw_locations(tmp_path):
    archive, _ = rf.write_cars3d(tmp_path, archive=True)
    assert find_raw("cars3d", tmp_path) == archive
    with tarfile.open(archive) as tar:  # unpacked as the archive lays it out: data/cars/
        tar.extractall(tmp_path, filter="data")
    assert find_raw("cars3d", tmp_path) == tmp_path / "data" / "cars"  # the extracted folder wins
    folder, truth = rf.write_cars3d(tmp_path)
    assert find_raw("cars3d", tmp_path) == folder
    np.testing.assert_array_equal(_read("cars3d", tmp_path / "data" / "cars").factors, truth)
    assert find_raw("cars3d", tmp_path / "empty") is None


def _mat(path: Path, **variables) -> None:
    buf = io.BytesIO()
    savemat(buf, variables)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("defect, match", [
    ("truncated", "unreadable or truncated .mat file"),
    ("no_im", "missing MATLAB variable 'im'"),
    ("shape", r"shape \(128, 128, 3, azimuth, elevation\), got \(64, 64, 3, 3, 2\)"),
    ("dtype", "dtype uint8, got float64"),
    ("grid", "expected the same grid in every car file"),
])
def test_cars3d_errors(tmp_path, defect, match):
    folder, _ = rf.write_cars3d(tmp_path)
    bad = folder / rf.CARS3D_FILES[1]
    if defect == "truncated":
        bad.write_bytes(bad.read_bytes()[:300])
    elif defect == "no_im":
        _mat(bad, images=np.zeros((2, 2), np.uint8))
    elif defect == "shape":
        _mat(bad, im=np.zeros((64, 64, 3, 3, 2), np.uint8))
    elif defect == "dtype":
        _mat(bad, im=np.zeros((128, 128, 3, 3, 2)))
    else:
        _mat(bad, im=np.zeros((128, 128, 3, 4, 2), np.uint8))
    cache = tmp_path / "cars3d.h5"
    with pytest.raises(FormatError, match=match) as exc:
        convert("cars3d", folder, cache, progress=False)
    _one_line(exc, bad.name)
    assert not cache.exists() and not partial_path(cache).exists()


def test_cars3d_archive_errors(tmp_path):
    archive, _ = rf.write_cars3d(tmp_path, archive=True)
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(FormatError, match="truncated") as exc:
        _read("cars3d", archive)
    _one_line(exc, archive.name)
    with tarfile.open(archive, "w:gz") as tar:  # a valid archive without cars/
        info = tarfile.TarInfo("data/README")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(FormatError, match="no car_.*_mesh.mat files") as exc:
        _read("cars3d", archive)
    _one_line(exc, archive.name)


def test_cars3d_prepared_module(tmp_path):
    archive, truth = rf.write_cars3d(tmp_path, archive=True)
    cache = _prepare("cars3d", tmp_path)
    assert cache == tmp_path / "cars3d.h5" and is_complete(cache)
    with h5py.File(cache) as f:
        assert f["images"].shape == (len(truth), 3, 64, 64) and f["images"].chunks is None
        assert list(f.attrs["factor_names"]) == ["elevation", "azimuth", "object_type"]
        assert f.attrs["source"] == archive.name and "nuisance" not in f
    dm = _module("cars3d", tmp_path, factor_sizes=[2, 3, 3], batch_size=4, eval_size=10)
    assert dm.num_channels == 3 and dm.nuisance_names == ()
    images, factors = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    assert images.shape == (4, 3, 64, 64) and 0 <= images.min() and images.max() <= 1
    codes = [int(np.ravel_multi_index(tuple(f), (2, 3, 3))) for f in factors.tolist()]
    assert [rf.decode_index((im * 255).round().byte().numpy()) for im in images] == codes


# ------------------------------------------------------------------------------------------ SmallNORB
@pytest.mark.parametrize("layout", ["gz", "plain", "mixed"])
def test_smallnorb_reader(tmp_path, layout):
    path, truth = rf.write_smallnorb(tmp_path, gz=layout != "plain")
    if layout == "mixed":  # some files decompressed, as after a partial gunzip
        for name in NORB_NAMES[1::2]:
            gz = tmp_path / (name + ".gz")
            (tmp_path / name).write_bytes(gzip.decompress(gz.read_bytes()))
            gz.unlink()
    assert find_raw("smallnorb", tmp_path) == path
    with pytest.warns(UserWarning, match=r"smallnorb.*differ from the official \[5, 9, 18, 6\]"):
        raw = read_raw("smallnorb", path)
    factors, instance = rf.smallnorb_rows()
    np.testing.assert_array_equal(raw.factors, truth)
    np.testing.assert_array_equal(raw.factors, factors)
    np.testing.assert_array_equal(raw.nuisance[:, 0], instance)  # training rows first, then testing
    assert raw.nuisance_names == ("instance",) and raw.nuisance_sizes == (7,)
    assert raw.factor_sizes == rf.SMALLNORB_SIZES and raw.num_channels == 1
    assert raw.source == path
    images = _images(raw)
    assert images.shape == (NORB_N, 1, 64, 64) and images.dtype == np.uint8
    assert [rf.decode_grey(im) for im in images] == list(range(NORB_N))  # the left camera, in file order
    # independently: the left image of each pair, area-averaged 96 -> 64
    half = NORB_N // 2
    for split, offset in ((0, 0), (1, half)):
        file = tmp_path / NORB_NAMES[3 * split]
        data = gzip.decompress(Path(f"{file}.gz").read_bytes()) if Path(f"{file}.gz").exists() else file.read_bytes()
        pairs = np.frombuffer(data[24:], np.uint8).reshape(half, 2, 96, 96)
        fine = np.repeat(np.repeat(pairs[:, 0].astype(np.float64), 2, axis=1), 2, axis=2)
        reference = fine.reshape(half, 64, 3, 64, 3).mean(axis=(2, 4))
        assert np.abs(images[offset: offset + half, 0] - reference).max() <= 0.5 + 1e-3


def test_smallnorb_requires_all_six_files(tmp_path):
    path, _ = rf.write_smallnorb(tmp_path)
    (tmp_path / (NORB_NAMES[5] + ".gz")).unlink()
    assert find_raw("smallnorb", tmp_path) is None
    with pytest.raises(FormatError, match="missing") as exc:
        _read("smallnorb", path)
    _one_line(exc, NORB_NAMES[5])
    with pytest.raises(DatasetNotFoundError) as exc:  # prepare names what is missing and the way out
        _prepare("smallnorb", tmp_path)
    _one_line(exc, NORB_NAMES[5], "download=true")
    assert NORB_NAMES[0] not in str(exc.value)
    assert not list(tmp_path.glob("*.h5*"))


def _norb_file(tmp_path: Path, index: int) -> Path:
    return tmp_path / (NORB_NAMES[index] + ".gz")


@pytest.mark.parametrize("defect, index, match", [
    ("truncated", 3, "truncated at row"),
    ("magic", 1, r"'cat' matrix of int32 \(magic 0x1E3D4C54\), got uint8"),
    ("shape", 0, r"'dat' of shape \(N, 2, 96, 96\), got \(32, 2, 48, 48\)"),
    ("rows", 2, "32 images but .* has 32 rows and .* 31"),
    ("azimuth", 5, "even azimuths"),
    ("garbage", 4, "unreadable or truncated"),
])
def test_smallnorb_errors(tmp_path, defect, index, match):
    rf.write_smallnorb(tmp_path)
    bad = _norb_file(tmp_path, index)
    data = gzip.decompress(bad.read_bytes())
    if defect == "truncated":
        bad.write_bytes(gzip.compress(data[: len(data) // 2]))
    elif defect == "magic":
        bad.write_bytes(gzip.compress(rf.norb_matrix(np.zeros(32, np.uint8))))
    elif defect == "shape":
        bad.write_bytes(gzip.compress(rf.norb_matrix(np.zeros((32, 2, 48, 48), np.uint8))))
    elif defect == "rows":
        bad.write_bytes(gzip.compress(rf.norb_matrix(np.zeros((31, 4), np.int32))))
    elif defect == "azimuth":
        info = np.frombuffer(data[20:], "<i4").reshape(-1, 4).copy()
        info[3, 2] = 5
        bad.write_bytes(gzip.compress(rf.norb_matrix(info.astype(np.int32))))
    else:
        bad.write_bytes(b"this is not gzip data at all")
    cache = tmp_path / "smallnorb.h5"
    with pytest.raises(FormatError, match=match) as exc, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        convert("smallnorb", tmp_path / (NORB_NAMES[0] + ".gz"), cache, progress=False, chunk=8)
    _one_line(exc, bad.name if defect != "rows" else NORB_NAMES[0])
    assert not cache.exists() and not partial_path(cache).exists()


def test_smallnorb_plain_file_size_is_checked(tmp_path):
    rf.write_smallnorb(tmp_path, gz=False)
    bad = tmp_path / NORB_NAMES[0]
    bad.write_bytes(bad.read_bytes()[:-100])
    with pytest.raises(FormatError, match="bytes, expected") as exc:
        _read("smallnorb", bad)
    _one_line(exc, bad.name)


def test_prepare_smallnorb_cli_and_the_nuisance(tmp_path, capsys):
    """``python -m disentangle.prepare data=smallnorb`` end to end; every factor vector maps to images with
    exactly those factors, over all of its instances."""
    assert run_prepare("data=smallnorb", f"data.root={tmp_path}", "download=false") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: smallnorb: no official raw file") and NORB_NAMES[3] in err[0]
    rf.write_smallnorb(tmp_path)
    assert run_prepare("data=smallnorb", f"data.root={tmp_path}", "download=false", "progress=false") == 0
    cache = tmp_path / "smallnorb.h5"
    assert str(cache) in capsys.readouterr().out and is_complete(cache)
    factors, instance = rf.smallnorb_rows()
    with h5py.File(cache) as f:
        assert f["images"].shape == (NORB_N, 1, 64, 64) and f["images"].dtype == np.uint8
        np.testing.assert_array_equal(f["factors"][()], factors)
        np.testing.assert_array_equal(f["nuisance"][()][:, 0], instance)
        assert list(f.attrs["nuisance_names"]) == ["instance"]
    sizes = list(rf.SMALLNORB_SIZES)
    dm = _module("smallnorb", tmp_path, factor_sizes=sizes, batch_size=16, eval_size=20, sampling="uniform_factors")
    assert dm.num_channels == 1 and dm.nuisance_names == ("instance",) and dm.num_samples == NORB_N
    assert torch.equal(dm.factor_table(), torch.as_tensor(factors))

    def instances_of(indices: torch.Tensor) -> np.ndarray:
        images, got = dm.gather(indices)
        rows = _rows(images)
        assert rows.tolist() == indices.tolist()  # each index serves its own image
        return got.numpy(), instance[rows]

    cells = torch.as_tensor(rf.grid(sizes))
    got, _ = instances_of(dm.indices_for_factors(cells))
    np.testing.assert_array_equal(got, cells.numpy())
    gen = torch.Generator().manual_seed(0)
    seen = {}
    for _ in range(30):  # random instances: always the requested factors, and every instance of a cell in turn
        got, inst = instances_of(dm.indices_for_factors(cells, generator=gen))
        np.testing.assert_array_equal(got, cells.numpy())
        for cell, i in zip(map(tuple, got.tolist()), inst):
            seen.setdefault(cell, set()).add(int(i))
    assert all(s == {0, 1, 4, 6} for s in seen.values())
    with pytest.raises(ValueError, match=r"factors \[0, 0, 0, 5\] out of range"):
        dm.indices_for_factors(torch.tensor([[0, 0, 0, 5]]))
    # the i.i.d. factor stream (Friede et al.'s sampling) also draws the instance uniformly
    batches = iter(dm.train_dataloader())
    drawn = torch.cat([next(batches) for _ in range(20)])
    _, inst = instances_of(drawn)
    assert set(inst.tolist()) == {0, 1, 4, 6}
    images, batch_factors = dm.on_after_batch_transfer(next(batches), 0)
    assert images.shape == (16, 1, 64, 64) and batch_factors.shape == (16, 4)


def test_sampled_metrics_get_images_of_the_requested_factors(tmp_path):
    from disentangle.metrics.sampled import factorvae_score

    rf.write_smallnorb(tmp_path)
    _prepare("smallnorb", tmp_path)
    dm = _module("smallnorb", tmp_path, factor_sizes=list(rf.SMALLNORB_SIZES), eval_size=20)
    truth = torch.as_tensor(rf.smallnorb_rows()[0], dtype=torch.float64)

    def encode(images):  # a perfect encoder: reads the row from the image and returns its factors
        return truth[_rows(images)]

    # the sampler checks every gathered batch against the factors it asked for (RuntimeError otherwise)
    out = factorvae_score(dm, encode, n_train=20, n_eval=10, batch_size=16, n_variance=50)
    assert out["factorvae"] >= 0.8 and out["n_active"] == 4


# ------------------------------------------------------------------------------------------ colour dSprites
@pytest.fixture
def dsprites_root(tmp_path):
    _, truth = rf.write_dsprites(tmp_path)
    _prepare("dsprites", tmp_path)
    return tmp_path, truth


def test_colour_dsprites_reads_the_dsprites_cache(dsprites_root):
    root, truth = dsprites_root
    sizes = [int(s) for s in truth.max(0) + 1]
    cfg = compose_config(["data=colour_dsprites", f"data.root={root}", f"data.factor_sizes=[{','.join(map(str, sizes))}]",
                          "data.eval_size=20", "data.batch_size=6"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dm = instantiate(cfg.data)
    grey = _module("dsprites", root, factor_sizes=sizes, eval_size=20)
    assert dm.name == "colour_dsprites" and dm.path == root / "dsprites.h5" and not (root / "colour_dsprites.h5").exists()
    assert dm.num_channels == 3 and grey.num_channels == 1 and dm.factor_sizes == grey.factor_sizes
    batch = next(iter(dm.train_dataloader()))
    images, factors = dm.on_after_batch_transfer(batch, 0)
    mask, grey_factors = grey.gather(batch)
    assert images.shape == (6, 3, 64, 64) and torch.equal(factors, grey_factors)
    on = mask[:, 0] > 0
    # background stays black; the sprite is the mask times one multiplier per image and channel, in [0.5, 1]
    assert (images.permute(1, 0, 2, 3)[:, ~on] == 0).all()
    colours = torch.stack([images[i][:, on[i]].amax(dim=1) for i in range(6)])
    assert torch.equal(torch.stack([images[i][:, on[i]].amin(dim=1) for i in range(6)]), colours)
    assert (colours >= 0.5).all() and (colours <= 1).all()
    assert len({tuple(c) for c in colours.tolist()}) == 6  # a colour per image
    assert (colours.std(dim=1) > 0).all()  # not grey
    # training draws afresh: the same images come back in other colours
    again, _ = dm.on_after_batch_transfer(batch, 0)
    assert not torch.equal(again, images) and torch.equal(again > 0, images > 0)


def test_colour_dsprites_evaluation_is_fixed_by_its_seed(dsprites_root):
    root, truth = dsprites_root
    sizes = [int(s) for s in truth.max(0) + 1]
    kw = {"cache_name": "dsprites", "colour": "random_multipliers", "factor_sizes": sizes, "eval_size": 20}
    dm, same, other = (_module("colour_dsprites", root, eval_seed=s, **kw) for s in (0, 0, 1))
    first = torch.cat([x for x, _ in dm.eval_batches(7)])
    assert torch.equal(first, torch.cat([x for x, _ in dm.eval_batches(7)]))
    assert torch.equal(first, torch.cat([x for x, _ in same.eval_batches(7)]))
    index = torch.arange(10)
    assert torch.equal(dm.gather(index)[0], same.gather(index)[0])
    assert not torch.equal(dm.gather(index)[0], other.gather(index)[0])
    values = dm.gather(torch.arange(len(truth)))[0]
    assert values.max() <= 1 and values[values > 0].min() >= 0.5
    with pytest.raises(ValueError, match="data.colour must be one of"):
        _module("colour_dsprites", root, cache_name="dsprites", colour="rainbow", factor_sizes=sizes, eval_size=20)


def test_colour_needs_grey_images_and_prepare_makes_the_dsprites_cache(tmp_path, capsys):
    rf.write_cars3d(tmp_path)
    _prepare("cars3d", tmp_path)
    with pytest.raises(ValueError, match="needs grey-scale"):
        _module("cars3d", tmp_path, colour="random_multipliers", eval_size=10)
    with pytest.raises(DatasetNotFoundError, match="python -m disentangle.prepare data=dsprites"):
        PreparedDataModule("colour_dsprites", root=tmp_path / "none", cache_name="dsprites",
                           colour="random_multipliers")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert compose("prepare", overrides=["data=colour_dsprites"]).data.cache_name == "dsprites"
    rf.write_dsprites(tmp_path)
    assert run_prepare("data=colour_dsprites", f"data.root={tmp_path}", "download=false", "progress=false") == 0
    assert is_complete(tmp_path / "dsprites.h5") and not (tmp_path / "colour_dsprites.h5").exists()
    assert str(tmp_path / "dsprites.h5") in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ missing raw files
def test_missing_raw_files_name_what_to_put_where(tmp_path):
    with pytest.raises(DatasetNotFoundError) as exc:
        _prepare("cars3d", tmp_path)
    _one_line(exc, "nips2015-analogy-data.tar.gz", "cars/", "download=true")
    with pytest.raises(DatasetNotFoundError) as exc:
        _prepare("smallnorb", tmp_path)
    _one_line(exc, *(n + ".gz" for n in NORB_NAMES))
    for name in ("cars3d", "smallnorb"):
        with pytest.raises(DatasetNotFoundError, match=f"python -m disentangle.prepare data={name}"):
            PreparedDataModule(name, root=tmp_path)
    assert not list(tmp_path.glob("*.h5*"))


def test_download_sources_are_registered():
    from disentangle.data.preparation import dataset_files, source_keys
    from disentangle.data.sources import load_sources

    registry = load_sources()
    assert "http://www.scottreed.info/files/nips2015-analogy-data.tar.gz" in [s.url for s in registry["cars3d"].sources]
    files = dataset_files("smallnorb", None, registry)
    assert [f.filename for f in files] == [n + ".gz" for n in NORB_NAMES]
    assert all(f.sources[0].url.endswith("/" + f.filename) for f in files)
    assert source_keys("dsprites", None) == ("dsprites",) and source_keys("mpi3d", "toy") == ("mpi3d_toy",)
