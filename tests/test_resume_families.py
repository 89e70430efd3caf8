"""Every model family survives a SIGKILL (issue 23): the families are derived from ``conf/model`` and
``conf/experiment`` (model class x latent module x several updates per step or not x a labelled stream or not x
encoder-only or not); each has a representative that is killed after its first checkpoint and resumed, ending
with the uninterrupted run's metrics. A new family without a representative fails the enumeration test, naming it."""
from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import forked_cli
import pytest
import torch
from conftest import CONF, FAST, compose_config, shared_dir
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from disentangle.runtime.families import FAMILIES, Family, family_of
from disentangle.runtime.run import train

# short runs on tiny networks: killed after the first checkpoint (step 4), resumed to step 16
SHORT = [o for o in FAST if not o.startswith(("trainer.max_steps", "callbacks.checkpoint", "callbacks.evaluation.every",
                                              "callbacks.evaluation.dci"))]
SHORT += ["trainer.max_steps=16", "callbacks.checkpoint.every_n_train_steps=4", "callbacks.evaluation.every_n_steps=8",
          "+trainer.deterministic=true", "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.figures=false",
          "callbacks.evaluation.n_samples=128"]
IMAGES = [*SHORT, "data=shapes2d"]
# encoder-only on Cliff's 2-D data (FAMILIES selects it with experiment=cliff2d): an MLP encoder, no image options
CLIFF2D = [o for o in SHORT if not o.startswith(("model/arch", "data.resolution", "model.batch_size"))]
CLIFF2D += ["data.num_samples=256", "data.eval_size=128", "model.batch_size=64",
            "callbacks.evaluation.metrics=[mcc]", "callbacks.evaluation.periodic_metrics=[mcc]"]

# semi-supervised: a second, labelled stream of batches drawn by the supervision regularizer
SEMI = [*IMAGES, "model.regularizers.supervision.n_labels=40", "model.regularizers.supervision.batch_size=8"]


def _short_run(family: Family) -> list[str]:
    return CLIFF2D if family.encoder_only else SEMI if family.labelled_stream else IMAGES


# each family's representative (disentangle.runtime.families) with this test's short-run settings
REPRESENTATIVES: dict[Family, list[str]] = {family: [*_short_run(family), *choice] for family, choice in FAMILIES.items()}


_INITIALIZED: dict[str, object] = {}   # conf dir -> the Hydra this module initialized for it


def _compose(overrides: list[str], conf_dir: Path = CONF):
    """``train`` composed with ``overrides``; Hydra stays initialized for ``conf_dir`` until this test ends (the
    enumeration composes hundreds of times: initializing once saves a sixth of each composition)."""
    hydra = GlobalHydra.instance()
    if not (hydra.is_initialized() and _INITIALIZED.get(str(conf_dir)) is hydra.hydra):
        hydra.clear()
        initialize_config_dir(config_dir=str(conf_dir), version_base="1.3")
        _INITIALIZED.clear()
        _INITIALIZED[str(conf_dir)] = hydra.hydra
    return compose("train", overrides=[*overrides, "paths.output_dir=/tmp/unused"])


@pytest.fixture(autouse=True)
def _hydra_left_as_found():
    """Every other test initializes Hydra itself: none finds it initialized by this module."""
    yield
    GlobalHydra.instance().clear()
    _INITIALIZED.clear()


def _family_of(cfg) -> Family:
    """The family of ``cfg``'s model, from the instantiated model (class, latent module, updates per step, labelled
    stream, encoder-only)."""
    try:
        model = instantiate(cfg.model, in_channels=3, resolution=64, dataset_size=1000)
    except (InstantiationException, ValueError, TypeError):  # non-image data (Cliff's 2-D points): its shape
        data = instantiate(cfg.data)
        model = instantiate(cfg.model, in_channels=data.num_channels, resolution=data.resolution, dataset_size=1000)
    return family_of(model)


def _family_of_config(overrides: list[str], conf_dir: Path = CONF) -> Family:
    return _family_of(_compose(overrides, conf_dir))


def _model_families(conf_dir: Path) -> dict[str, tuple]:
    """model -> (its config as composed alone, its family), for every model config."""
    plain: dict[str, tuple] = {}
    for name in sorted(p.stem for p in (conf_dir / "model").glob("*.yaml")):
        cfg = _compose([f"model={name}", "model/arch=small"] if "balls" not in name
                       else [f"model={name}", "data=balls"], conf_dir)
        plain[name] = (OmegaConf.to_container(cfg.model), _family_of(cfg))
    return plain


_CHECKOUT_FAMILIES: dict[str, tuple] = {}


@pytest.fixture(scope="session")
def model_families(tmp_path_factory) -> dict[str, tuple]:
    """:func:`_model_families` of the checkout's conf/, built once per test run by the first worker to ask and read
    by the others (the experiment cases spread over the workers share it)."""
    if not _CHECKOUT_FAMILIES:
        from filelock import FileLock

        stored = shared_dir(tmp_path_factory, "model_families") / "families.json"
        with FileLock(str(stored) + ".lock"):
            if not stored.is_file():
                stored.write_text(json.dumps(_model_families(CONF)))
            _CHECKOUT_FAMILIES.update({name: (config, Family(*family))
                                       for name, (config, family) in json.loads(stored.read_text()).items()})
    return _CHECKOUT_FAMILIES


def _experiment_families(name: str, plain: dict[str, tuple], conf_dir: Path, with_models: bool
                         ) -> dict[Family, list[str]]:
    """Family -> configurations of experiment ``name``: as it is (with the model it brings or the default one), and
    (``with_models``) with every model, a combination the configs refuse in one line left out."""
    found: dict[Family, list[str]] = {}
    try:  # as it is: the model it brings, or the default one (which it may refuse: then only with models)
        found.setdefault(_family_of_config([f"experiment={name}"], conf_dir), []).append(f"experiment={name}")
    except (InstantiationException, ValueError, TypeError):
        pass
    for model in plain if with_models else ():
        if "balls" in model:  # Lachapelle et al.'s networks need the balls images
            continue
        try:
            cfg = _compose([f"experiment={name}", f"model={model}", "model/arch=small"], conf_dir)
            same = OmegaConf.to_container(cfg.model) == plain[model][0]
            family = plain[model][1] if same else _family_of(cfg)
        except (InstantiationException, ValueError, TypeError):  # a combination the configs refuse
            continue
        found.setdefault(family, []).append(f"experiment={name} model={model}")
    return found


def families_found(conf_dir: Path = CONF, with_models: bool = True) -> dict[Family, list[str]]:
    """Family -> the configurations that give it: every model config, every experiment as it is (with the model it
    brings or the default one), and (``with_models``) every experiment with every model, a combination the configs
    refuse in one line left out. Nothing is read from the files' text: each family comes from a built model (an
    experiment that leaves a model's config as it is gives that model's family without building it again)."""
    plain = _CHECKOUT_FAMILIES if conf_dir == CONF and _CHECKOUT_FAMILIES else _model_families(conf_dir)
    found: dict[Family, list[str]] = {}
    for name, (_, family) in plain.items():
        found.setdefault(family, []).append(f"model={name}")
    for name in sorted(p.stem for p in (conf_dir / "experiment").glob("*.yaml")):
        for family, configs in _experiment_families(name, plain, conf_dir, with_models).items():
            found.setdefault(family, []).extend(configs)
    return found


def _missing(found: dict[Family, list[str]]) -> dict[Family, list[str]]:
    return {family: configs for family, configs in found.items() if family not in REPRESENTATIVES}


EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def test_every_family_of_the_model_configs_has_a_representative(model_families):
    found: dict[Family, list[str]] = {}
    for name, (_, family) in model_families.items():
        found.setdefault(family, []).append(f"model={name}")
    missing = _missing(found)
    assert not missing, f"model families without a kill-and-resume representative: {missing}"
    for family, overrides in REPRESENTATIVES.items():  # each representative is what it claims to be
        assert _family_of_config(overrides) == family, overrides


# one case per experiment (as it is, and with every model), so that the enumeration spreads over the test workers
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_family_an_experiment_gives_has_a_representative(experiment, model_families):
    missing = _missing(_experiment_families(experiment, model_families, CONF, with_models=True))
    assert not missing, f"model families without a kill-and-resume representative: {missing}"


def test_a_new_family_in_an_experiment_fails_the_enumeration_naming_itself(tmp_path):
    """The counterexample of issue 30: an experiment inheriting cliff2d with a Gaussian latent is a new family
    (encoder-only, Gaussian) that text matching missed; composing it finds it."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "cliff2d_gaussian.yaml").write_text(
        "# @package _global_\ndefaults:\n  - cliff2d\n  - override /model/latent: gaussian\n  - _self_\n")
    missing = _missing(families_found(conf, with_models=False))
    assert list(missing.values()) == [["experiment=cliff2d_gaussian"]], missing
    family = next(iter(missing))
    assert (family.latent, family.encoder_only) == ("GaussianLatent", True)


class KillAfterFirstCheckpoint(threading.Thread):
    """Watches a training process (forked from the preloaded interpreter: tests/forked_cli.py) and SIGKILLs it as soon as its first checkpoint is on disk (a thread, so the
    uninterrupted twin can train in this process meanwhile, while the subprocess starts up)."""

    def __init__(self, args: list[str], run_dir: Path, timeout: float = 300):
        super().__init__(daemon=True)
        self.proc = forked_cli.start("disentangle.train", *args, f"hydra.run.dir={run_dir}")
        self.last, self.timeout, self.problem = run_dir / "checkpoints" / "last.ckpt", timeout, None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.last.exists():
            if self.proc.poll() is not None:
                self.problem = f"the run ended before its first checkpoint: {self.proc.stderr.read()[-2000:]}"
                return
            if time.monotonic() > deadline:
                self.proc.kill()
                self.problem = "no checkpoint in time"
                return
            time.sleep(0.002)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def result(self) -> int:
        self.join()
        assert self.problem is None, self.problem
        return self.proc.returncode


@pytest.mark.parametrize("family", list(REPRESENTATIVES), ids=lambda f: "-".join(str(x) for x in f))
def test_each_family_killed_and_resumed_ends_where_the_uninterrupted_run_does(family, tmp_path):
    args = REPRESENTATIVES[family]
    full, killed = tmp_path / "full", tmp_path / "killed"
    watcher = KillAfterFirstCheckpoint(args, killed)  # the CLI in a subprocess, killed after its first checkpoint
    train(compose_config(args, output_dir=full))  # meanwhile, its uninterrupted twin here
    assert watcher.result() == -signal.SIGKILL
    assert not (killed / "metrics.json").exists()
    killed_at = torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert 0 < killed_at < 16, killed_at
    train(compose_config([*args, "auto_resume=true"], output_dir=killed))  # what a relaunched sweep job does
    expected = json.loads((full / "metrics.json").read_text())
    resumed = json.loads((killed / "metrics.json").read_text())
    assert resumed["step"] == expected["step"] == 16
    compared = [k for k, v in expected.items() if isinstance(v, float) and k != "eval_seconds"]
    assert compared, expected
    for key in compared:
        assert resumed[key] == pytest.approx(expected[key], abs=1e-6), key
    history = lambda d: [json.loads(x)["step"] for x in (d / "metrics_history.jsonl").read_text().splitlines()]
    assert history(killed) == history(full) == [8, 16]
