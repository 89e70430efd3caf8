"""Prepare and train from official-format raw files (small grids), through the real CLI entry points."""
import json

import forked_cli
import numpy as np
import pytest
from conftest import FAST, run_cli
from raw_fixtures import decode_index, write_isaac3d

from disentangle.data import load_dataset
from disentangle.errors import DatasetNotFoundError

SIZES = (2,) * 9


def run_prepare(*args):
    return forked_cli.run("disentangle.prepare", *args, timeout=300)


def test_prepare_converts_official_raw_files_once(tmp_path):
    _, truth = write_isaac3d(tmp_path, sizes=SIZES)
    res = run_prepare("data=isaac3d", f"data.root={tmp_path}", "download=false", "progress=false")
    assert res.returncode == 0, res.stderr[-2000:]
    cache = tmp_path / "isaac3d.h5"
    assert str(cache) in res.stdout
    data = load_dataset("isaac3d", root=tmp_path)
    assert isinstance(data.images, np.memmap) and data.images.shape == (len(truth), 3, 64, 64)
    assert data.images.dtype == np.uint8 and data.factors.dtype == np.int64
    assert np.array_equal(data.factors, truth)
    assert [decode_index(img) for img in data.images[:5]] == list(range(5))
    mtime = cache.stat().st_mtime_ns
    again = run_prepare("data=isaac3d", f"data.root={tmp_path}", "download=false", "progress=false")
    assert again.returncode == 0 and cache.stat().st_mtime_ns == mtime  # a no-op


def test_prepare_without_raw_files_and_without_download_fails_in_one_line(tmp_path):
    res = run_prepare("data=isaac3d", f"data.root={tmp_path}", "download=false")
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Isaac3D_down128" in lines[0] and "Traceback" not in res.stderr
    assert not list(tmp_path.glob("*.h5*"))


def test_prepare_says_procedural_data_needs_nothing():
    res = run_prepare("data=shapes2d")
    assert res.returncode == 0 and "nothing to prepare" in res.stdout


def test_train_tripod_on_isaac3d_from_raw_files_in_data_root(tmp_path):
    """The datasets issue's acceptance: raw Isaac3D files in data.root -> training runs; none -> clear error."""
    write_isaac3d(tmp_path, sizes=SIZES)
    fast = [o for o in FAST if not o.startswith(("data.resolution", "print_summary"))]
    run_dir = tmp_path / "run"
    res = run_cli(*fast, "model=tripod", "data=isaac3d", f"data.root={tmp_path}",
                  f"data.factor_sizes=[{','.join(map(str, SIZES))}]", "data.eval_size=256",
                  f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["data"] == "isaac3d" and len(record["nmi"]) == 9 and len(record["active"]) == 18
    assert (tmp_path / "isaac3d.h5").is_file()


def test_data_module_without_raw_or_cache_raises_not_found(tmp_path):
    from disentangle.data import PreparedDataModule

    with pytest.raises(DatasetNotFoundError, match="python -m disentangle.prepare data=isaac3d"):
        PreparedDataModule("isaac3d", root=tmp_path, raw="Isaac3D_down128/ folder")
