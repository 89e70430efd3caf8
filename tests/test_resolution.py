"""``data.resolution`` for every prepared dataset: a smaller resolution is derived once from the 64-px cache into a
cache file of its own (antialiased bicubic, atomic like the first conversion), from the official-format fixtures."""
from __future__ import annotations

import json

import numpy as np
import pytest
import raw_fixtures
import torch
from conftest import DATASETS, FAST, PROCEDURAL, compose_config
from hydra.utils import instantiate

from disentangle.data import PreparedDataModule
from disentangle.data.convert import resolution_path
from disentangle.data.formats import downsample
from disentangle.runtime.run import train

PREPARED = [name for name in DATASETS
            if name not in PROCEDURAL and name not in ("balls", "circles", "cliff2d", "causalchamber")]
SOURCE = {"colour_dsprites": "dsprites", "mpi3d_toy": "mpi3d"}  # the cache these read
VARIANT = {"mpi3d_toy": "toy"}


def _fixture(name: str, root) -> np.ndarray:
    kwargs = {"variant": VARIANT[name]} if name in VARIANT else {}
    if name == "mpi3d_toy":
        kwargs["sizes"] = (3, 2, 1, 1, 1, 2, 2)
    _, truth = raw_fixtures.WRITERS[SOURCE.get(name, name)](root, **kwargs)
    return truth


def test_every_prepared_dataset_has_a_config_and_a_fixture():
    assert set(PREPARED) == {"shapes3d", "dsprites", "colour_dsprites", "mpi3d", "mpi3d_toy", "falcor3d",
                             "isaac3d", "cars3d", "smallnorb", "causalchamber_photos"}


@pytest.mark.parametrize("name", PREPARED)
def test_every_prepared_dataset_runs_at_32_px(name, tmp_path):
    truth = _fixture(name, tmp_path)
    sizes = [int(s) for s in truth.max(0) + 1]
    cfg = compose_config([f"data={name}", "data.resolution=32", f"paths.data_root={tmp_path}",
                          f"data.factor_sizes={sizes}", "data.eval_size=4"])
    dm = instantiate(cfg.data)
    assert dm.resolution == 32 and dm.path.name.endswith("_32px.h5")
    images, factors = dm.gather(torch.arange(len(truth)))
    assert images.shape == (len(truth), dm.num_channels, 32, 32) and 0 <= images.min() and images.max() <= 1
    native = PreparedDataModule(dm.name, root=tmp_path, cache_name=dm.cache_name, variant=dm.variant,
                                colour=dm.colour, eval_size=4)
    assert native.resolution == 64 and dm.path == resolution_path(native.path, 32)  # beside the 64-px cache
    expected = downsample(native.data.images[:], 32)  # the same antialiased resampling, rounded to uint8
    assert np.array_equal(dm.data.images[:], expected)
    assert np.array_equal(dm.data.factors, native.data.factors) and torch.equal(factors, native.gather(
        torch.arange(len(truth)))[1])


def test_the_derived_cache_is_made_once_and_a_failure_leaves_nothing(tmp_path, monkeypatch):
    truth = _fixture("shapes3d", tmp_path)
    sizes = [int(s) for s in truth.max(0) + 1]
    dm = PreparedDataModule("shapes3d", root=tmp_path, factor_sizes=sizes, eval_size=4, resolution=16)
    mtime = dm.path.stat().st_mtime_ns
    again = PreparedDataModule("shapes3d", root=tmp_path, factor_sizes=sizes, eval_size=4, resolution=16)
    assert again.path == dm.path and dm.path.stat().st_mtime_ns == mtime  # not rewritten

    from disentangle.data import convert

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(convert, "downsample", broken)
    with pytest.raises(OSError, match="disk full"):
        PreparedDataModule("shapes3d", root=tmp_path, factor_sizes=sizes, eval_size=4, resolution=24)
    assert not (tmp_path / "shapes3d_24px.h5").exists()
    assert not (tmp_path / "shapes3d_24px.h5.partial").exists()
    with pytest.raises(ValueError, match=r"data.resolution must be between 8 and the caches' 64 px \(got 128\)"):
        PreparedDataModule("shapes3d", root=tmp_path, factor_sizes=sizes, eval_size=4, resolution=128)


def test_the_quickstart_runs_on_a_real_dataset(tmp_path):
    """`experiment=quickstart data=shapes3d` (the quickstart's 32 px) trains and evaluates from the fixtures."""
    truth = _fixture("shapes3d", tmp_path / "data")
    sizes = [int(s) for s in truth.max(0) + 1]
    overrides = [o for o in FAST if not o.startswith("data.resolution") and not o.startswith("model/arch")]
    cfg = compose_config(["experiment=quickstart", "data=shapes3d", *overrides, f"paths.data_root={tmp_path / 'data'}",
                          f"data.factor_sizes={sizes}", "data.eval_size=20", "callbacks.evaluation.n_samples=20",
                          "model.batch_size=8"], output_dir=tmp_path / "run")
    assert cfg.data.resolution == 32
    train(cfg)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["data"] == "shapes3d" and record["n_samples"] == 20 and 0 <= record["infom"] <= 1
