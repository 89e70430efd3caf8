"""data=causalchamber: the light tunnel's image simulators (the real ``causalchamber`` package, Gamella et al. 2025)
as a factor-indexed dataset: the images are the package's, the grid is complete, the physics' invariance shows, and
a model trains and is scored on it (issue 43 item 4)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FAST, compose_config

from disentangle.data.causalchamber import FACTOR_NAMES, CausalChamberDataModule, factor_values, simulator
from disentangle.errors import ConfigError
from disentangle.runtime.preflight import check_training_config
from disentangle.runtime.run import train

SMALL = {"factor_sizes": (3, 2, 2, 4, 4), "resolution": 16, "batch_size": 4, "eval_size": 8}


@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")  # their np.cross
@pytest.mark.parametrize("model", ["F1", "F2", "F3"])
def test_the_images_are_the_packages_simulator_output(model):
    dm = CausalChamberDataModule(simulator=model, **SMALL)
    indices = torch.arange(dm.num_samples)
    images, factors = dm.gather(indices)
    assert images.shape == (dm.num_samples, 3, 16, 16) and images.dtype == torch.float32
    values = factor_values(dm.factor_sizes, (0, 75))
    inputs = pd.DataFrame({n: v[factors[:, i].numpy()] for i, (n, v) in enumerate(zip(FACTOR_NAMES, values))})
    with contextlib.redirect_stdout(io.StringIO()):
        from causalchamber.simulators.lt.image.models_f import ModelF1, ModelF2, ModelF3
    expected = simulator(model, 16).simulate_from_inputs(inputs)  # (N, 16, 16, 3) float64
    assert isinstance(simulator(model, 16), {"F1": ModelF1, "F2": ModelF2, "F3": ModelF3}[model])
    got = images.permute(0, 2, 3, 1).numpy()
    assert np.abs(got - expected).max() <= 0.5 / 255 + 1e-6  # uint8 storage of the same images
    assert expected.max() > 0.5 and (got[:, 0, 0] == 0).all()  # a lit hexagon on a black corner


def test_the_grid_is_complete_and_its_values_are_the_stated_ones():
    dm = CausalChamberDataModule(**SMALL)
    table = dm.factor_table()
    assert dm.num_samples == 3 * 2 * 2 * 4 * 4 == len(torch.unique(table, dim=0))
    assert dm.factor_names == ("red", "green", "blue", "pol_1", "pol_2")
    values = factor_values((6, 6, 6, 6, 6), (0, 75))
    assert all(v.tolist() == [0, 51, 102, 153, 204, 255] for v in values[:3])
    assert all(v.tolist() == [0, 15, 30, 45, 60, 75] for v in values[3:])


def test_the_angles_act_only_through_their_difference():
    """Malus' law: swapping the polarizers' angles, or turning both by the same amount, renders the same image; the
    difference changes it. The dataset cannot separate pol_1 from pol_2, by physics, and says so."""
    dm = CausalChamberDataModule(simulator="F3", factor_sizes=(2, 2, 2, 4, 4), resolution=16, batch_size=4,
                                 eval_size=8)
    sizes = dm.factor_sizes

    def image(r, g, b, p1, p2):
        index = torch.tensor([np.ravel_multi_index((r, g, b, p1, p2), sizes)])
        return dm.gather(index)[0][0]

    assert torch.equal(image(1, 1, 0, 0, 2), image(1, 1, 0, 2, 0))  # swapped
    assert torch.equal(image(1, 0, 1, 0, 1), image(1, 0, 1, 2, 3))  # both turned by 25 degrees
    assert not torch.equal(image(1, 0, 1, 0, 0), image(1, 0, 1, 0, 3))  # 0 vs 75 degrees apart


def test_bad_settings_and_a_missing_package_get_one_line(monkeypatch):
    with pytest.raises(ValueError, match=r"data.simulator must be one of \['F1', 'F2', 'F3'\]"):
        CausalChamberDataModule(simulator="F4")
    with pytest.raises(ValueError, match="data.factor_sizes must give 5 sizes"):
        CausalChamberDataModule(factor_sizes=(2, 2, 2))
    with pytest.raises(ValueError, match="data.pol_range"):
        CausalChamberDataModule(pol_range=(0, 270))
    for name in [m for m in sys.modules if m == "causalchamber" or m.startswith("causalchamber.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "causalchamber", None)  # as if not installed
    words = r"needs the causalchamber package, which is not installed: pip install 'disentangle-quantized\[causalchamber\]'"
    with pytest.raises(ConfigError, match=words):  # before torch is imported: the command's preflight
        check_training_config(compose_config(["data=causalchamber"]))
    with pytest.raises(ConfigError, match=words):  # and the build
        CausalChamberDataModule(**SMALL)


def test_rendering_prints_nothing(capfd):
    CausalChamberDataModule(**SMALL).setup()
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_model_trains_and_is_scored_on_it(tmp_path):
    """The config composes with the quickstart's model (Tripod), trains with the real Trainer and gets every metric
    over the five factors."""
    cfg = compose_config(["data=causalchamber", *FAST, "data.eval_size=256"], output_dir=tmp_path)
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr"):
        assert math.isfinite(record[key]) and record[key] == pytest.approx(result[key]), key
    assert record["data"] == "causalchamber" and record["factor_names"] == list(FACTOR_NAMES)
    assert np.array(record["nmi"]).shape == (5, 10)


def test_the_quickstart_comparison_has_its_row():
    """The quickstart on this data is measured in docs/getting-started.md's comparison (issue 43 item 4)."""
    from conftest import ROOT

    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `model=tripod data=causalchamber` |")]
    assert len(rows) == 2  # the InfoMEC + PSNR table and the DCI table
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert cells and all(re.fullmatch(r"\d+\.\d+", c) for c in cells), row


def test_the_real_photographs_prepare_from_the_owners_zip_and_train(tmp_path):
    """data=causalchamber_photos: the owners' lt_crl_benchmark_v1.zip layout (a fixture in that format: csv of
    measured settings, 64-px JPEGs) is converted with its factors binned by equal frequency, and a model trains and
    is scored on it. Its download goes through sources.yaml like every dataset (tests/test_download.py)."""
    import raw_fixtures

    _, truth = raw_fixtures.write_causalchamber_photos(tmp_path / "data")
    sizes = list(raw_fixtures.PHOTOS_SIZES)
    cfg = compose_config(["data=causalchamber_photos", *FAST, f"paths.data_root={tmp_path / 'data'}",
                          f"data.factor_sizes={sizes}", "data.eval_size=48", "callbacks.evaluation.n_samples=48"],
                         output_dir=tmp_path / "run")
    result = train(cfg)
    assert (tmp_path / "data" / "causalchamber_photos.h5").is_file()  # the default experiment, uniform
    from disentangle.data import open_prepared

    data = open_prepared("causalchamber_photos", tmp_path / "data")
    assert np.array_equal(data.factors, truth) and data.factor_names == FACTOR_NAMES
    assert all(raw_fixtures.decode_photo_index(data.images[i]) == i for i in range(len(truth)))
    assert math.isfinite(result["infom"]) and math.isfinite(result["dci_d"])


def test_a_photographs_file_in_another_layout_is_named_in_one_line(tmp_path):
    import zipfile

    import raw_fixtures

    from disentangle.data.formats import FormatError, read_raw

    path, _ = raw_fixtures.write_causalchamber_photos(tmp_path, experiment="buchholz_1_obs")
    with pytest.raises(FormatError, match=r"no uniform/uniform.csv \(experiments in it: \['buchholz_1_obs'\]\)"):
        read_raw("causalchamber_photos", path)
    with zipfile.ZipFile(tmp_path / "broken.zip", "w") as zf:
        zf.writestr("lt_crl_benchmark_v1/uniform/uniform.csv", "red,green,blue,pol_1\n1,2,3,4\n")
    with pytest.raises(FormatError, match=r"missing columns \['pol_2', 'image_file'\]"):
        read_raw("causalchamber_photos", tmp_path / "broken.zip")
    raw = read_raw("causalchamber_photos", path, variant="buchholz_1_obs", factor_sizes=raw_fixtures.PHOTOS_SIZES)
    assert raw.n == 48
