"""The papers' published numbers (disentangle/published/results.csv) and the sweep files that reproduce them.

Sweeps are composed in-process with Hydra's compose API (the first value of every swept parameter), nothing is
instantiated, so the whole file runs in seconds.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from disentangle.published import COLUMNS, PUBLISHED_TABLES, load_published

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SWEEP_DIR = ROOT / "sweeps"
# grid sweeps (the basic sweeper); a search such as optuna_infom has no grid to count (tested in test_resume.py)
SWEEPS = sorted(p.stem for p in SWEEP_DIR.glob("*.yaml") if "override hydra/sweeper" not in p.read_text())
GROUPS = ("model", "data")  # swept config groups whose values must be config files
# Cells per published table, counted by hand in the specs' results sections (rows x columns minus n.a./missing).
EXPECTED_ROWS = {
    ("qlae", "1"): 240,         # qlae.md §10.1: 8 models x 5 columns (aggregated + 4 datasets) x (3 InfoMEC + 3 DCI)
    ("qlae", "2"): 180,         # qlae.md §10.2: 6 models x 5 columns x 6 metrics
    ("qlae", "12"): 84,         # qlae.md §10.3: 12 models x 7 columns (InfoM InfoE InfoC D I C PSNR)
    ("qlae", "13"): 84,         # 12 x 7
    ("qlae", "14"): 84,         # 12 x 7
    ("qlae", "15"): 84,         # 12 x 7
    ("tripod", "1"): 210,       # tripod.md §12: 7 models x 5 columns x (3 InfoMCE + 3 DCI)
    ("factorqvae", "1"): 188,   # factorqvae.md §9.1: 9 models x 3 datasets x 7 columns - 1 missing (FactorQVAE MSE)
    ("factorqvae", "2"): 35,    # factorqvae.md §9.2: 5 codebooks x 7 columns
    ("friede", "1"): 44,        # categorical_vae.md §14: 9 models x 6 datasets - 10 n.a.
    ("friede", "5"): 38,        # 8 models x 6 datasets - 10 n.a.
    ("friede", "6"): 36,        # 6 metrics x 6 datasets
    ("friede", "7"): 24,        # 4 models x 6 datasets
    ("cliff", "2"): 3,          # cliff.md §10.2: 3 methods x 1 column (MCC)
    ("cliff", "3"): 12,         # cliff.md §10.3: 3 methods x 4 columns (D C I MIG)
}
UNBOUNDED = {"psnr"}            # every other metric is a score in [0, 1] (mse: per-element, images in [0, 1])
DATASETS = {"aggregated", "shapes3d", "mpi3d", "falcor3d", "isaac3d", "dsprites", "colour_dsprites", "smallnorb",
            "cars3d", "balls"}
UNCERTAINTIES = {"ci95", "se", "std", "quartiles", "none"}


# ------------------------------------------------------------------------------------------------------------
# The published numbers
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rows():
    return load_published()


def _key(r):
    return r["paper"], r["table"], r["method"], r["dataset"], r["metric"]


def test_csv_has_the_columns_and_one_row_per_cell(rows):
    from importlib import resources

    header = resources.files("disentangle.published").joinpath("results.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == COLUMNS
    assert Counter((r["paper"], r["table"]) for r in rows) == EXPECTED_ROWS
    assert sorted(EXPECTED_ROWS) == sorted(PUBLISHED_TABLES)
    assert len({_key(r) for r in rows}) == len(rows), "a (paper, table, method, dataset, metric) appears twice"


def test_values_intervals_and_scales_are_consistent(rows):
    from disentangle.metrics.suite import SCALAR_KEYS

    for r in rows:
        where = _key(r)
        assert r["metric"] in SCALAR_KEYS, where
        assert r["dataset"] in DATASETS, where
        assert r["uncertainty"] in UNCERTAINTIES, where
        assert isinstance(r["value"], float), where
        if r["metric"] in UNBOUNDED:
            assert 10 < r["value"] < 60, where            # PSNR in dB
        else:
            assert 0.0 <= r["value"] <= 1.0, where       # percentages divided by 100, MSE x 1e-4
        if r["uncertainty"] == "none":
            assert r["low"] is None and r["high"] is None, where
            continue
        assert r["low"] is not None and r["high"] is not None, where
        assert r["low"] <= r["value"] <= r["high"], where
        if r["uncertainty"] in ("ci95", "se", "std"):    # value ± half-width
            assert math.isclose(r["value"] - r["low"], r["high"] - r["value"], abs_tol=1e-9), where
        assert r["n_seeds"] is None or r["n_seeds"] > 0


def test_spot_values_as_printed(rows):
    idx = {_key(r): r for r in rows}
    # qlae.md Table 12: QLAE (ours) InfoM 0.95 ± 0.02; PSNR 32.9 ± 0.2 dB
    r = idx["qlae", "12", "QLAE", "shapes3d", "infom"]
    assert (r["value"], r["low"], r["high"], r["uncertainty"], r["n_seeds"]) == (0.95, 0.93, 0.97, "ci95", 7)
    assert "ours" in r["note"]
    assert idx["qlae", "12", "QLAE", "shapes3d", "psnr"]["value"] == 32.9
    # Tripod Table 1 prints (InfoM InfoC InfoE): Tripod aggregated (0.78 0.59 0.90); DCI printed as (D C I)
    assert [idx["tripod", "1", "Tripod", "aggregated", k]["value"] for k in ("infom", "infoc", "infoe")] == [
        0.78, 0.59, 0.90]
    assert [idx["tripod", "1", "Tripod (naive)", "mpi3d", k]["value"] for k in ("dci_d", "dci_c", "dci_i")] == [
        0.46, 0.40, 0.85]
    # FactorQVAE Table 1 MSE is printed x 10^4
    assert idx["factorqvae", "1", "FactorQVAE", "mpi3d", "mse"]["value"] == pytest.approx(1.1e-4)
    assert ("factorqvae", "1", "FactorQVAE", "shapes3d", "mse") not in idx   # missing in the source text
    assert idx["factorqvae", "2", "FactorVQVAE (M = 64x16)", "shapes3d", "infom"]["value"] == 0.51
    # Friede et al.: percentages; n.a. cells are not rows; Table 6's "DCI" is DCI disentanglement
    r = idx["friede", "1", "β-VAE", "dsprites", "mig"]
    assert r["value"] == 0.113 and "Locatello" in r["note"]
    assert ("friede", "1", "β-VAE", "shapes3d", "mig") not in idx
    r = idx["friede", "6", "D-VAE", "shapes3d", "dci_d"]
    assert (r["value"], r["low"], r["high"], r["uncertainty"]) == (0.728, 0.681, 0.782, "quartiles")
    # Cliff: mean ± standard error, x100
    r = idx["cliff", "3", "Cliff", "shapes3d", "dci_d"]
    assert (r["value"], r["low"], r["high"], r["uncertainty"], r["n_seeds"]) == (0.8033, 0.7773, 0.8293, "se", 10)
    assert idx["cliff", "2", "IOSS", "balls", "mcc"]["value"] == 0.6051


def test_tables_agree_where_the_papers_repeat_a_number(rows):
    idx = {_key(r): r for r in rows}
    per_dataset = {"shapes3d": "12", "mpi3d": "13", "falcor3d": "14", "isaac3d": "15"}
    for (paper, table, method, dataset, metric), r in idx.items():
        if paper == "qlae" and table in ("1", "2") and dataset != "aggregated":   # Tables 1-2 = means of 12-15
            assert idx["qlae", per_dataset[dataset], method, dataset, metric]["value"] == r["value"]
        if paper in ("qlae", "tripod") and dataset == "aggregated":               # mean over the 4 datasets
            mean = sum(idx[paper, table, method, d, metric]["value"] for d in per_dataset) / 4
            assert abs(mean - r["value"]) <= 0.0101, (paper, table, method, metric)
    for dataset in ("dsprites", "colour_dsprites", "smallnorb", "cars3d", "shapes3d", "mpi3d"):
        t1, t5, t6 = (idx["friede", t, "D-VAE", dataset, "mig"] for t in ("1", "5", "6"))
        assert t1["value"] == t5["value"] == t6["value"] and (t5["low"], t5["high"]) == (t6["low"], t6["high"])


def test_load_published_filters():
    assert len(load_published("qlae", 12)) == len(load_published("qlae", "12")) == 84
    assert {r["paper"] for r in load_published("friede")} == {"friede"}
    assert load_published("nope") == []
    assert 'disentangle.published" = ["*.csv"]' in (ROOT / "pyproject.toml").read_text()  # shipped as package data


# ------------------------------------------------------------------------------------------------------------
# The sweeps
# ------------------------------------------------------------------------------------------------------------
def _header(name: str) -> str:
    lines = (SWEEP_DIR / f"{name}.yaml").read_text().splitlines()
    head = []
    for line in lines:
        if not line.startswith("#"):
            break
        head.append(line)
    return "\n".join(head)


def _params(name: str) -> dict[str, str]:
    cfg = OmegaConf.load(SWEEP_DIR / f"{name}.yaml")
    return {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}


def _values(spec: str) -> list[str]:
    """The values of one swept parameter: ``range(a,b[,step])`` or a comma list."""
    m = re.fullmatch(r"range\((-?\d+),\s*(-?\d+)(?:,\s*(-?\d+))?\)", spec.strip())
    if m:
        return [str(v) for v in range(int(m[1]), int(m[2]), int(m[3] or 1))]
    assert "(" not in spec, f"unsupported sweep syntax {spec!r}"
    return [v.strip() for v in spec.split(",")]


def _missing(group: str, value: str) -> bool:
    return not (CONF / group / f"{value}.yaml").exists()


def _compose(name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(SWEEP_DIR), version_base="1.3"):
        return compose(name, overrides=[f"hydra.searchpath=[file://{CONF}]", *overrides,
                                        "paths.output_dir=/tmp/unused"])


@pytest.mark.parametrize("sweep", SWEEPS)
def test_sweep_composes_with_the_first_value_of_every_axis(sweep):
    params = _params(sweep)
    first = {key: _values(spec)[0] for key, spec in params.items()}
    missing = [f"{k}={v}" for k, v in first.items() if k in GROUPS and _missing(k, v)]
    overrides = [f"{k}={v}" for k, v in first.items()]
    if missing:  # a table whose rows are not implemented yet: it must say so and stop with a clear line
        for item in missing:
            assert item in _header(sweep), f"{sweep}: {item} is swept but not listed as missing in the header"
        with pytest.raises(Exception, match=re.escape(f"Could not find '{missing[0].replace('=', '/')}'")):
            _compose(sweep, overrides)
        return
    cfg = _compose(sweep, overrides)
    assert cfg.model.name and cfg.data.name
    OmegaConf.to_container(cfg.model, resolve=True)
    for key, value in first.items():
        if key == "experiment":  # composed above (a missing file fails there); it leaves no node to compare
            continue
        if key in GROUPS:
            assert cfg[key].name == value
        elif key == "seed":
            assert cfg.seed == int(value)
        elif (CONF / key).is_dir():  # another config group (conf/correlation): composed above, it has no name node
            continue
        else:
            numeric = re.fullmatch(r"-?[\d.]+(e-?\d+)?", value) is not None
            assert str(OmegaConf.select(cfg, key)) in (value, str(float(value)) if numeric else value), key


@pytest.mark.parametrize("sweep", [s for s in SWEEPS if "model" in _params(s)])
def test_every_swept_model_composes_with_the_sweeps_settings(sweep):
    """Each model of a multi-model sweep under the sweep's own overrides (e.g. Tripod's networks for QLAE)."""
    params = _params(sweep)
    first = {key: _values(spec)[0] for key, spec in params.items() if key != "model"}
    for model in _values(params["model"]):
        if _missing("model", model):
            continue
        cfg = _compose(sweep, [f"{k}={v}" for k, v in first.items()] + [f"model={model}"])
        assert cfg.model.name == model
        OmegaConf.to_container(cfg.model, resolve=True)   # every interpolation (tuned values, n_latents) resolves


@pytest.mark.parametrize("sweep", SWEEPS)
def test_sweep_values_exist_or_are_declared_missing(sweep):
    header = _header(sweep)
    for key, spec in _params(sweep).items():
        if key not in GROUPS:
            continue
        for value in _values(spec):
            if _missing(key, value):
                assert f"{key}={value}" in header, f"{sweep}: {key}={value} has no config and is not declared"


@pytest.mark.parametrize("sweep", SWEEPS)
def test_sweep_header_gives_command_and_run_count(sweep):
    header = _header(sweep)
    assert f"python -m disentangle.train -m -cd sweeps -cn {sweep}" in header
    runs = re.search(r"^# Runs: (.*)= ([\d,]+)", header, re.MULTILINE)
    assert runs, f"{sweep}: no '# Runs: ... = N' line"
    grid = math.prod(len(_values(spec)) for spec in _params(sweep).values())
    assert int(runs[2].replace(",", "")) == grid, f"{sweep}: the header says {runs[2]} runs, the grid has {grid}"


def test_every_published_table_has_a_sweep():
    reproduced: dict[tuple[str, str], list[str]] = {}
    for sweep in SWEEPS:
        for line in _header(sweep).splitlines():
            if line.startswith("# Reproduces:"):
                for paper, table in re.findall(r"(\w+) Table (\w+)", line):
                    reproduced.setdefault((paper, table), []).append(sweep)
    assert sorted(reproduced) == sorted(PUBLISHED_TABLES), set(reproduced) ^ set(PUBLISHED_TABLES)
    for paper, table in PUBLISHED_TABLES:
        assert load_published(paper, table), (paper, table)
