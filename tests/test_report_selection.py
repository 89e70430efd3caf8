"""The papers' per-run and per-configuration rules in `python -m disentangle.report`: the evaluation a run
contributes (``--select-checkpoint final|best-infom``, Tripod paper §4), Friede et al.'s held-out-label selection, and
the rule a sweep file carries in its ``# Report:`` header line. Fabricated run directories only, no training."""
import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from test_report import fake_run, run_report

from disentangle.reporting import read_runs
from disentangle.reporting.checkpoints import CheckpointRule, select_evaluation
from disentangle.reporting.sweeps import SWEEP_DIR, merge_rules, parse_rule, read_rule

BEST = ["--select-checkpoint", "best-infom"]


def history_run(root, name, model="tripod", data="shapes3d", seed=0, evaluations=(), final=None, **kwargs):
    """A run whose ``metrics_history.jsonl`` holds ``evaluations`` ((step, metrics) of the periodic ones) and then
    the final one, ``final`` (step 40), which is also its ``metrics.json``."""
    d = fake_run(root, name, model, data=data, seed=seed, metrics=final, **kwargs)
    record = json.loads((d / "metrics.json").read_text())
    record["step"] = 40
    (d / "metrics.json").write_text(json.dumps(record))
    lines = [{"step": step, "final": False, **m, "eval_seconds": 1.5} for step, m in evaluations]
    lines.append({"step": 40, "final": True, **final, "eval_seconds": 2.0})
    (d / "metrics_history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return d


def _tripod_runs(root):
    # seed 0: the best InfoM (0.95) reconstructs below Tripod's 38 dB; of the admissible ones step 30 is the best
    history_run(root, "0_tripod", seed=0, evaluations=[
        (10, {"infom": 0.95, "psnr": 30.0, "dci_d": 0.90}),
        (20, {"infom": 0.80, "psnr": 39.0, "dci_d": 0.70}),
        (30, {"infom": 0.85, "psnr": 38.5, "dci_d": 0.75})],
        final={"infom": 0.70, "psnr": 40.0, "dci_d": 0.60, "mig": 0.1})
    # seed 1: exactly at the threshold counts (PSNR >= 38)
    history_run(root, "1_tripod", seed=1, evaluations=[(10, {"infom": 0.90, "psnr": 38.0, "dci_d": 0.80})],
                final={"infom": 0.60, "psnr": 41.0, "dci_d": 0.50, "mig": 0.3})


def _rows(out):
    return list(csv.DictReader(io.StringIO(out)))


def test_best_infom_takes_the_best_admissible_evaluation_and_all_its_metrics(tmp_path, capsys):
    _tripod_runs(tmp_path)
    rc, out, err = run_report([tmp_path, *BEST, "--psnr-min", "tripod", "--format", "csv", "--no-figure"], capsys)
    (row,) = _rows(out)
    assert rc == 0 and row["n"] == "2"
    # seed 0 step 30 (0.85, 38.5 dB, D 0.75), seed 1 step 10 (0.90, 38.0 dB, D 0.80): every metric of that evaluation
    assert float(row["infom_mean"]) == pytest.approx(0.875) and float(row["dci_d_mean"]) == pytest.approx(0.775)
    assert float(row["psnr_mean"]) == pytest.approx(38.25)
    assert "mig_mean" not in row  # only the final evaluations have MIG, and neither run's was taken
    assert "per run: the evaluation in metrics_history.jsonl with the highest infom among those with PSNR >= " \
           "38 dB (shapes3d); Tripod paper §4" in err
    # the default is the final evaluation (metrics.json), as before
    rc, out, err = run_report([tmp_path, "--format", "csv", "--no-figure"], capsys)
    (row,) = _rows(out)
    assert float(row["infom_mean"]) == pytest.approx(0.65) and float(row["mig_mean"]) == pytest.approx(0.2)
    assert "per run: the final evaluation (metrics.json)" in err
    # markdown: the rule at the top, each run's step under the table
    rc, md, _ = run_report([tmp_path, *BEST, "--psnr-min", "38", "--no-figure"], capsys)
    assert rc == 0 and "- Per run: the evaluation in metrics_history.jsonl with the highest infom" in md
    assert "- tripod: evaluations at step 30 (seed 0), 10 (seed 1)" in md
    # no threshold: the best InfoM of every evaluation (seed 0's 0.95 at 30 dB)
    rc, out, err = run_report([tmp_path, *BEST, "--format", "csv", "--no-figure"], capsys)
    assert float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.925) and "no PSNR threshold" in err


def test_thresholds_are_per_dataset_and_can_follow_the_ae_baseline(tmp_path, capsys):
    # Tripod's thresholds: 38 dB on Shapes3D, 42 dB on MPI3D
    for data in ("shapes3d", "mpi3d"):
        history_run(tmp_path, f"t_{data}", data=data, evaluations=[(10, {"infom": 0.9, "psnr": 40.0})],
                    final={"infom": 0.5, "psnr": 43.0})
    # the AE's final PSNR on shapes3d is 40 dB, so 'ae-1' admits 39 dB and more there
    fake_run(tmp_path, "ae_shapes3d", "ae", metrics={"infom": 0.3, "psnr": 40.0})
    history_run(tmp_path, "q_shapes3d", model="qlae", evaluations=[(10, {"infom": 0.99, "psnr": 38.5}),
                                                                   (20, {"infom": 0.80, "psnr": 39.5})],
                final={"infom": 0.70, "psnr": 41.0})
    rc, out, _ = run_report([tmp_path, *BEST, "--psnr-min", "tripod", "--format", "csv", "--no-figure",
                             "--no-aggregate"], capsys)
    got = {(r["model"], r["data"]): float(r["infom_mean"]) for r in _rows(out)}
    assert rc == 0 and got[("tripod", "shapes3d")] == 0.9 and got[("tripod", "mpi3d")] == 0.5 and got[("qlae", "shapes3d")] == 0.99
    rc, out, err = run_report([tmp_path, *BEST, "--psnr-min", "ae-1", "--format", "csv", "--no-figure",
                               "--no-aggregate"], capsys)
    got = {(r["model"], r["data"]): float(r["infom_mean"]) for r in _rows(out)}
    assert rc == 0 and got[("qlae", "shapes3d")] == 0.80 and got[("ae", "shapes3d")] == 0.3
    assert "no ae run with PSNR on mpi3d" in err and got[("tripod", "mpi3d")] == 0.9  # mpi3d: not filtered


def test_runs_without_history_or_without_an_admissible_evaluation_are_reported(tmp_path, capsys):
    _tripod_runs(tmp_path)
    plain = fake_run(tmp_path, "2_tripod", "tripod", seed=2, metrics={"infom": 0.5, "psnr": 39.0, "dci_d": 0.4})
    blurry = history_run(tmp_path, "3_tripod", seed=3, evaluations=[(20, {"infom": 0.99, "psnr": 37.0})],
                         final={"infom": 0.9, "psnr": 36.0})
    cut = history_run(tmp_path, "4_tripod", seed=4, evaluations=[], final={"infom": 0.4, "psnr": 38.2})
    with (cut / "metrics_history.jsonl").open("a") as f:
        f.write('{"step": 50, "fin')  # a line cut by a kill
    rc, md, err = run_report([tmp_path, *BEST, "--psnr-min", "38", "--no-figure"], capsys)
    assert rc == 0 and "| tripod | 4 |" in md  # seeds 0, 1, 2 (its final evaluation) and 4
    assert f"warning: {plain}: no metrics_history.jsonl; its final evaluation (metrics.json) is the only " \
           "candidate" in err
    assert f"warning: {cut}: 1 unreadable line(s) of metrics_history.jsonl skipped" in err
    left = md.split("## Runs left out", 1)[1]
    assert f"`{blurry}`: --select-checkpoint best-infom: no evaluation reaches PSNR >= 38 dB (the best 37.00 dB at " \
           "step 20; 2 evaluation(s))" in left
    assert "1 run(s) have no admissible evaluation and are left out" in err
    # nothing admissible at all: exit 1 with the reasons
    rc, out, err = run_report([blurry, *BEST, "--psnr-min", "38", "--no-figure"], capsys)
    assert rc == 1 and out == "" and "no run has an admissible evaluation" in err and err.count("\n") == 1


def test_select_evaluation_breaks_ties_late_ranks_lower_is_better_and_needs_the_metric(tmp_path):
    d = history_run(tmp_path, "0_tripod", evaluations=[(10, {"infom": 0.8, "mse": 0.02, "psnr": 39.0}),
                                                       (20, {"infom": 0.8, "mse": 0.01, "psnr": 39.0}),
                                                       (30, {"infom": 0.7, "mse": 0.03, "psnr": 39.0})],
                    final={"infom": 0.6, "mse": 0.04, "psnr": 40.0, "mig": 0.2})
    (run,) = read_runs([d]).runs
    assert run.step == 40 and run.metrics["mig"] == 0.2
    tie, _ = select_evaluation(run, CheckpointRule.parse("best-infom"), 38.0)
    assert (tie.step, tie.metrics["mse"]) == (20, 0.01) and "step 20: infom 0.800" in tie.evaluation
    low, _ = select_evaluation(run, CheckpointRule.parse("best-mse"), None)
    assert low.step == 20
    final, _ = select_evaluation(run, CheckpointRule.parse("best-mig"), 38.0)  # only the final one has MIG
    assert final.step == 40 and final.metrics == run.metrics and "(final)" in final.evaluation
    none, _ = select_evaluation(run, CheckpointRule.parse("best-sap"), None)
    assert none.error == "--select-checkpoint best-sap: no evaluation reports sap (4 evaluation(s))"
    assert select_evaluation(run, CheckpointRule.parse("final"), 99.0)[0] is run
    for bad in ("best", "latest", "best-"):
        with pytest.raises(ValueError, match="--select-checkpoint"):
            CheckpointRule.parse(bad)


def test_bad_checkpoint_rule_is_one_line(tmp_path, capsys):
    fake_run(tmp_path, "0_ae", "ae", metrics={"infom": 0.2})
    rc, out, err = run_report([tmp_path, "--select-checkpoint", "latest"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "best-METRIC" in err


def test_held_out_label_selection_adds_the_best_run_of_each_group(tmp_path, capsys):
    for seed, (label_mig, mig) in enumerate(((0.1, 0.2), (0.3, 0.5), (0.2, 0.4))):
        for weight in (1, 10):
            fake_run(tmp_path, f"{weight}_{seed}_dvae", "dvae_friede", seed=seed,
                     params={"model.regularizers.supervision.weight": weight},
                     metrics={"mig": mig + weight / 100, "label_validation_mig": label_mig + weight / 100})
    common = [tmp_path, "--select", "labels", "--stat", "quartiles", "--format", "csv", "--no-figure"]
    rc, out, err = run_report([*common, "--pool", "weight"], capsys)
    rows = _rows(out)
    assert rc == 0 and [(r["model"], r["n"]) for r in rows] == [("dvae_friede", "6"), ("labels:dvae_friede", "1")]
    assert float(rows[1]["mig_median"]) == pytest.approx(0.6)  # seed 1 at ω = 10: label MIG 0.4, the highest
    assert float(rows[0]["mig_median"]) == pytest.approx(0.455)  # of .21 .30 .41 .50 .51 .60
    rc, out, _ = run_report(common, capsys)  # without pooling: one selection per ω
    assert [(r["model"], r["model.regularizers.supervision.weight"], float(r["mig_median"])) for r in _rows(out)] == [
        ("dvae_friede", "1", pytest.approx(0.41)), ("labels:dvae_friede", "1", pytest.approx(0.51)),
        ("dvae_friede", "10", pytest.approx(0.5)), ("labels:dvae_friede", "10", pytest.approx(0.6))]
    bare = tmp_path / "bare"
    fake_run(bare, "0_dvae", "dvae_friede", metrics={"mig": 0.2})
    rc, out, err = run_report([bare, "--select", "labels", "--no-figure"], capsys)
    assert rc == 2 and "disentangle.select DIR --rule labels" in err and err.count("\n") == 1


# -- the rule a sweep file carries -------------------------------------------------------------------------------
def multirun(root, config_name, sweep_dir):
    """A sweep directory as Hydra writes it: ``multirun.yaml`` naming the config and the directories it came from."""
    root.mkdir(parents=True, exist_ok=True)
    sources = [{"path": "hydra.conf", "schema": "pkg", "provider": "hydra"},
               {"path": "/nowhere/conf", "schema": "file", "provider": "main"},
               {"path": str(sweep_dir), "schema": "file", "provider": "command-line"}]
    (root / "multirun.yaml").write_text(yaml.safe_dump(
        {"hydra": {"job": {"config_name": config_name}, "runtime": {"config_sources": sources}}, "seed": 0}))
    return root


def sweep_file(sweep_dir, name, rule_lines):
    sweep_dir.mkdir(parents=True, exist_ok=True)
    header = "".join(f"{line}\n" for line in ["# A sweep.", *rule_lines, "# Runs: 2 seeds = 2."])
    (sweep_dir / f"{name}.yaml").write_text(header + "defaults:\n  - train\nhydra:\n  sweeper:\n    params:\n"
                                                     "      seed: 0,1\n")


def test_report_applies_the_sweeps_rule_and_flags_override_it(tmp_path, capsys):
    sweeps = tmp_path / "sweeps"
    sweep_file(sweeps, "mine", ["# Report: --select-checkpoint best-infom", "# Report: --psnr-min 38"])
    sweep_file(sweeps, "theirs", ["# Report: --select-checkpoint final --stat se"])
    mine = multirun(tmp_path / "multirun" / "d1", "mine", sweeps)
    _tripod_runs(mine)
    csv_ = ["--format", "csv", "--no-figure"]
    rc, out, err = run_report([mine, *csv_], capsys)
    assert rc == 0 and float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.875)
    assert "rule from mine.yaml (`--select-checkpoint best-infom --psnr-min 38`)" in err
    # a run directory of the sweep, and a directory above it, find the same rule
    for where in (mine / "0_tripod", tmp_path / "multirun"):
        rc, out, _ = run_report([where, *csv_], capsys)
        assert float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.85 if where.name == "0_tripod" else 0.875)
    # a flag wins over the rule's; --no-sweep-rule drops it
    rc, out, err = run_report([mine, "--select-checkpoint", "final", *csv_], capsys)
    assert float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.65)
    assert "overridden on the command line: --select-checkpoint" in err
    rc, out, err = run_report([mine, "--psnr-min", "0", *csv_], capsys)
    assert float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.925)  # 30 dB admitted now
    rc, out, err = run_report([mine, "--no-sweep-rule", *csv_], capsys)
    assert float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.65) and "rule from" not in err
    # two sweeps whose rules disagree: the report asks for the flag
    theirs = multirun(tmp_path / "multirun" / "d2", "theirs", sweeps)
    fake_run(theirs, "0_qlae", "qlae", metrics={"infom": 0.5, "psnr": 39.0})
    rc, out, err = run_report([mine, theirs, *csv_], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "disagree on --select-checkpoint: best-infom (mine.yaml) vs final (theirs.yaml)" in err
    rc, out, err = run_report([mine, theirs, "--select-checkpoint", "best-infom", *csv_], capsys)
    assert rc == 0 and "--stat se" in err and {r["model"] for r in _rows(out)} == {"tripod", "qlae"}


def test_sweeps_without_a_rule_or_with_a_bad_one_leave_the_defaults(tmp_path, capsys):
    sweeps = tmp_path / "sweeps"
    sweep_file(sweeps, "bad", ["# Report: --select-checkpoint best-infom --frobnicate 3"])
    for name, config in (("plain", "train"), ("bad", "bad"), ("gone", "no_such_sweep")):
        d = multirun(tmp_path / name, config, sweeps)
        _tripod_runs(d)
        rc, out, err = run_report([d, "--format", "csv", "--no-figure"], capsys)
        assert rc == 0 and float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.65), name
        assert ("'--frobnicate' is not a rule flag" in err) == (name == "bad")


def test_a_moved_sweep_file_is_found_in_this_checkout(tmp_path, capsys):
    d = multirun(tmp_path / "moved", "tripod_table1", tmp_path / "elsewhere")
    _tripod_runs(d)
    rc, out, err = run_report([d, "--format", "csv", "--no-figure"], capsys)
    assert rc == 0 and float(_rows(out)[0]["infom_mean"]) == pytest.approx(0.875)
    assert "rule from tripod_table1.yaml (`--select-checkpoint best-infom --psnr-min tripod`)" in err


def test_every_sweep_files_rule_parses_and_names_its_papers_rule():
    rules = {p.stem: read_rule(p) for p in sorted(SWEEP_DIR.glob("*.yaml"))}
    options = {name: rule.options for name, rule in rules.items() if rule is not None}
    assert options["tripod_table1"] == {"select_checkpoint": "best-infom", "psnr_min": "tripod"}
    for tuning in ("tripod_lambdas", "tripod_naive_lambdas", "betatcvae_tripod"):
        assert options[tuning] == {"select_checkpoint": "best-infom", "psnr_min": "tripod", "select": "infom"}
    assert options["qlae_table2"] == options["factorqvae_table1"] == {"select_checkpoint": "final", "stat": "ci95"}
    assert options["qlae_weight_decay"] == {"select": "infom", "psnr_min": "ae-1"}
    assert options["infowgan_gp_weight_decay"] == {"select": "infom"}  # GANs: no reconstruction filter
    assert options["cliff_table3"] == {"stat": "se", "select": "dci_d", "select_by": "best-seed"}
    assert options["cliff_table2"] == options["cliff_synthetic"] == {"stat": "se"}
    assert options["roth_correlations"] == {"select": "dci_d"} and "schott_splits" not in options


def test_rule_lines_parse_like_the_command_line():
    assert parse_rule("--stat quartiles --pool gamma omega --ddof 0") == {"stat": "quartiles",
                                                                          "pool": ["gamma", "omega"], "ddof": 0}
    for bad, text in (("--stat median", "--stat median"), ("--psnr-min shapes3d=lots", "--psnr-min"),
                      ("--select", "needs a value"), ("--stat se --stat se", "given twice"),
                      ("--select-checkpoint newest", "--select-checkpoint"), ("--format csv", "not a rule flag")):
        with pytest.raises(ValueError, match=text):
            parse_rule(bad)
    # an option given on the command line is not taken from any rule, so rules may disagree on it
    from disentangle.reporting.sweeps import SweepRule

    a, b = SweepRule(Path("a.yaml"), {"stat": "se", "select": "infom"}), SweepRule(Path("b.yaml"), {"stat": "ci95"})
    assert merge_rules([a, b], {"stat": "quartiles"})[0] == {"select": "infom"}
    with pytest.raises(ValueError, match="disagree on --stat"):
        merge_rules([a, b], {})
