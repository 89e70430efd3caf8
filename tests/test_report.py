"""`python -m disentangle.report`: statistics against hand-computed values, grouping, the papers' selection rules,
the comparison with published numbers, bad inputs, W&B grouping/tagging, and a real short sweep end to end."""
import csv
import io
import json
import math
import os
import sys
import types
from pathlib import Path

import pytest
import yaml
from conftest import FAST, run_cli

from disentangle.report import main as report_main
from disentangle.reporting import aggregate, read_runs, select_best, summarize
from disentangle.reporting.compare import (
    Published,
    compare_value,
    load_rows,
    method_names,
    normalize,
    read_published_csv,
)
from disentangle.reporting.rules import TRIPOD_PSNR, PsnrFilter
from disentangle.reporting.tables import LABELS

STATS = ("mean", "ci95", "median", "q25", "q75", "se")


# -- statistics, by hand -------------------------------------------------------------------------------------------
def test_statistics_match_hand_computed_values():
    # n=2, [1, 3]: mean 2, sd = sqrt(((1-2)^2 + (3-2)^2) / 1) = sqrt(2), se = sqrt(2)/sqrt(2) = 1,
    # t(0.975, df=1) = 12.7062 -> half-width 12.7062; numpy percentiles (linear): q25 = 1 + 0.25*2 = 1.5, q75 = 2.5
    s = summarize([1.0, 3.0])
    assert (s.n, s.mean, s.median, s.q25, s.q75) == (2, 2.0, 2.0, 1.5, 2.5)
    assert s.se == pytest.approx(1.0) and s.ci95 == pytest.approx(12.7062, abs=1e-4)
    # n=3, [6, 1, 2]: mean 3, squares 9 + 4 + 1 = 14, sd = sqrt(14/2) = sqrt(7) = 2.64575, se = sqrt(7/3) = 1.52753,
    # t(0.975, 2) = 4.30265 -> 6.57232; sorted [1, 2, 6]: median 2, q25 at position 0.5 -> 1.5, q75 at 1.5 -> 4
    s = summarize([6.0, 1.0, 2.0])
    assert (s.mean, s.median, s.q25, s.q75) == (3.0, 2.0, 1.5, 4.0)
    assert s.sd == pytest.approx(2.64575, abs=1e-5) and s.se == pytest.approx(1.52753, abs=1e-5)
    assert s.ci95 == pytest.approx(6.57232, abs=1e-4)
    # n=7, 1..7 shuffled: mean 4, squares 9+4+1+0+1+4+9 = 28, sd = sqrt(28/6) = 2.16025, se = 2.16025/sqrt(7) = 0.81650,
    # t(0.975, 6) = 2.44691 -> 1.99790; median 4, q25 at position 1.5 -> 2.5, q75 at 4.5 -> 5.5
    s = summarize([7, 1, 4, 2, 6, 3, 5])
    assert (s.n, s.mean, s.median, s.q25, s.q75) == (7, 4.0, 4.0, 2.5, 5.5)
    assert s.se == pytest.approx(0.81650, abs=1e-5) and s.ci95 == pytest.approx(1.99790, abs=1e-4)
    # the QLAE authors' script: sd with ddof=0 = sqrt(28/7) = 2, se = 2/sqrt(7) = 0.75593, x 2.44691 = 1.84970
    s0 = summarize([7, 1, 4, 2, 6, 3, 5], ddof=0)
    assert s0.se == pytest.approx(0.75593, abs=1e-5) and s0.ci95 == pytest.approx(1.84970, abs=1e-4)
    # one run: a centre, no spread
    s1 = summarize([0.5])
    assert s1.mean == s1.median == s1.q25 == s1.q75 == 0.5 and math.isnan(s1.ci95) and math.isnan(s1.se)
    assert s1.interval("ci95") == (0.5, 0.5) and s.interval("quartiles") == (2.5, 5.5)
    assert s.interval("se") == pytest.approx((4 - 0.81650, 4 + 0.81650), abs=1e-5)


def test_metric_labels_agree_with_the_metric_suite():
    from disentangle.metrics.suite import SCALAR_LABELS

    assert {k: LABELS[k] for k in SCALAR_LABELS} == SCALAR_LABELS


def test_held_out_scores_sit_beside_their_in_distribution_columns(tmp_path, capsys):
    # a data.split run's metrics.json: in-distribution scalars at the top, the held-out ones in its ood section
    for seed, (psnr, out_psnr) in enumerate(((30.0, 24.0), (32.0, 25.0))):
        fake_run(tmp_path, f"{seed}_qlae", "qlae", seed=seed, metrics={
            "infom": 0.6, "psnr": psnr, "r2_linear": 0.9,
            "ood": {"split": "composition", "n_samples": 256, "n_heldout": 1000, "infom": 0.4, "psnr": out_psnr,
                    "r2_linear": 0.2, "readout": {"linear": {"in": {"mean": 0.9}, "out": {"mean": 0.2}}}}})
    runs = read_runs([tmp_path]).runs
    assert runs[0].metrics == {"infom": 0.6, "psnr": 30.0, "r2_linear": 0.9, "ood_infom": 0.4, "ood_psnr": 24.0,
                               "ood_r2_linear": 0.2}
    rc, out, _ = run_report([tmp_path, "--no-figure"], capsys)
    head = next(line for line in out.splitlines() if "InfoM" in line)
    cells = [c.strip() for c in head.strip("|").split("|")]
    for name in ("InfoM", "PSNR (dB)", "R² lin"):
        at = next(i for i, c in enumerate(cells) if c.startswith(name) and "(out)" not in c)
        assert cells[at + 1].startswith(f"{name} (out)"), cells
    assert rc == 0 and "24.50" in out and "30.0" not in head


# -- fake run directories ------------------------------------------------------------------------------------------
def fake_run(root, name, model, data="shapes3d", seed=0, metrics=None, params=None, overrides=(), config=None):
    """A run directory as disentangle.train writes it: .hydra/config.yaml (with interpolations) and metrics.json."""
    d = Path(root) / name
    (d / ".hydra").mkdir(parents=True)
    cfg = config if config is not None else {
        "seed": seed,
        "paths": {"output_dir": "${hydra:runtime.output_dir}"},
        "data": {"name": data, "seed": "${seed}", "batch_size": "${model.batch_size}"},
        "model": {"name": model, "batch_size": 64, "optimizer": {"lr": 0.001, "weight_decay": 0.1}},
        "trainer": {"max_steps": 100, "default_root_dir": "${paths.output_dir}"},
    }
    for key, value in (params or {}).items():
        node = cfg
        *path, last = key.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = value
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"model={model}", f"seed={seed}", *overrides]))
    if metrics is not None:
        (d / "metrics.json").write_text(json.dumps({**metrics, "method": model, "data": data, "step": 100,
                                                    "nmi": [[0.1, 0.2]], "discrete_latents": True}))
    return d


def run_report(argv, capsys):
    rc = report_main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- grouping ------------------------------------------------------------------------------------------------------
def test_grouping_separates_hyperparameters_and_merges_seeds(tmp_path):
    j = 0
    for lr, base in ((0.001, 0.5), (0.01, 0.8)):
        for seed in (0, 1):
            fake_run(tmp_path, f"{j}_qlae", "qlae", seed=seed, params={"model.optimizer.lr": lr},
                     metrics={"infom": base + 0.1 * seed}, overrides=[f"model.optimizer.lr={lr}"])
            j += 1
    for seed in (0, 1, 2):
        fake_run(tmp_path, f"{j}_ae", "ae", seed=seed, metrics={"infom": 0.3})
        j += 1
    agg = aggregate(read_runs([tmp_path]).runs)
    # seeds merge; the learning rate separates; data.seed (= ${seed}) and the output paths are not hyperparameters
    assert [p.key for p in agg.params] == ["model.optimizer.lr"]
    got = {(g.model, g.params["model.optimizer.lr"]): (g.n, g.stats["infom"].mean) for g in agg.groups}
    assert got == {("qlae", 0.001): (2, pytest.approx(0.55)), ("qlae", 0.01): (2, pytest.approx(0.85)),
                   ("ae", 0.001): (3, pytest.approx(0.3))}
    pooled = aggregate(read_runs([tmp_path]).runs, pool=["lr"])  # Friede et al.: pool a hyperparameter with seeds
    assert [(g.model, g.n) for g in pooled.groups] == [("qlae", 4), ("ae", 3)] and not pooled.params
    assert pooled.groups[0].stats["infom"].median == pytest.approx(0.7)  # median of 0.5, 0.6, 0.8, 0.9


def test_a_group_choice_is_one_column_not_every_key_it_changes(tmp_path):
    for j, (arch, width) in enumerate((("small", 8), ("small", 8), ("qlae", 32), ("qlae", 32))):
        fake_run(tmp_path, f"{j}_ae", "ae", seed=j % 2, metrics={"infom": 0.1 * j},
                 params={"model.arch.encoder._target_": f"{arch}.Encoder", "model.arch.encoder.width": width,
                         "model.arch.decoder.width": width}, overrides=[f"model/arch={arch}"])
    agg = aggregate(read_runs([tmp_path]).runs)
    assert [p.key for p in agg.params] == ["model/arch"]
    assert sorted((g.params["model/arch"], g.n) for g in agg.groups) == [("qlae", 2), ("small", 2)]


# -- selection -----------------------------------------------------------------------------------------------------
def _selection_runs(root):
    # (weight decay, InfoM, PSNR): the best InfoM reconstructs badly
    for j, (wd, infom, psnr) in enumerate(((0.1, 0.9, 25.0), (0.01, 0.7, 35.0), (0.001, 0.5, 36.0))):
        for seed in (0, 1):
            fake_run(root, f"{j}{seed}_qlae", "qlae", seed=seed, params={"model.optimizer.weight_decay": wd},
                     metrics={"infom": infom + 0.01 * seed, "psnr": psnr + seed}, overrides=[f"model.optimizer.weight_decay={wd}"])
    for seed in (0, 1):
        fake_run(root, f"9{seed}_ae", "ae", seed=seed, metrics={"infom": 0.3, "psnr": 37.0})
    return aggregate(read_runs([root]).runs)


def test_selection_takes_the_best_infom_configuration_that_passes_the_psnr_filter(tmp_path):
    agg = _selection_runs(tmp_path)
    wd = "model.optimizer.weight_decay"
    chosen, notes = select_best(agg, "infom")
    assert {g.model: g.params[wd] for g in chosen} == {"qlae": 0.1, "ae": 0.1}
    chosen, notes = select_best(agg, "infom", PsnrFilter.parse("30"))
    assert {g.model: g.params[wd] for g in chosen} == {"qlae": 0.01, "ae": 0.1}
    assert any("weight_decay=0.1 25.5 dB" in n for n in notes), notes
    # QLAE's reading: at most 1 dB below the AE's mean PSNR (37.0) -> 36.0: wd=0.01 (35.5) fails, 0.001 (36.5) passes
    chosen, _ = select_best(agg, "infom", PsnrFilter.parse("ae-1"))
    assert {g.model: g.params[wd] for g in chosen}["qlae"] == 0.001
    # a threshold nothing reaches leaves the model out, with a line saying so
    chosen, notes = select_best(agg, "infom", PsnrFilter.parse("shapes3d=40"))
    assert chosen == [] and sum("left out of the selection" in n for n in notes) == 2
    assert PsnrFilter.parse("tripod").per_data == TRIPOD_PSNR == {"shapes3d": 38, "mpi3d": 42, "falcor3d": 34,
                                                                  "isaac3d": 40}
    with pytest.raises(ValueError, match="--psnr-min"):
        PsnrFilter.parse("shapes3d=lots")


def test_selection_from_the_command_line_and_best_seed_ranking(tmp_path, capsys):
    _selection_runs(tmp_path)
    rc, out, _ = run_report([tmp_path, "--select", "infom", "--psnr-min", "30", "--format", "csv", "--no-figure"],
                            capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [(r["model"], r["model.optimizer.weight_decay"]) for r in rows] == [("qlae", "0.01"), ("ae", "0.1")]
    agg = aggregate(read_runs([tmp_path]).runs)
    chosen, _ = select_best(agg, "psnr", by="best-seed")
    assert {g.model: g.params["model.optimizer.weight_decay"] for g in chosen}["qlae"] == 0.001


# -- comparison with the published numbers -----------------------------------------------------------------------
PUBLISHED = """paper,table,method,dataset,metric,value,uncertainty,low,high,n_seeds,note
qlae,12,QLAE (ours),shapes3d,infom,0.95,ci95,0.93,0.97,7,
qlae,12,QLAE (ours),shapes3d,infoe,0.99,ci95,0.98,1.00,7,
qlae,12,β-VAE,shapes3d,infom,0.59,ci95,0.57,0.61,7,
tripod,1,QLAE,shapes3d,infom,0.86,none,,,3,
friede,1,Selection,shapes3d,mig,0.401,none,,,,
friede,5,F-DVAE,shapes3d,mig,0.424,quartiles,0.348,0.483,300,
"""


def test_comparison_flags_inside_and_outside_the_published_interval(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text(PUBLISHED)
    rows = read_published_csv(path)
    assert rows[0]["low"] == 0.93 and rows[3]["low"] is None and rows[0]["n_seeds"] == 7
    pub = Published(rows)
    inside = compare_value(summarize([0.94, 0.96, 0.97]), rows[0], "ci95")  # mean 0.9567 in [0.93, 0.97]
    assert inside.inside is True and inside.basis == "published" and inside.diff == pytest.approx(0.00667, abs=1e-4)
    outside = compare_value(summarize([0.90, 0.91]), rows[1], "ci95")   # 0.905 not in [0.98, 1.00]
    assert outside.inside is False and outside.flag() == "out"
    # no published interval (Tripod): is the paper's value inside ours? mean 0.85 ± t(1)*0.01 contains 0.86
    ours = compare_value(summarize([0.84, 0.86]), rows[3], "ci95")
    assert ours.basis == "ours" and ours.inside is True and ours.flag() == "in (ours)"
    # medians against published quartiles (Friede Table 5)
    assert compare_value(summarize([0.30, 0.40, 0.50]), rows[5], "quartiles").inside is True
    assert compare_value(summarize([0.30, 0.31, 0.32]), rows[5], "quartiles").inside is False
    # project model names find the printed ones
    assert pub.lookup("qlae", "shapes3d", "infom")["value"] == 0.95           # "QLAE (ours)"
    assert pub.lookup("betavae", "shapes3d", "infom")["value"] == 0.59        # "β-VAE"
    assert pub.lookup("factordvae_friede", "shapes3d", "mig")["value"] == 0.424  # "F-DVAE"
    assert pub.lookup("selection:dvae_friede", "shapes3d", "mig")["value"] == 0.401
    assert pub.lookup("tripod", "shapes3d", "infom") is None
    codebook = {"model.latent.codebook_size": 64, "model.latent.code_dim": 8}  # FactorQVAE Table 2 names its rows
    assert method_names("factorqvae", codebook)[:2] == ("FactorVQVAE (M = 64x8)", "FactorQVAE")
    assert normalize("beta-VAE") == normalize("β-VAE") and normalize("Tripod (ours)") == normalize("Tripod")


def test_compare_paper_uses_the_package_data(tmp_path, monkeypatch):
    (tmp_path / "published.csv").write_text(PUBLISHED)
    every = read_published_csv(tmp_path / "published.csv")
    calls = []

    def load_published(paper=None, table=None):  # disentangle.published's loader, on the fixture's rows
        calls.append((paper, table))
        return [r for r in every if paper in (None, r["paper"]) and table in (None, r["table"])]

    monkeypatch.setitem(sys.modules, "disentangle.published", types.SimpleNamespace(load_published=load_published))
    assert [r["value"] for r in load_rows([("qlae", "12")])] == [0.95, 0.99, 0.59] and calls == [("qlae", "12")]
    with pytest.raises(ValueError, match="no published numbers for qlae:99; tables of qlae: qlae:12"):
        load_rows([("qlae", "99")])


def test_every_model_name_finds_its_row_in_the_package_data(tmp_path, capsys):
    from disentangle.published import load_published
    from disentangle.reporting.compare import METHOD_NAMES

    printed = {normalize(r["method"]) for r in load_published()}
    unmatched = [m for m in METHOD_NAMES if not any(normalize(n) in printed for n in method_names(m))]
    assert unmatched == ["vae_friede"]  # Friede et al. print no number for the Gaussian VAE (spec §18.16)
    fake_run(tmp_path, "0_qlae", "qlae", metrics={"infom": 0.9, "psnr": 33.0})
    rc, out, _ = run_report([tmp_path, "--compare-paper", "qlae:12", "--no-figure"], capsys)
    assert rc == 0 and "0.90 (paper 0.95 ± 0.02; Δ −0.05, out)" in out and "33.0 (paper 32.9 ± 0.2; Δ +0.1, in)" in out


def test_report_puts_the_published_value_next_to_each_cell(tmp_path, capsys):
    (tmp_path / "published.csv").write_text(PUBLISHED)
    runs = tmp_path / "runs"
    for seed, (infom, infoe) in enumerate(((0.94, 0.90), (0.97, 0.92))):
        fake_run(runs, f"{seed}_qlae", "qlae", seed=seed, metrics={"infom": infom, "infoe": infoe})
    common = [runs, "--compare-paper", "qlae:12", "--published", tmp_path / "published.csv", "--no-figure"]
    rc, out, _ = run_report(common, capsys)
    assert rc == 0
    assert "0.95 ± 0.19 (paper 0.95 ± 0.02; Δ +0.01, in)" in out        # mean 0.955, t(1)*0.015 = 0.19
    assert "0.91 ± 0.13 (paper 0.99 ± 0.01; Δ −0.08, out)" in out        # t(1)*0.01 = 0.127
    rc, out, _ = run_report([*common, "--format", "csv"], capsys)
    row = next(csv.DictReader(io.StringIO(out)))
    assert (float(row["infom_paper"]), row["infom_inside"], row["infoe_inside"]) == (0.95, "1", "0")
    assert float(row["infoe_diff"]) == pytest.approx(0.91 - 0.99)
    rc, _, err = run_report([runs, "--compare-paper", "nopaper:1", "--published", tmp_path / "published.csv"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "unknown paper 'nopaper'" in err


def test_delta_st_selection_adds_the_smallest_gap_run_per_dataset(tmp_path, capsys):
    for j, (gap, mig) in enumerate(((0.5, 0.2), (0.01, 0.35), (0.2, 0.3))):
        fake_run(tmp_path, f"{j}_dvae", "dvae_friede", seed=j, metrics={"mig": mig, "delta_st": gap})
    (tmp_path / "published.csv").write_text(PUBLISHED)
    rc, out, _ = run_report([tmp_path, "--select", "delta_st", "--stat", "quartiles", "--format", "csv",
                             "--compare-paper", "friede:1", "--published", tmp_path / "published.csv",
                             "--metrics", "mig", "--no-figure"], capsys)
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(out))}
    assert rc == 0 and set(rows) == {"dvae_friede", "selection:dvae_friede"}
    sel = rows["selection:dvae_friede"]
    assert (sel["n"], float(sel["mig_median"]), float(sel["mig_paper"])) == ("1", 0.35, 0.401)
    assert float(rows["dvae_friede"]["mig_median"]) == pytest.approx(0.3)
    no_gap = tmp_path / "no_gap"
    fake_run(no_gap, "0_ae", "ae", metrics={"infom": 0.1})
    rc, _, err = run_report([no_gap, "--select", "delta_st"], capsys)
    assert rc == 2 and "python -m disentangle.select" in err and err.count("\n") == 1


# -- the "aggregated" column: the mean over datasets --------------------------------------------------------------
AGGREGATED_PUBLISHED = """paper,table,method,dataset,metric,value,uncertainty,low,high,n_seeds,note
qlae,1,QLAE (ours),aggregated,infom,0.76,none,,,7,mean over the 4 datasets x 7 seeds
qlae,1,AE,aggregated,infom,0.40,none,,,7,mean over the 4 datasets x 7 seeds
qlae,1,QLAE (ours),shapes3d,infom,0.95,none,,,7,
"""


def _two_datasets(root):
    # per dataset 3 seeds; qlae and ae on both datasets, betavae only on shapes3d; ae has PSNR only on shapes3d
    values = {("qlae", "shapes3d"): (0.90, 0.95, 1.00), ("qlae", "mpi3d"): (0.51, 0.61, 0.71),
              ("ae", "shapes3d"): (0.30, 0.30, 0.30), ("ae", "mpi3d"): (0.20, 0.20, 0.20),
              ("betavae", "shapes3d"): (0.5, 0.6, 0.7)}
    for j, ((model, data), infoms) in enumerate(values.items()):
        for seed, infom in enumerate(infoms):
            extra = {"psnr": 30.0 + seed} if (model, data) != ("ae", "mpi3d") else {}
            fake_run(root, f"{j}{seed}_{model}_{data}", model, data=data, seed=seed,
                     metrics={"infom": infom, **extra})


def test_aggregated_rows_are_the_mean_over_datasets_of_the_per_dataset_means(tmp_path, capsys):
    runs = tmp_path / "runs"
    _two_datasets(runs)
    (tmp_path / "published.csv").write_text(AGGREGATED_PUBLISHED)
    rc, out, err = run_report([runs, "--format", "csv", "--no-figure", "--compare-paper", "qlae:1",
                               "--published", tmp_path / "published.csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [(r["model"], r["data"]) for r in rows] == [
        ("qlae", "shapes3d"), ("ae", "shapes3d"), ("betavae", "shapes3d"), ("qlae", "mpi3d"), ("ae", "mpi3d"),
        ("qlae", "aggregated"), ("ae", "aggregated")]
    qlae = rows[-2]
    # shapes3d 0.90/0.95/1.00: mean 0.95, sd 0.05, se 0.05/sqrt(3) = 0.0288675, t(0.975, 2) = 4.30265 -> 0.124207,
    # median 0.95, q25 0.925, q75 0.975; mpi3d 0.51/0.61/0.71: mean 0.61, sd 0.1, se 0.0577350, half-width 0.248414,
    # q25 0.56, q75 0.66. Aggregated: mean (0.95 + 0.61)/2 = 0.78; se sqrt(0.0288675^2 + 0.0577350^2)/2 = 0.0322749;
    # half-width sqrt(0.124207^2 + 0.248414^2)/2 = 0.138866; median 0.78, q25 (0.925 + 0.56)/2 = 0.7425, q75 0.8175
    expected = {"mean": 0.78, "se": 0.0322749, "ci95": 0.138866, "median": 0.78, "q25": 0.7425, "q75": 0.8175}
    assert {k: float(qlae[f"infom_{k}"]) for k in expected} == pytest.approx(expected, abs=1e-5)
    assert qlae["n"] == "6" and float(qlae["infom_paper"]) == 0.76 and qlae["infom_inside"] == "1"  # 0.76 in ours
    assert float(qlae["infom_diff"]) == pytest.approx(0.02)
    # psnr 30/31/32 on both datasets: mean 31, half-width sqrt(2) * 4.30265 * 1/sqrt(3) / 2 = 1.75655
    assert (float(qlae["psnr_mean"]), float(qlae["psnr_ci95"])) == (31.0, pytest.approx(1.75655, abs=1e-5))
    ae = rows[-1]  # no spread on either dataset: 0.25 ± 0; PSNR only on shapes3d: not aggregated
    assert (float(ae["infom_mean"]), float(ae["infom_ci95"]), ae["psnr_mean"], ae["infom_paper"]) == (
        pytest.approx(0.25), pytest.approx(0.0, abs=1e-12), "", "0.4")
    assert "note: betavae left out of the aggregated rows: not on mpi3d (only on shapes3d)" in err
    assert "note: ae: psnr not aggregated (not measured on mpi3d)" in err
    assert "the published aggregated values are means over shapes3d, mpi3d, falcor3d, isaac3d; these rows are " \
           "over shapes3d, mpi3d" in err
    # the per-dataset rows are what they were
    assert float(rows[0]["infom_mean"]) == pytest.approx(0.95) and float(rows[0]["infom_paper"]) == 0.95

    rc, md, _ = run_report([runs, "--compare-paper", "qlae:1", "--published", tmp_path / "published.csv"], capsys)
    section = md.split("## aggregated", 1)[1]
    assert rc == 0 and "15 runs in 5 groups" in md and "over 2 datasets (shapes3d, mpi3d)" in section
    assert "| qlae | 6 | **0.78 ± 0.14** (paper 0.76; Δ +0.02, in (ours)) | 31.0 ± 1.8 |" in section  # one entry: no bold
    assert "| ae | 6 | 0.25 ± 0.00 (paper 0.40; Δ −0.15, out (ours)) | – |" in section
    assert "- note: betavae left out" in section
    assert (runs / "report.png").read_bytes()[:4] == b"\x89PNG"
    rc, tex, _ = run_report([runs, "--format", "latex", "--no-figure"], capsys)
    assert rc == 0 and tex.count(r"\begin{table}") == 3 and r"\caption{aggregated over 2 datasets" in tex
    # opt out: the report of before, no aggregated rows
    rc, out, err = run_report([runs, "--format", "csv", "--no-figure", "--no-aggregate"], capsys)
    assert rc == 0 and len(out.splitlines()) == 6 and "aggregated" not in out + err
    # one dataset: nothing changes
    rc, out, err = run_report([runs / "00_qlae_shapes3d", runs / "20_ae_shapes3d", "--no-figure"], capsys)
    assert rc == 0 and "## aggregated" not in out and "| ae |" in out and err == ""


def test_aggregated_rows_after_a_selection_take_each_datasets_choice(tmp_path):
    from disentangle.reporting import aggregate_across_data

    wd = "model.optimizer.weight_decay"
    # qlae: weight decay 0.1 wins on shapes3d, 0.01 on mpi3d; ae: one configuration per dataset
    for data, best in (("shapes3d", 0.1), ("mpi3d", 0.01)):
        for w in (0.1, 0.01):
            for seed in (0, 1):
                fake_run(tmp_path, f"{data}_{w}_{seed}", "qlae", data=data, seed=seed, params={wd: w},
                         metrics={"infom": (0.8 if w == best else 0.4) + 0.1 * seed})
        fake_run(tmp_path, f"{data}_ae", "ae", data=data, metrics={"infom": 0.3 if data == "mpi3d" else 0.5})
    agg = aggregate(read_runs([tmp_path]).runs)
    # without a selection, each weight decay is its own aggregated row (qlae: 0.85 and 0.45 on both datasets)
    rows, lines = aggregate_across_data(agg.groups)
    assert [(g.model, g.params[wd], g.stats["infom"].mean) for g in rows] == [
        ("qlae", 0.01, pytest.approx(0.65)), ("qlae", 0.1, pytest.approx(0.65)), ("ae", 0.1, pytest.approx(0.4))]
    assert lines == [] and all(g.over == ("mpi3d", "shapes3d") and g.data == "aggregated" for g in rows)
    # after the selection: one row per model, the mean of the chosen configurations (0.85 on both datasets)
    chosen, _ = select_best(agg, "infom")
    rows, _ = aggregate_across_data(chosen)
    (qlae,) = [g for g in rows if g.model == "qlae"]
    assert qlae.stats["infom"].mean == pytest.approx(0.85) and qlae.params[wd] is None and qlae.n == 4
    assert qlae.note == f"per dataset: mpi3d {wd}=0.01; shapes3d {wd}=0.1"  # datasets in the runs' order
    assert qlae.stats["infom"].values == pytest.approx((0.85, 0.85))
    # single-run groups have no interval, so neither has their mean
    (ae,) = [g for g in rows if g.model == "ae"]
    assert ae.stats["infom"].mean == pytest.approx(0.4) and math.isnan(ae.stats["infom"].ci95)


def test_the_package_data_has_the_aggregated_rows_the_report_compares_with():
    pub = Published(load_rows([("qlae", "1"), ("tripod", "1")]))
    assert pub.lookup("qlae", "aggregated", "infom")["value"] == 0.76
    assert pub.lookup("tripod", "aggregated", "infom")["value"] == 0.78


# -- bad input -----------------------------------------------------------------------------------------------------
def test_a_directory_without_runs_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, out, err = run_report([tmp_path / "empty"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "no runs" in err
    rc, _, err = run_report([tmp_path / "missing"], capsys)
    assert rc == 2 and "no such directory" in err and err.count("\n") == 1
    # next to a good directory: the table is still written, the empty one named, exit 2
    fake_run(tmp_path / "good", "0_ae", "ae", metrics={"infom": 0.2})
    rc, out, err = run_report([tmp_path / "good", tmp_path / "empty", "--no-figure"], capsys)
    assert rc == 2 and "| ae |" in out and f"{tmp_path / 'empty'}: no runs" in err


def test_bad_runs_are_listed_and_mixed_metric_sets_warned(tmp_path, capsys):
    fake_run(tmp_path, "0_qlae", "qlae", seed=0, metrics={"infom": 0.6, "mig": 0.2})
    fake_run(tmp_path, "1_qlae", "qlae", seed=1, metrics={"infom": 0.8})
    failed = fake_run(tmp_path, "2_qlae", "qlae", seed=2)  # no metrics.json: failed
    (failed / "train.log").write_text("[2026-01-01][INFO] - step 10\n[2026-01-01][ERROR] - non-finite loss at step 11\n"
                                      "[2026-01-01][INFO] - bye\n")
    anonymous = fake_run(tmp_path, "3_x", "x", metrics={"infom": 0.1},
                         config={"seed": 0, "data": {"name": "shapes3d"}, "model": {"batch_size": 8}})
    rc, out, err = run_report([tmp_path, "--no-figure"], capsys)
    assert rc == 0
    assert "| qlae | 2 | 0.70 ± 1.27 | 0.20 (n=1) |" in out                 # 0.7 ± t(1)*0.1; mig over one run
    warnings = [w for w in err.splitlines() if w.startswith("warning")]
    assert len(warnings) == 1 and "group qlae/shapes3d" in warnings[0] and "metric mig in 1 of 2 runs" in warnings[0]
    left = out.split("## Runs left out", 1)[1]
    assert f"`{failed}`: no metrics.json (the run failed or has not finished); train.log: " \
           "[2026-01-01][ERROR] - non-finite loss at step 11" in left
    assert f"`{anonymous}`: config lacks model.name" in left
    rc, out, err = run_report([tmp_path, "--format", "csv", "--no-figure"], capsys)
    assert f"left out: {failed}: no metrics.json" in err and f"left out: {anonymous}: config lacks" in err
    assert "left out" not in out
    # only bad runs: nothing to aggregate
    rc, out, err = run_report([failed, "--no-figure"], capsys)
    assert rc == 1 and out == "" and "nothing to report" in err and "train.log" in err


def test_bad_options_are_one_line(tmp_path, capsys):
    fake_run(tmp_path, "0_ae", "ae", metrics={"infom": 0.2, "psnr": 30.0})
    for argv, text in (([ "--psnr-min", "shapes3d=x"], "--psnr-min"), (["--select", "nope"], "--select"),
                       (["--metrics", "nope"], "--metrics")):
        rc, out, err = run_report([tmp_path, *argv], capsys)
        assert rc == 2 and out == "" and err.count("\n") == 1 and text in err, (argv, err)


# -- W&B offline runs ------------------------------------------------------------------------------------------------
def wandb_run_info(run_dir, record="wandb_run.json"):
    """What the live W&B run reported through its public attributes (recorded by the project in ``record``), checked
    against the offline run directory wandb wrote (``wandb/offline-run-<time>-<id>/run-<id>.wandb``). No private
    wandb file format is read, so the test holds across wandb releases."""
    info = json.loads((Path(run_dir) / record).read_text())
    runs = list(Path(run_dir).glob("wandb/offline-run-*"))
    assert len(runs) == 1, f"{run_dir}: {runs}"
    assert info["mode"] == "offline" and runs[0].name.endswith(f"-{info['id']}")
    assert (runs[0] / f"run-{info['id']}.wandb").is_file()
    return info


# -- a real sweep, end to end --------------------------------------------------------------------------------------
QUICK = {"trainer.max_steps": "2", "callbacks.evaluation.every_n_steps": "100", "callbacks.evaluation.figures": "false",
         "callbacks.evaluation.background": "false"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """2 models x 2 seeds on shapes2d, a few steps each, logged to W&B offline."""
    out = tmp_path_factory.mktemp("sweep") / "report_sweep"
    fast = [o for o in FAST if o.split("=")[0] not in QUICK] + [f"{k}={v}" for k, v in QUICK.items()]
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(out.parent)}
    res = run_cli("-m", *fast, "data=shapes2d", "model=qlae,ae", "seed=0,1", "logger=wandb",
                  f"hydra.sweep.dir={out}", env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_a_real_sweep_goes_through_the_report_in_every_format(sweep, tmp_path, capsys):
    runs = sorted(p.parent for p in sweep.glob("*/metrics.json"))
    assert len(runs) == 4
    infom = {}
    for r in runs:
        m = json.loads((r / "metrics.json").read_text())
        infom.setdefault(m["method"], []).append(m["infom"])

    rc, md, _ = run_report([sweep, "--out", tmp_path / "table.md"], capsys)
    assert rc == 0 and (tmp_path / "table.md").read_text() == md
    assert "## shapes2d" in md and "| qlae | 2 |" in md and "| ae | 2 |" in md and "Runs left out" not in md
    figure = tmp_path / "table.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"Figure: `{figure}`" in md

    rc, text, _ = run_report([sweep, "--format", "csv", "--no-figure"], capsys)
    rows = list(csv.DictReader(io.StringIO(text)))
    metrics = ["infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr", "mse"]
    assert list(rows[0]) == ["model", "data", "n", *(f"{m}_{s}" for m in metrics for s in STATS)]
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"qlae", "ae"} and all(r["n"] == "2" and r["data"] == "shapes2d" for r in rows)
    for model, values in infom.items():
        s = summarize(values)
        assert float(by_model[model]["infom_mean"]) == pytest.approx(sum(values) / 2)
        assert float(by_model[model]["infom_ci95"]) == pytest.approx(12.7062 * abs(values[0] - values[1]) / 2, rel=1e-4)
        assert float(by_model[model]["infom_q75"]) == pytest.approx(s.q75)

    rc, tex, _ = run_report([sweep, "--format", "latex", "--stat", "quartiles", "--no-figure"], capsys)
    assert rc == 0 and r"\begin{tabular}" in tex and r"\toprule" in tex and "qlae &" in tex and "ae & 2 &" in tex
    assert tex.count(r"\textbf{") >= 8  # every column has a best entry


def test_a_sweep_is_one_wandb_group_with_tagged_runs_and_final_metrics_in_the_summary(sweep):
    infos = {}
    for run_dir in sorted(sweep.glob("*_shapes2d")):
        info = wandb_run_info(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        model, seed = metrics["method"], yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["seed"]
        assert info["group"] == "report_sweep"
        assert {model, "shapes2d", f"seed={seed}", "sweep=report_sweep"} <= set(info["tags"])
        assert info["config"]["model"] == info["config"]["model.name"] == model
        assert info["config"]["sweep"] == "report_sweep" and info["config"]["model.optimizer.lr"] > 0
        assert len(info["config"]["config_key"]) == 12
        assert info["summary"]["infom"] == pytest.approx(metrics["infom"])
        assert info["summary"]["method"] == model
        infos[run_dir.name] = info
    assert len(infos) == 4 and len({i["id"] for i in infos.values()}) == 4  # each job its own W&B run
    keys = {}  # one configuration key per model, shared by its two seeds
    for info in infos.values():
        keys.setdefault(info["config"]["model"], set()).add(info["config"]["config_key"])
    assert all(len(k) == 1 for k in keys.values()) and keys["qlae"] != keys["ae"]


def test_the_report_goes_to_the_sweeps_wandb_group_with_the_paper_and_a_table_per_configuration(
        sweep, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    published = tmp_path / "published.csv"  # a published QLAE value on shapes2d, to be shown beside the runs'
    published.write_text(PUBLISHED.splitlines()[0] + "\nqlae,12,QLAE (ours),shapes2d,infom,0.5,ci95,0.4,0.6,7,\n")
    rc, _, err = run_report([sweep, "--wandb", "--out", tmp_path / "t.md", "--compare-paper", "qlae:12",
                             "--published", published], capsys)
    assert rc == 0, err
    media = tmp_path / "wandb"
    tables = {p.name.split("_")[0]: json.loads(p.read_text())
              for p in media.glob("offline-run-*/files/media/table/*.table.json")}
    assert set(tables) == {"report", "configurations"}
    report = tables["report"]
    assert report["columns"][:3] == ["model", "data", "n"] and len(report["data"]) == 2
    paper = {row[0]: row[report["columns"].index("infom_paper")] for row in report["data"]}
    assert paper == {"qlae": 0.5, "ae": None}  # the paper's value beside its model's row
    configs = tables["configurations"]
    rows = {row[1]: dict(zip(configs["columns"], row)) for row in configs["data"]}
    assert set(rows) == {"qlae", "ae"}
    for model, row in rows.items():
        runs = [json.loads((d / "wandb_run.json").read_text()) for d in sweep.glob(f"*_{model}_shapes2d")]
        assert row["n"] == 2 and row["seeds"] == "0,1" and row["data"] == "shapes2d"
        assert row["config_key"] == runs[0]["config"]["config_key"] == runs[1]["config"]["config_key"]
        assert set(row["wandb_runs"].split(",")) == {r["id"] for r in runs}
        finals = [json.loads((d / "metrics.json").read_text())["infom"] for d in sweep.glob(f"*_{model}_shapes2d")]
        assert row["infom_min"] == pytest.approx(min(finals)) and row["infom_max"] == pytest.approx(max(finals))
    assert (tmp_path / "dashboard.png").read_bytes()[:4] == b"\x89PNG"
    images = {p.name.rsplit("_", 2)[0] for p in media.glob("offline-run-*/files/media/images/*.png")}
    assert {"report_figure", "dashboard"} <= images
    info = wandb_run_info(tmp_path, "report_wandb_run.json")
    assert info["group"] == "report_sweep" and "report" in info["tags"] and info["job_type"] == "report"
    assert info["config"]["published"] is True
    assert os.environ["WANDB_MODE"] == "offline"


def test_the_dashboard_workspace_groups_the_sweeps_runs_by_configuration_and_saving_it_needs_a_key(
        sweep, capsys, monkeypatch):
    from disentangle.reporting.dashboard import WORKSPACE_METRICS, workspace

    spec = json.loads(workspace("disentangle", "report_sweep", entity="me", x_param="model.optimizer.lr")
                      ._to_model().model_dump_json(by_alias=True))
    text = json.dumps(spec)
    assert spec["entity"] == "me" and spec["project"] == "disentangle" and "config_key" in text
    panels = [p["config"] for s in spec["spec"]["section"]["panelBankConfig"]["sections"] for p in s["panels"]]
    lines = [p for p in panels if p.get("xAxis") == "trainer/global_step"]
    assert [p["metrics"] for p in lines] == [[f"eval/{m}"] for m in WORKSPACE_METRICS]
    assert "report_sweep" in text and "model.optimizer.lr" in text  # the runs of the sweep's group; the scatter's x
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(sweep))  # no ~/.netrc
    monkeypatch.delenv("WANDB_MODE", raising=False)
    rc, out, err = run_report([sweep, "--wandb-workspace"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "needs a W&B API key" in err
