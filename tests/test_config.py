"""Config composition: every model x data pair, per-(model, data) values, attaching regularizers."""
import copy
import functools
import re

import pytest
from conftest import CONF, DATASETS, MODELS, ROOT, compose_config, run_cli
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf

CHANNELS = {"sprites": 1, "dsprites": 1, "smallnorb": 1, "circles": 1}


def test_the_expected_models_and_datasets_exist():
    assert set(MODELS) >= {"ae", "qlae", "qlae_global_codebook", "qlae_no_wd", "tripod", "tripod_no_nhp",
                           "tripod_no_klm", "tripod_finer", "betavae", "betatcvae", "bioae", "vqvae", "vqvae_wd",
                           "tripod_naive", "qvae", "factorqvae", "dvae", "factordvae", "factorvae", "ae_fq",
                           "betavae_fq", "bioae_fq", "qlae_fq", "dvae_friede", "factordvae_friede", "vae_friede",
                           "factorvae_friede", "infowgan_gp", "qlinfowgan_gp", "qlinfowgan_gp_no_wd", "wgan_gp"}
    assert set(DATASETS) >= {"shapes2d", "sprites", "shapes3d", "mpi3d", "falcor3d", "isaac3d", "dsprites",
                             "cars3d", "smallnorb", "colour_dsprites", "circles", "cliff2d", "balls"}


# The matrix composes each model and each dataset once and pairs them in memory (issue 42): the model group writes
# only `model`, the data group only `data` (their per-(model, data) values are interpolations, resolved per pair),
# so a pair is the model's composition with the dataset's `data` node; test_pairing_in_memory_is_composing_the_pair
# checks that against Hydra for every model and every dataset.
@functools.cache
def _composed_model(model: str):
    return compose_config([f"model={model}", "model/arch=small"])


@functools.cache
def _composed_data(data: str):
    return compose_config([f"data={data}", "model/arch=small"])


def _paired(model: str, data: str):
    cfg = copy.deepcopy(_composed_model(model))
    cfg.data = copy.deepcopy(_composed_data(data).data)
    return cfg


def test_pairing_in_memory_is_composing_the_pair():
    """Each model with one dataset and each dataset with one model (rotating), composed by Hydra, equal their
    in-memory pairs: every model's and every dataset's composition is checked against the real one."""
    pairs = {(m, DATASETS[i % len(DATASETS)]) for i, m in enumerate(MODELS)}
    pairs |= {(MODELS[(3 * i + 1) % len(MODELS)], d) for i, d in enumerate(DATASETS)}
    for model, data in sorted(pairs):
        real = compose_config([f"model={model}", f"data={data}", "model/arch=small"])
        assert OmegaConf.to_container(_paired(model, data)) == OmegaConf.to_container(real), (model, data)


@pytest.mark.parametrize("data", DATASETS)
@pytest.mark.parametrize("model", MODELS)
def test_every_model_data_pair_composes_and_builds(model, data):
    cfg = _paired(model, data)
    OmegaConf.resolve(cfg)
    # Friede et al. use 10 latents on every dataset (categorical_vae.md §9), Cliff's balls models the balls' 4
    # coordinates (cliff.md §8.2); the other papers use 2 per factor.
    expected = 10 if "_friede" in model else 4 if model.endswith("_balls") else 2 * len(cfg.data.factor_sizes)
    assert cfg.model.n_latents == expected
    assert cfg.data.batch_size == cfg.model.batch_size
    net = instantiate(cfg.model, in_channels=CHANNELS.get(data, 3), resolution=32)
    assert net.n_latents == expected
    assert net.encoder.__class__.__name__ == "SmallEncoder"


@pytest.mark.parametrize("model, arch", [("ae", "ConvEncoder"), ("qlae", "ConvEncoder"), ("tripod", "ResidualEncoder"),
                                         ("betavae", "ConvEncoder"), ("vqvae", "ConvEncoder"),
                                         ("tripod_naive", "ResidualEncoder")])
def test_paper_architectures_are_the_defaults(model, arch):
    cfg = compose_config([f"model={model}", "data=shapes3d"])
    net = instantiate(cfg.model, in_channels=3, resolution=64)
    assert type(net.encoder).__name__ == arch


def test_tripod_on_isaac3d_gets_the_authors_lambdas():
    cfg = compose_config(["model=tripod", "data=isaac3d"])
    assert cfg.model.regularizers.klm.weight == pytest.approx(1e-4)
    assert cfg.model.regularizers.nhp.weight == pytest.approx(1e-8)
    assert cfg.model.n_latents == 18 and cfg.model.batch_size == 64
    other = compose_config(["model=tripod", "data=mpi3d"])
    assert (other.model.regularizers.klm.weight, other.model.regularizers.nhp.weight) == (1e-8, 1e-4)


def test_qlae_weight_decay_follows_the_dataset_and_stays_overridable():
    assert compose_config(["model=qlae", "data=shapes3d"]).model.optimizer.weight_decay == pytest.approx(0.1)
    assert compose_config(["model=qlae", "data=mpi3d"]).model.optimizer.weight_decay == pytest.approx(1e-3)
    assert compose_config(["model=qlae_no_wd", "data=shapes3d"]).model.optimizer.weight_decay == 0
    cfg = compose_config(["model=qlae", "data=shapes3d", "model.optimizer.weight_decay=0.5"])
    assert cfg.model.optimizer.weight_decay == 0.5


def test_ablations_keep_tripods_tuned_values_and_switch_one_thing_off():
    no_nhp = compose_config(["model=tripod_no_nhp", "data=isaac3d"]).model
    assert no_nhp.regularizers.nhp.weight == 0 and no_nhp.regularizers.klm.weight == pytest.approx(1e-4)
    no_klm = compose_config(["model=tripod_no_klm", "data=shapes3d"]).model
    assert no_klm.regularizers.klm.weight == 0 and no_klm.regularizers.nhp.weight == pytest.approx(1e-2)
    assert compose_config(["model=tripod_finer"]).model.latent.n_levels == 144
    net = instantiate(compose_config(["model=tripod_no_nhp", "model/arch=small"]).model, in_channels=3, resolution=32)
    assert list(net.regularizers) == ["klm"]  # zero-weight terms are not computed at all
    glob = instantiate(compose_config(["model=qlae_global_codebook", "model/arch=small"]).model, in_channels=3, resolution=32)
    assert glob.latent.values.shape == (1, 10)


NEW_MODELS = ("betavae", "betatcvae", "bioae", "vqvae", "vqvae_wd", "tripod_naive")


@pytest.mark.parametrize("arch", ["small", "qlae", "tripod"])
@pytest.mark.parametrize("model", NEW_MODELS)
def test_new_models_compose_with_every_architecture(model, arch):
    cfg = compose_config([f"model={model}", "data=shapes3d", f"model/arch={arch}"])
    net = instantiate(cfg.model, in_channels=3, resolution=16)
    assert net.encoder.out_features == net.latent.in_features
    assert net.decoder.in_features == net.latent.out_features
    if model == "tripod_naive":  # activation normalisation for the vanilla Hessian penalty, on every decoder
        assert cfg.model.arch.decoder.normalize_outputs is True


def test_qlae_protocol_baselines_get_the_authors_per_dataset_values():
    """spec qlae.md §6.2: beta-VAE's beta, beta-TCVAE's beta, BioAE's lambda_activity, VQ-VAE's weight decay."""
    values = {
        "betavae": ("latent.beta", {"shapes3d": 3.0, "mpi3d": 0.1, "falcor3d": 10.0, "isaac3d": 0.3}),
        "betatcvae": ("regularizers.tcvae.beta", {"shapes3d": 3.0, "mpi3d": 0.3, "falcor3d": 3.0, "isaac3d": 1.0}),
        "bioae": ("regularizers.bio.activity_weight",
                  {"shapes3d": 0.01, "mpi3d": 0.01, "falcor3d": 0.01, "isaac3d": 0.1}),
        "vqvae": ("optimizer.weight_decay", {"shapes3d": 0.0, "isaac3d": 0.0}),
        "vqvae_wd": ("optimizer.weight_decay", {"shapes3d": 0.01, "mpi3d": 0.01}),
    }
    for model, (key, per_data) in values.items():
        for data, value in per_data.items():
            cfg = compose_config([f"model={model}", f"data={data}"])
            assert OmegaConf.select(cfg.model, key) == pytest.approx(value), (model, data)
            assert cfg.model.batch_size == 128 and cfg.model.optimizer.lr == pytest.approx(1e-3)
    assert compose_config(["model=betavae"]).model.optimizer.weight_decay == 0
    assert compose_config(["model=bioae"]).model.optimizer.weight_decay == pytest.approx(1e-4)
    tcvae = compose_config(["model=betatcvae"]).model
    assert tcvae.latent.beta == 0 and tcvae.regularizers.tcvae.alpha == 1 and tcvae.regularizers.tcvae.gamma == 1


FQ_TABLE3 = {  # spec factorqvae.md §7: (key, {dataset: value})
    "qvae": [("latent.beta", {"shapes3d": 1e-3, "isaac3d": 5e-5, "mpi3d": 5e-5})],
    "dvae": [("latent.beta", {"shapes3d": 5e-3, "isaac3d": 1e-5, "mpi3d": 5e-5})],
    "factorqvae": [("latent.beta", {"shapes3d": 1e-3, "isaac3d": 5e-5, "mpi3d": 5e-5}),
                   ("regularizers.tc_discriminator.weight", {"shapes3d": 1e-4, "isaac3d": 5e-5, "mpi3d": 1e-6})],
    "factordvae": [("latent.beta", {"shapes3d": 5e-3, "isaac3d": 1e-5, "mpi3d": 5e-5}),
                   ("regularizers.tc_discriminator.weight", {"shapes3d": 5e-4, "isaac3d": 1e-5, "mpi3d": 5e-6})],
    "betavae_fq": [("latent.beta", {"shapes3d": 1e-4, "isaac3d": 5e-5, "mpi3d": 1e-5})],
    "factorvae": [("latent.beta", {"shapes3d": 1e-4, "isaac3d": 5e-5, "mpi3d": 1e-5}),
                  ("regularizers.tc_discriminator.weight", {"shapes3d": 1e-4, "isaac3d": 5e-5, "mpi3d": 1e-5})],
    "bioae_fq": [("regularizers.bio.activity_weight", {"shapes3d": 1e-2, "isaac3d": 0.1, "mpi3d": 1e-2})],
}


@pytest.mark.parametrize("model", sorted(FQ_TABLE3))
def test_factorqvae_family_gets_table_3_and_its_protocol(model):
    for key, per_data in FQ_TABLE3[model]:
        for data, value in per_data.items():
            cfg = compose_config([f"model={model}", f"data={data}"])
            assert OmegaConf.select(cfg.model, key) == pytest.approx(value), (key, data)
    m = compose_config([f"model={model}", "data=shapes3d"]).model
    assert m.reconstruction == "mse" and m.density_scale == 1.0 and m.optimizer.weight_decay == 0
    assert m.optimizer.betas == [0.9, 0.999] and not m.optimizer.clip_value
    assert (m.optimizer.schedule.steps, m.optimizer.schedule.final_lr) == (50000, 1.25e-6)
    assert m.arch.encoder._target_ == "disentangle.nn.DalleEncoder"
    adversarial = "tc_discriminator" in m.regularizers
    assert m.batch_size == (512 if adversarial else 256)  # 256 for the model (+ 256 negatives for the discriminator)
    if adversarial:
        d = m.regularizers.tc_discriminator
        assert (d.negatives, d.negative_slope, d.optimizer.lr, d.hidden, d.layers) == ("second_batch", 0.2, 1e-3, 1000, 5)
        assert d.schedule.steps == 50000  # the model's schedule (authors' code)


def test_factorqvae_family_baselines_differ_from_the_qlae_papers_as_the_spec_says():
    qlae = compose_config(["model=qlae_fq", "data=shapes3d"]).model
    assert (qlae.latent.n_values, qlae.latent.init, qlae.optimizer.weight_decay) == (16, "normal", 0)
    assert compose_config(["model=bioae_fq"]).model.optimizer.weight_decay == 0  # no weight energy
    paper = compose_config(["experiment=factorqvae_paper", "model=factorqvae", "data=shapes3d"])
    assert paper.trainer.max_steps == 100000 and paper.callbacks.evaluation.dci.predictor == "gbt"
    dvae = instantiate(compose_config(["model=dvae", "model/arch=small"]).model, in_channels=3, resolution=16)
    assert dvae.latent.in_features == 12 * 64 and dvae.latent.logits_from == "encoder"


def test_naive_tripod_is_qlae_quantization_with_fixed_bandwidth_klm_and_the_vanilla_hessian_penalty():
    cfg = compose_config(["model=tripod_naive", "data=isaac3d"])
    net = instantiate(cfg.model, in_channels=3, resolution=16)
    assert type(net.latent).__name__ == "LatentQuantizer" and net.latent.n_values == 10
    assert net.regularizers["klm"].bandwidth == 1.0 and net.regularizers["nhp"].normalized is False
    assert net.decoder.normalize_outputs is True and cfg.model.batch_size == 64
    assert (net.regularizers["klm"].weight, net.regularizers["nhp"].weight) == (1e-4, 1e-8)  # Tripod's values


def test_any_regularizer_attaches_to_any_model_from_the_command_line():
    cfg = compose_config(["model=qlae", "model/arch=small", "+regularizer=nhp", "model.regularizers.nhp.weight=0.5"])
    net = instantiate(cfg.model, in_channels=3, resolution=32)
    assert set(net.regularizers) == {"nhp"} and net.regularizers["nhp"].weight == 0.5
    cfg = compose_config(["model=ae", "model/arch=small", "+regularizer=[klm,nhp]"])
    assert set(instantiate(cfg.model, in_channels=3, resolution=32).regularizers) == {"klm", "nhp"}
    for model, reg in (("betavae", "nhp"), ("vqvae", "klm"), ("betavae", "tcvae"), ("qlae", "bio"),
                       ("betatcvae", "bio"), ("tripod", "bio")):
        cfg = compose_config([f"model={model}", "model/arch=small", f"+regularizer={reg}"])
        assert reg in instantiate(cfg.model, in_channels=3, resolution=32).regularizers, (model, reg)


def test_the_latent_module_swaps_from_the_command_line():
    cfg = compose_config(["model=ae", "model/arch=small", "model/latent=gaussian", "+regularizer=tcvae"])
    net = instantiate(cfg.model, in_channels=3, resolution=32)
    assert type(net.latent).__name__ == "GaussianLatent" and "tcvae" in net.regularizers


def test_slurm_launcher_config_composes():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert "submitit" in cfg.hydra.launcher._target_.lower()
    assert cfg.hydra.launcher.gpus_per_node == 1


def test_cli_prints_the_composed_config_with_tuned_values():
    res = run_cli("model=tripod", "data=isaac3d", "--cfg", "job")
    assert res.returncode == 0, res.stderr
    cfg = OmegaConf.create(res.stdout)
    assert cfg.model.regularizers.klm.weight == pytest.approx(1e-4)
    assert cfg.model.regularizers.nhp.weight == pytest.approx(1e-8)
    assert cfg.model.n_latents == 18


@pytest.mark.parametrize("override, choice", [("model=nope", "tripod"), ("data=nope", "isaac3d")])
def test_unknown_names_give_one_line_listing_the_choices(override, choice):
    res = run_cli(override, "--cfg", "job")
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: {override}: no such config") and choice in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


SWEEPS = sorted(p.stem for p in (CONF.parent / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("sweep", SWEEPS)
def test_sweep_files_compose_with_their_grids(sweep):
    res = run_cli("-cd", "sweeps", "-cn", sweep, "--cfg", "hydra")
    assert res.returncode == 0, res.stderr[-2000:]
    params = OmegaConf.create(res.stdout).hydra.sweeper.params
    assert len(params) >= 2 and all("," in str(v) for v in params.values())


def test_switching_the_progress_bar_off_drops_the_configured_bar():
    from conftest import FAST

    from disentangle.runtime.run import build

    overrides = [o for o in FAST if o != "~callbacks.progress"] + ["model=ae", "data=sprites"]
    job = build(compose_config(overrides))
    assert not any(type(c).__name__ == "TQDMProgressBar" for c in job.trainer.callbacks)


def test_every_model_config_has_a_bench_steps_entry():
    """Every method is timed by `python -m disentangle.bench steps` (issue 30 item 4)."""
    from disentangle.bench import STEP_CASES

    timed = {o.split("=", 1)[1] for _, overrides in STEP_CASES for o in overrides if o.startswith("model=")}
    assert not sorted(set(MODELS) - timed), f"models without a bench steps entry: {sorted(set(MODELS) - timed)}"


def _measured_rows(page: str, command: str) -> dict[str, list[str]]:
    """The rows of ``page``'s comparison tables whose first cell is ``command`` with a model: model -> the cells."""
    rows = {}
    for line in (ROOT / page).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(rf"`{command}model=(\w+)`( \(default\))?", cells[0]) if line.startswith("|") else None
        if match and "+regularizer" not in cells[0]:
            rows[match.group(1)] = cells[1:]
    return rows


def test_every_model_config_has_a_measured_quickstart_row():
    """Every method has a measured row on the quickstart budget (issue 30 item 4): the quickstart comparison of
    docs/getting-started.md (`experiment=quickstart`), or, for Cliff's balls models, whose networks and MCC belong to
    the balls data, docs/methods/cliff.md's table of `experiment=cliff_balls_quickstart`. A row is measured: every
    cell a number."""
    rows = _measured_rows("docs/getting-started.md", "")
    rows |= _measured_rows("docs/methods/cliff.md", "experiment=cliff_balls_quickstart ")
    missing = sorted(set(MODELS) - set(rows))
    assert not missing, f"models without a measured quickstart row: {missing}"
    for model, cells in rows.items():
        assert cells and all(re.fullmatch(r"-?\d+(\.\d+)?( s)?", c) for c in cells), (model, cells)
