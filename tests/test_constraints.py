"""Train-time constraints (issue 46 item 1): held-out combinations (``data.split``, Schott et al. 2022's rules) and
correlated pairs (``data.correlation``, Roth et al. 2023's weights). Known answers on the papers' grids, the sampler
checked exhaustively on a small grid, correlations against their exact value, resume, and every model family
training under a split and a correlation."""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import re

import numpy as np
import pytest
import raw_fixtures
import torch
from conftest import DATASETS, FAST, FIGURES, compose_config
from hydra.utils import instantiate

from disentangle.data.base import ConstrainedStream
from disentangle.data.constraints import (
    MONTERO,
    correlation_weights,
    heldout_mask,
    parse_correlation,
)
from disentangle.errors import ConfigError
from disentangle.runtime.families import FAMILIES
from disentangle.runtime.run import train


def _grid(sizes):
    return np.array(list(itertools.product(*[range(n) for n in sizes])))


# the benchmark's grids (Schott et al.'s factor order), their kept factors and ratios, and the trained fractions their
# rules give (the benchmark's own test pins the held-out share at about 0.7)
PAPER_GRIDS = {
    "dsprites": ((3, 6, 40, 32, 32), ("shape", "scale", "orientation", "x", "y"), 0.2, ("shape",),
                 {"extrapolation": 0.3255, "interpolation": 0.3255, "composition": 0.2608}),
    "shapes3d": ((10, 10, 10, 8, 4, 15), ("floor", "wall", "object", "size", "type", "azimuth"), 0.15, ("type",),
                 {"extrapolation": 0.3072, "interpolation": 0.3072, "composition": 0.3196}),
    "mpi3d": ((6, 6, 2, 3, 3, 40, 40), ("color", "shape", "size", "height", "bg", "x", "y"), 0.1, ("shape", "size"),
              {"extrapolation": 0.300, "interpolation": 0.300, "composition": 0.2775}),
}


@pytest.mark.parametrize("dataset", sorted(PAPER_GRIDS))
def test_the_splits_keep_schott_et_al_s_shares_on_their_grids(dataset):
    sizes, names, ratio, keep, trained = PAPER_GRIDS[dataset]
    table = _grid(sizes)
    for split, share in trained.items():
        held = heldout_mask(table, sizes, names, split, ratio, keep)
        assert round(1 - held.mean(), 4) == pytest.approx(share, abs=1e-4), split
        for k, name in enumerate(names):  # a kept factor has all its values on both sides
            if name in keep:
                assert set(table[held, k]) == set(table[~held, k]) == set(range(sizes[k]))
    assert not heldout_mask(table, sizes, names, "random", ratio, keep).any()


def test_the_held_out_values_are_the_stated_ones():
    """Shapes3D's floor hue (10 values, r 0.15): extrapolation holds out {8, 9}, interpolation {2, 7}. Composition
    trains where any varying factor is among its lowest floor(n q) values, q = 1 - (1 - (1-r)^m)^(1/m): with one
    varying factor q = 1 - r, so the lowest 8 train (it equals extrapolation there)."""
    sizes, names = (10, 4), ("floor", "type")
    table = _grid(sizes)
    for split, out in (("extrapolation", {8, 9}), ("interpolation", {2, 7})):
        held = heldout_mask(table, sizes, names, split, 0.15, ("type",))
        assert set(table[held, 0]) == out and not set(table[~held, 0]) & out
    held = heldout_mask(table, sizes, names, "composition", 0.15, ("type",))
    assert set(table[~held, 0]) == set(range(8))
    sizes, names = (10, 10, 4), ("floor", "wall", "type")  # two varying factors: q = 0.473, the lowest 4 train
    table = _grid(sizes)
    held = heldout_mask(table, sizes, names, "composition", 0.15, ("type",))
    assert np.array_equal(~held, (table[:, 0] < 4) | (table[:, 1] < 4))


@pytest.mark.parametrize("split", ["composition", "interpolation", "extrapolation"])
@pytest.mark.parametrize("correlated", [False, True])
def test_the_sampler_never_yields_a_held_out_combination(split, correlated):
    """Exhaustively on an 8 x 10 x 6 grid: every batch of the stream lies in the trainable set; without correlations
    one epoch covers exactly that set, with them every trainable sample likely to be drawn is."""
    sizes, names = (8, 10, 6), ("a", "b", "c")
    table = _grid(sizes)
    held = heldout_mask(table, sizes, names, split, 0.3)
    assert 0 < held.sum() < len(table)
    allowed = torch.from_numpy(np.nonzero(~held)[0])
    weights = None
    batch, batches = 3, 2000
    if correlated:
        pairs = parse_correlation([{"factors": ["a", "b"], "sigma": 0.2}], names)
        weights = torch.from_numpy(correlation_weights(table[allowed.numpy()], sizes, pairs))
    stream = iter(ConstrainedStream(allowed, weights, batch, seed=1))
    seen = torch.cat([next(stream) for _ in range(batches)])
    assert not held[seen.numpy()].any()
    if correlated:
        expected = allowed[weights / weights.sum() * batch * batches > 20]  # each drawn about 20 times or more
        assert set(expected.tolist()) <= set(seen.tolist()) <= set(allowed.tolist())
    else:
        per_epoch = len(allowed) // batch
        first = seen[: per_epoch * batch]
        assert len(set(first.tolist())) == per_epoch * batch  # without replacement within an epoch
        assert set(seen.tolist()) == set(allowed.tolist())
    with pytest.raises(ValueError, match="trains on nothing"):
        heldout_mask(_grid((4, 5, 3)), (4, 5, 3), names, "composition", 0.3)


def _exact_correlation(sizes, pairs, i, j):
    table = _grid(sizes).astype(float)
    p = correlation_weights(table, sizes, pairs)
    p /= p.sum()
    a, b = table[:, i], table[:, j]
    ma, mb = (p * a).sum(), (p * b).sum()
    return (p * (a - ma) * (b - mb)).sum() / math.sqrt((p * (a - ma) ** 2).sum() * (p * (b - mb) ** 2).sum())


@pytest.mark.parametrize(("sigma", "anti"), [(0.1, False), (0.4, False), (0.2, True)])
def test_the_empirical_correlation_matches_the_configured_strength(sigma, anti):
    sizes, names = (10, 10, 3), ("floor", "wall", "type")
    pairs = parse_correlation([{"factors": ["floor", "wall"], "sigma": sigma, "anti": anti}], names)
    exact = _exact_correlation(sizes, pairs, 0, 1)
    table = _grid(sizes)
    allowed = torch.arange(len(table))
    weights = torch.from_numpy(correlation_weights(table, sizes, pairs))
    stream = iter(ConstrainedStream(allowed, weights, 1000, seed=0))
    draws = table[torch.cat([next(stream) for _ in range(200)]).numpy()]
    empirical = np.corrcoef(draws[:, 0], draws[:, 1])[0, 1]
    assert empirical == pytest.approx(exact, abs=0.01)
    assert (exact < -0.5) if anti else (exact > 0.5 if sigma == 0.1 else 0 < exact)
    assert abs(np.corrcoef(draws[:, 0], draws[:, 2])[0, 1]) < 0.02  # the third factor stays independent


def test_strength_orders_the_correlation():
    sizes, names = (10, 10), ("floor", "wall")
    values = [_exact_correlation(sizes, parse_correlation([{"factors": ["floor", "wall"], "sigma": s}], names), 0, 1)
              for s in (0.04, 0.1, 0.4, 10.0)]
    assert values == sorted(values, reverse=True) and values[0] > 0.95 and abs(values[-1]) < 0.01


@pytest.mark.parametrize("correlation", [None, [{"factors": ["floor_hue", "wall_hue"], "sigma": 0.1}]])
def test_a_split_is_reproducible_from_its_seed_and_resumes_where_it_stopped(correlation):
    overrides = ["data=shapes2d", "data.split=composition", "model.batch_size=16", "seed=3"]
    if correlation:
        overrides.append("data.correlation=[{factors: [floor_hue, wall_hue], sigma: 0.1}]")
    dm = instantiate(compose_config(overrides).data)
    allowed, weights = dm.training_weights()
    fresh = iter(ConstrainedStream(allowed, weights, 16, seed=3))
    batches = [next(fresh) for _ in range(12)]
    again = iter(ConstrainedStream(allowed, weights, 16, seed=3))
    assert all(torch.equal(a, next(again)) for a in batches)
    resumed = iter(ConstrainedStream(allowed, weights, 16, seed=3, start=7))
    assert all(torch.equal(batches[k], next(resumed)) for k in range(7, 12))
    other = iter(ConstrainedStream(allowed, weights, 16, seed=4))
    assert not torch.equal(batches[0], next(other))
    held = dm.heldout_indices()
    assert len(held) == round(dm.num_samples * (1 - 0.3196)) or abs(len(held) / dm.num_samples - 0.6804) < 1e-3


def test_bad_settings_get_one_line():
    from disentangle.data import BallsDataModule, ProceduralDataModule

    with pytest.raises(ValueError, match=r"data.split must be one of \['random', 'composition'"):
        ProceduralDataModule("shapes2d", split="diagonal")
    with pytest.raises(ValueError, match=r"data.correlation\[0\].factors must be two different factors"):
        ProceduralDataModule("shapes2d", correlation=[{"factors": ["floor_hue", "hue"], "sigma": 1}]).training_weights()
    with pytest.raises(ValueError, match=r"data.correlation\[0\].sigma must be > 0"):
        ProceduralDataModule("shapes2d", correlation=[{"factors": ["floor_hue", "wall_hue"], "sigma": 0}]
                             ).training_weights()
    with pytest.raises(ValueError, match=r"data.split_keep names \['colour'\]"):
        ProceduralDataModule("shapes2d", split="composition", split_keep=["colour"]).heldout_mask()
    with pytest.raises(ValueError, match="need discrete factors"):
        BallsDataModule(split="composition")
    with pytest.raises(ValueError, match="cannot be combined with data.split"):
        ProceduralDataModule("shapes2d", split="extrapolation", sampling="uniform_factors")


# Every family's representative (disentangle.runtime.families) on image data; the encoder-only family is Cliff's 2-D
# experiment, whose factors are continuous: splits and correlations are refused there (tested above).
IMAGE_FAMILIES = {family: choice for family, choice in FAMILIES.items() if not family.encoder_only}


def test_only_the_encoder_only_family_is_left_out():
    assert [f for f in FAMILIES if f not in IMAGE_FAMILIES] == [f for f in FAMILIES if f.encoder_only]
    assert len([f for f in FAMILIES if f.encoder_only]) == 1


@pytest.mark.parametrize("family", list(IMAGE_FAMILIES), ids=lambda f: f"{f.model_class}-{f.latent}"
                         f"{'-adv' if f.several_updates else ''}{'-labels' if f.labelled_stream else ''}")
def test_every_model_family_trains_under_a_split_and_a_correlation(family, tmp_path):
    overrides = [*FAST, "data=shapes2d", "data.split=composition",
                 "data.correlation=[{factors: [floor_hue, wall_hue], sigma: 0.1}]", "callbacks.evaluation.metrics=[infomec]",
                 "callbacks.evaluation.n_samples=128", *IMAGE_FAMILIES[family]]
    if family.labelled_stream:  # Friede et al.'s protocol samples uniform factors, which a split replaces
        overrides += ["model.regularizers.supervision.n_labels=40", "model.regularizers.supervision.batch_size=8",
                      "data.sampling=epochs"]
    cfg = compose_config(overrides, output_dir=tmp_path)
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert math.isfinite(result["infom"]) and record["step"] == 4
    # and is scored out of distribution: the held-out combinations get InfoMEC, both readouts and, for a model
    # that reconstructs, PSNR
    ood = record["ood"]
    assert ood["split"] == "composition" and ood["n_samples"] == 128 and math.isfinite(ood["infom"])
    assert all(math.isfinite(ood[f"r2_{kind}"]) and math.isfinite(record[f"r2_{kind}"]) for kind in ("linear", "mlp"))
    assert ("psnr" in ood) == ("psnr" in record)


def test_the_semi_supervised_labels_come_only_from_trainable_combinations():
    from disentangle.runtime.run import build

    cfg = compose_config([*FAST, "experiment=friede_semisupervised", "model=dvae_friede_masked", "data=shapes2d",
                          "data.sampling=epochs", "data.split=extrapolation",
                          "model.regularizers.supervision.n_labels=200"])
    job = build(cfg)
    supervision = job.model.regularizers["supervision"]
    supervision.attach_data(job.datamodule)  # what training does at its start
    held = {tuple(row) for row in job.datamodule.factor_table()[job.datamodule.heldout_mask()].tolist()}
    labels = torch.cat([supervision.labels["train"], supervision.labels["validation"]])
    assert len(labels) == 200 and not {tuple(row) for row in labels.tolist()} & held


# -- Montero et al.'s recombination splits -----------------------------------------------------------------------
MONTERO_GRIDS = {"dsprites": (["shape", "scale", "orientation", "pos_x", "pos_y"], [3, 6, 40, 32, 32]),
                 "shapes3d": (["floor_hue", "object_hue", "orientation", "scale", "shape", "wall_hue"],
                              [10, 10, 15, 8, 4, 10]),
                 "mpi3d": (["object_color", "object_shape", "object_size", "camera_height", "background_color",
                            "robot_x", "robot_y"], [6, 6, 2, 3, 3, 40, 40])}


def _grid(sizes):
    return np.stack(np.meshgrid(*[np.arange(n) for n in sizes], indexing="ij"), -1).reshape(-1, len(sizes))


@pytest.mark.parametrize("dataset, split, held", [
    # counts from their filters on raw values (mmrl/disent-and-gen, scripts/configs/datasplits.py)
    ("dsprites", "recombination_to_element", 1 * 4 * 12 * 11 * 11),     # 5,808
    ("dsprites", "recombination_to_range", 1 * 6 * 40 * 16 * 32),       # squares in the right half
    ("shapes3d", "recombination_to_element", 2 * 2 * 2 * 3 * 1 * 3),    # 72
    ("shapes3d", "recombination_to_range", 10 * 5 * 15 * 8 * 1 * 10),   # pills with object hue >= 0.5
    ("mpi3d", "recombination_to_element", 4 * 4),                      # 16
    ("mpi3d", "recombination_to_range", 6 * 1 * 2 * 3 * 3 * 20 * 40),  # cylinders with x < 20
])
def test_montero_recombination_splits_hold_out_their_published_sets(dataset, split, held):
    names, sizes = MONTERO_GRIDS[dataset]
    table = _grid(sizes)
    mask = heldout_mask(table, sizes, names, split, 0.0, (), dataset=dataset)
    assert mask.sum() == held
    # every held-out combination meets every condition at once; each condition alone leaves some in training
    conditions = MONTERO[dataset][split]
    for name, classes in conditions.items():
        column = table[:, names.index(name)]
        assert np.isin(column[mask], classes).all()
        assert (np.isin(column, classes) & ~mask).any()


def test_montero_raw_value_thresholds_map_to_these_classes():
    """Their filters on raw values, recomputed from each grid's values: the class sets above are what they select."""
    scale = np.round(np.arange(0.5, 1.01, 0.1), 6)
    assert np.nonzero(scale > 0.6)[0].tolist() == MONTERO["dsprites"]["recombination_to_element"]["scale"]
    orientation = np.linspace(0, 2 * np.pi, 40)
    inside = np.nonzero((orientation > 2 * np.pi / 3 + 1e-9) & (orientation < 4 * np.pi / 3 - 1e-9))[0].tolist()
    assert inside == MONTERO["dsprites"]["recombination_to_element"]["orientation"]
    position = np.arange(32) / 31
    assert np.nonzero(position > 0.66)[0].tolist() == MONTERO["dsprites"]["recombination_to_element"]["pos_x"]
    assert np.nonzero(position > 0.5)[0].tolist() == MONTERO["dsprites"]["recombination_to_range"]["pos_x"]
    s3 = MONTERO["shapes3d"]["recombination_to_element"]
    assert np.nonzero(np.linspace(0.75, 1.25, 8) >= 1.1)[0].tolist() == s3["scale"]
    assert np.nonzero(np.linspace(-30, 30, 15) > 20)[0].tolist() == s3["orientation"]
    assert np.nonzero(np.round(np.arange(10) / 10, 6) >= 0.8)[0].tolist() == s3["object_hue"] == s3["wall_hue"]
    assert np.nonzero(np.round(np.arange(10) / 10, 6) >= 0.5)[0].tolist() == \
        MONTERO["shapes3d"]["recombination_to_range"]["object_hue"]


@pytest.mark.parametrize("overrides, message", [
    (["data=shapes2d", "data.split=recombination_to_element"], "defined for ['dsprites', 'mpi3d', 'shapes3d']"),
    (["data=mpi3d", "data.variant=complex", "data.split=recombination_to_element"], "classes in this variant"),
])
def test_a_recombination_split_off_their_datasets_is_one_line_before_the_imports(overrides, message):
    from disentangle.runtime.preflight import check_training_config

    cfg = compose_config(["model=ae", *overrides])
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        check_training_config(cfg)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    (["data=shapes2d", "data.correlation=[{factors: [floor_hue, colour], sigma: 0.1}]"],
     "data.correlation[0].factors must be two different factors of ['floor_hue'"),
    (["data=shapes3d", "data.correlation=[{factors: [floor_hue, wall_hue], sigma: -1}]"],
     "data.correlation[0].sigma must be > 0"),
    (["data=causalchamber", "data.split=composition", "data.split_ratio=0.15"], "trains on nothing"),
    (["data=shapes2d", "data.split=extrapolation", "data.split_keep=[hue]"], "data.split_keep names ['hue']"),
])
def test_a_bad_correlation_or_split_is_one_line_before_the_imports(overrides, message):
    from disentangle.runtime.preflight import check_training_config

    cfg = compose_config(["model=ae", *overrides])
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        check_training_config(cfg)
    assert "\n" not in str(info.value)


# -- scores out of distribution ------------------------------------------------------------------------------------
def test_a_split_run_scores_its_held_out_set_and_a_random_run_has_none(tmp_path):
    from disentangle.callbacks.gather import heldout_subset

    overrides = [*FAST, "data=shapes2d", "data.split=extrapolation", "callbacks.evaluation.metrics=[infomec,dci]",
                 "callbacks.evaluation.save_latents=true", FIGURES]
    cfg = compose_config(overrides, output_dir=tmp_path / "split")
    train(cfg)
    record = json.loads((tmp_path / "split" / "metrics.json").read_text())
    ood = record["ood"]
    dm = instantiate(cfg.data)
    mask = dm.heldout_mask()
    arrays = np.load(tmp_path / "split" / "latents.npz")
    index = torch.as_tensor(arrays["ood_dataset_index"])
    # every scored image is a held-out combination, drawn by the evaluation seed: the same set on every evaluation
    assert mask[index].all() and len(index) == ood["n_samples"] == 256 and ood["n_heldout"] == int(mask.sum())
    assert torch.equal(index, heldout_subset(mask, 256, dm.eval_seed))
    assert ood["indices_sha256"] == hashlib.sha256(index.numpy().astype(np.int64).tobytes()).hexdigest()
    # the readout is fitted on the evaluation rows training could draw, and scored in and out
    assert ood["n_inside"] == int((~mask[dm.eval_indices()[:256]]).sum())
    for kind in ("linear", "mlp"):
        sides = ood["readout"][kind]
        assert len(sides["out"]["per_factor"]) == len(dm.factor_sizes)
        assert sides["out"]["mean"] == ood[f"r2_{kind}"] and sides["in"]["mean"] == record[f"r2_{kind}"]
    assert {"infom", "dci_d", "psnr", "mse"} <= set(ood) and ood["psnr"] > 0
    assert (tmp_path / "split" / "reconstructions_heldout.png").is_file()
    train(compose_config([*FAST, "data=shapes2d", "callbacks.evaluation.metrics=[infomec]"],
                         output_dir=tmp_path / "random"))
    plain = json.loads((tmp_path / "random" / "metrics.json").read_text())
    assert "ood" not in plain and "r2_linear" not in plain


def test_the_readouts_read_a_faithful_representation_in_and_out_of_distribution():
    from disentangle.metrics.ood import readout_scores

    sizes = (6, 5, 1)  # the last factor is constant: nothing to read out
    table = _grid(sizes)
    held = (table[:, 0] >= 4) & (table[:, 1] >= 3)  # a corner, as the composition split holds out
    latents = np.c_[table[:, :2] / np.array([5.0, 4.0]), np.random.default_rng(0).normal(size=len(table))]
    got = readout_scores(latents[~held], table[~held], latents[held], table[held], sizes, kinds=("linear",))
    for side in ("in", "out"):
        r2 = got["linear"][side]["per_factor"]
        assert r2[0] == pytest.approx(1.0) and r2[1] == pytest.approx(1.0) and r2[2] is None
        assert got["linear"][side]["mean"] == pytest.approx(1.0)
    # a representation that drops a factor cannot read it out anywhere
    blind = readout_scores(latents[~held][:, 1:], table[~held], latents[held][:, 1:], table[held], sizes,
                           kinds=("linear",))
    assert blind["linear"]["out"]["per_factor"][0] < 0.1 and blind["linear"]["out"]["per_factor"][1] > 0.99
    with pytest.raises(ValueError, match="at least 10 in-distribution"):
        readout_scores(latents[:5], table[:5], latents[held], table[held], sizes)


# -- the quickstart under every setting, on every factor-indexed dataset ---------------------------------------------
# every dataset with discrete factors: the real ones from official-format fixtures (tests/raw_fixtures.py), reduced
# grids; Montero et al.'s splits need their published grids (they refuse others), so they are checked on those grids
# above and not here
FACTOR_INDEXED = [name for name in DATASETS if name not in ("balls", "cliff2d")]
FIXTURE_SOURCE = {"colour_dsprites": "dsprites", "mpi3d_toy": "mpi3d"}
SETTINGS = ("composition", "interpolation", "extrapolation", "correlation")
# fixture grids with one factor long enough for composition to train on something at the dataset's split_ratio
# (Schott et al.'s cut floor(n q) drops every shorter factor) and at least 48 images
FIXTURE_GRIDS = {
    "shapes3d": {"sizes": (2, 2, 2, 2, 2, 10)}, "dsprites": {"sizes": (1, 2, 2, 3, 2, 10)},
    "colour_dsprites": {"sizes": (1, 2, 2, 3, 2, 10)}, "mpi3d": {"sizes": (2, 2, 1, 2, 1, 3, 8)},
    "mpi3d_toy": {"variant": "toy", "sizes": (3, 2, 1, 1, 1, 4, 8)}, "falcor3d": {"sizes": (2, 2, 1, 1, 2, 2, 6)},
    "isaac3d": {"sizes": (2, 2, 1, 1, 1, 1, 2, 1, 6)}, "cars3d": {"grid_shape": (2, 10)},
    "smallnorb": {"sizes": (2, 1, 4, 2)}, "causalchamber_photos": {"sizes": (2, 2, 2, 2, 7)},
}


def _quickstart(name: str, root) -> list[str]:
    overrides = ["experiment=quickstart", f"data={name}", *FAST, "trainer.max_steps=2",
                 "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.every_n_steps=0",
                 "callbacks.evaluation.n_samples=48", "data.eval_size=48", "model.batch_size=4"]
    source = FIXTURE_SOURCE.get(name, name)
    if source in raw_fixtures.WRITERS:
        _, truth = raw_fixtures.WRITERS[source](root, **FIXTURE_GRIDS[name])
        overrides += [f"paths.data_root={root}", f"data.factor_sizes={[int(s) for s in truth.max(0) + 1]}"]
    return overrides


@pytest.mark.parametrize("name", FACTOR_INDEXED)
def test_the_quickstart_runs_with_each_split_and_a_correlated_pair(name, tmp_path):
    overrides = _quickstart(name, tmp_path / "data")
    dm = instantiate(compose_config(overrides).data)
    varying = [n for n, size in zip(dm.factor_names, dm.factor_sizes) if size > 1 and n not in dm.split_keep]
    for setting in SETTINGS:
        extra = ([f"data.correlation=[{{factors: [{varying[0]}, {varying[1]}], sigma: 0.1}}]"]
                 if setting == "correlation" else [f"data.split={setting}"])
        out = tmp_path / setting
        train(compose_config([*overrides, *extra], output_dir=out))
        record = json.loads((out / "metrics.json").read_text())
        assert record["data"] == name and math.isfinite(record["infom"]), setting
        assert ("ood" in record) == (setting != "correlation"), setting


@pytest.mark.parametrize("name", FACTOR_INDEXED)
def test_every_split_trains_on_something_and_holds_something_out_at_the_defaults(name):
    """On each dataset's full grid, with its configured split_ratio and split_keep: Schott et al.'s composition cut
    drops factors shorter than 1/q, so a ratio too large for a grid of short factors trains on nothing."""
    data = compose_config([f"data={name}"]).data
    sizes, names = list(data.factor_sizes), list(data.factor_names)
    table = _grid(sizes)
    for split in ("composition", "interpolation", "extrapolation"):
        held = heldout_mask(table, sizes, names, split, data.split_ratio, tuple(data.split_keep or ()), dataset=name)
        assert 0.1 < held.mean() < 0.9, (split, held.mean())
