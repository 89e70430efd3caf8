"""``trainer.compile`` (issue 32; disentangle.runtime.compilation): compiled steps compute what eager steps compute for
every model family, checkpoints keep their keys both ways, a compiled run resumes exactly, recompiles stay bounded,
``auto`` decides by its rule and keeps its decision on resume, and bad settings fail in one line."""
from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import FAST, ROOT, compose_config, run_cli

from disentangle.bench import StepTimer
from disentangle.errors import ConfigError
from disentangle.runtime.compilation import (
    EXPECTED,
    MEASURED_SPEEDUP,
    MIN_GAIN,
    compile_counts,
    compile_setting,
    compiler_missing,
    decide_auto,
    expected_speedup,
)
from disentangle.foundation.devices import SIMULATE_VARIABLE
from disentangle.runtime.families import FAMILIES, family_label
from disentangle.foundation.precision import autocast_for
from disentangle.runtime.run import build, train

pytestmark = pytest.mark.skipif(compiler_missing("cpu") is not None, reason="no C++ compiler for Inductor")

RES, BATCH = 16, 8
REL = 1e-4  # terms, and each update's gradient as one vector (a per-tensor norm would divide by a zero gradient: a
#             bias that a translation-invariant term such as Cliff's cannot move gets only rounding noise)


def _timer(overrides, compiled: bool, precision: str = "32-true", dtype=torch.float32) -> StepTimer:
    torch.manual_seed(0)  # the same weights and batch for the eager and the compiled model
    timer = StepTimer(overrides, "cpu", BATCH, precision, resolution=RES, compiled=compiled)
    if dtype != torch.float32:
        timer.model.to(dtype)
        timer.x = timer.x.to(dtype)
    return timer


def _family_overrides(choice: list[str]) -> list[str]:
    if "experiment=cliff2d" in choice:  # an MLP on 2-D points: its own networks
        return [*choice, "model.batch_size=8"]
    return [*choice, "model/arch=small"]


def _first_step(overrides, compiled: bool, precision: str = "32-true", dtype=torch.float32):
    """The first step's logged terms, each update's gradient (flattened, in optimizer order) and the model."""
    timer = _timer(overrides, compiled, precision, dtype)
    torch.manual_seed(1)  # the step's noise (sampling, prior draws, Hessian directions) drawn alike
    with autocast_for(precision, "cpu"):
        _, logs = timer.model.optimization_step(timer.x, timer.optimizers)
    grads = [torch.cat([p.grad.flatten().double() for g in opt.param_groups for p in g["params"] if p.grad is not None]
                       or [torch.zeros(0, dtype=torch.float64)])  # a GAN's generator: no update at step 1
             for opt in timer.optimizers]
    return {k: float(v) for k, v in logs.items()}, grads, timer.model


def _error(a: float | torch.Tensor, b: float | torch.Tensor) -> float:
    if isinstance(a, torch.Tensor):
        return float((a - b).norm() / b.norm().clamp_min(1e-30))
    return abs(a - b) / max(abs(b), 1e-5)


@pytest.mark.parametrize("family", list(FAMILIES), ids=family_label)
def test_every_family_first_step_compiled_equals_eager(family):
    """The first step's logged terms and every update's gradient, compiled against eager from the same weights, batch
    and noise: equal to float tolerance (:data:`REL`), and the networks really were compiled. A Hessian penalty
    divides second differences by eps^2 = 0.01, which amplifies float32 rounding (a compiled kernel rounds in another
    order): there compiled must be as close to eager as eager float32 is to float64 (on this test's Tripod: NHP 2.2e-4
    vs 9e-4, gradients about 4e-3 vs 3.5e-3)."""
    overrides = _family_overrides(FAMILIES[family])
    eager_logs, eager_grads, eager_model = _first_step(overrides, compiled=False)
    logs, grads, model = _first_step(overrides, compiled=True)
    assert model.compiled, "nothing was compiled"
    assert logs.keys() == eager_logs.keys() and len(grads) == len(eager_grads)
    tolerance = {name: REL for name in logs} | {f"update {i}": REL for i in range(len(grads))}
    if any(reg.exact_float32 for reg in eager_model.regularizers.values()):  # a Hessian penalty: float32's own error
        exact_logs, exact_grads, _ = _first_step(overrides, compiled=False, dtype=torch.float64)
        for name, value in exact_logs.items():
            tolerance[name] = max(REL, 2 * _error(eager_logs[name], value))
        for i, value in enumerate(exact_grads):
            tolerance[f"update {i}"] = max(REL, 2 * _error(eager_grads[i], value))
    for name, value in eager_logs.items():
        assert _error(logs[name], value) <= tolerance[name], f"{name}: {logs[name]} vs eager {value}"
    for i, value in enumerate(eager_grads):
        error = _error(grads[i], value)
        assert error <= tolerance[f"update {i}"], f"update {i}'s gradient {error:.1e} off eager"


def test_compiled_state_dict_keys_are_the_eager_ones():
    eager = _timer(["model=tripod", "model/arch=small"], compiled=False).model
    compiled = _timer(["model=tripod", "model/arch=small"], compiled=True).model
    assert list(compiled.state_dict()) == list(eager.state_dict())
    assert not any("_orig_mod" in key for key in compiled.state_dict())


def test_gan_compiles_its_generator_and_keeps_the_critic_eager():
    """The gradient penalty differentiates the critic's input gradient (a double backward): the trunk and critic run
    eager, the generator compiled, and a step runs."""
    timer = _timer(["model=infowgan_gp", "model/arch=small"], compiled=True)
    assert timer.model.compiled == ["decoder"]
    assert timer.model.network("encoder") is timer.model.encoder
    timer.run(1)  # a whole period: critic updates with the penalty, then the generator's update


def test_islands_stay_float32_under_bf16_compiled():
    """Under bf16 autocast the compiled decoder's NHP passes still run in float32 (the island): the compiled step's
    NHP equals the eager one's."""
    overrides = ["model=tripod", "model/arch=small"]
    eager, _, _ = _first_step(overrides, compiled=False, precision="bf16-mixed")
    compiled, _, _ = _first_step(overrides, compiled=True, precision="bf16-mixed")
    assert compiled["nhp"] == pytest.approx(eager["nhp"], rel=2e-2)
    assert compiled["reconstruction"] == pytest.approx(eager["reconstruction"], rel=2e-2)


def test_recompiles_are_bounded():
    """A compiled model's steps compile a fixed set of graphs: none more after the first period, however many steps
    follow (no recompilation storm); evaluation runs eager and compiles nothing."""
    timer = _timer(["model=tripod", "model/arch=small"], compiled=True)
    timer.run(1)
    after_first = compile_counts()
    timer.run(3)
    with torch.no_grad():
        timer.model.represent(timer.x[:5])
        timer.model.embed(timer.x[:3])
    assert compile_counts() == after_first


# -- runs ------------------------------------------------------------------------------------------------------
RUN = [*FAST, "model=tripod", "data=shapes2d", "+trainer.deterministic=true", "callbacks.evaluation.figures=false",
       "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.n_samples=128"]


def _weights(run_dir):
    ckpt = torch.load(os.path.join(run_dir, "checkpoints", "last.ckpt"), map_location="cpu", weights_only=True)
    return ckpt


def test_compiled_run_resumes_exactly_and_loads_eager(tmp_path):
    """Compiled for 4 steps in one go = compiled for 2, then resumed compiled to 4 (auto keeps the stored decision);
    its checkpoint loads in an eager run, which continues from it."""
    whole = tmp_path / "whole"
    train(compose_config([*RUN, "trainer.compile=true"], whole))
    part = tmp_path / "part"
    train(compose_config([*RUN, "trainer.compile=true", "trainer.max_steps=2"], part))
    train(compose_config([*RUN, "trainer.compile=auto", f"resume={part}"], part))
    a, b = _weights(whole), _weights(part)
    assert a["global_step"] == b["global_step"] == 4
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    assert b["callbacks"]["CompileNetworks"]["compiled"] is True
    record = json.loads((part / "metrics.json").read_text())
    assert record["runtime"]["compiled"] is True
    assert "checkpoint" in record["runtime"]["compile_reason"]
    # a compiled checkpoint continued eager
    eager = tmp_path / "eager"
    train(compose_config([*RUN, "trainer.compile=false", "trainer.max_steps=6", f"resume={whole}"], eager))
    assert _weights(eager)["global_step"] == 6


def test_auto_rule_known_answers():
    cpu = EXPECTED["cpu"]
    # saving = steps x probe x (1 - 1/speedup) against the cost
    steps_even = cpu.cost_s / (0.01 * (1 - 1 / cpu.speedup))
    assert not decide_auto(0.01, int(steps_even) - 1, "cpu").compiled
    assert decide_auto(0.01, int(steps_even) + 1, "cpu").compiled
    assert not decide_auto(1.0, 10**6, "mps").compiled


def test_auto_expects_the_speed_up_measured_for_the_networks_and_never_compiles_where_it_was_slower():
    for device_type, measured in MEASURED_SPEEDUP.items():
        for key, speedup in measured.items():
            model, _, network = key.rpartition(":")
            decision = decide_auto(1.0, 10**7, device_type, [network, "NotMeasured"], model or "Autoencoder")
            assert decision.compiled is (speedup >= MIN_GAIN), (key, decision.reason)
            if speedup < MIN_GAIN:
                assert key in decision.reason and "eager" in decision.reason
            else:
                assert f"(1 - 1/{speedup})" in decision.reason
    # several networks: the smallest measured speed-up counts; unmeasured ones take the default; a model's own entry
    # comes before the network's
    assert expected_speedup("cpu", ["ConvEncoder", "LachapelleEncoder"]) == (0.83, "LachapelleEncoder")
    assert expected_speedup("cpu", ["NotMeasured"]) == (EXPECTED["cpu"].speedup, None)
    assert expected_speedup("cpu", ["StyleDecoder"], "InfoWGAN")[1] == "InfoWGAN:StyleDecoder"
    assert expected_speedup("cpu", ["StyleDecoder"], "Autoencoder")[1] == "StyleDecoder"


# Networks `auto` knows no measured speed-up for (it expects EXPECTED's): the quickstart's small 32-px networks, the
# broadcast decoder and Cliff's 2-D MLP, none of them a benchmark case (docs/benchmarks.md "Compiled steps").
UNMEASURED_NETWORKS = {"SmallEncoder", "SmallDecoder", "BroadcastDecoder", "MLPEncoder"}


def test_every_architectures_networks_have_a_measured_speed_up_or_are_known_unmeasured():
    import yaml

    classes = set()
    for path in sorted((ROOT / "conf" / "model" / "arch").glob("*.yaml")):
        for part in yaml.safe_load(path.read_text()).values():
            if isinstance(part, dict) and "_target_" in part:
                classes.add(part["_target_"].rpartition(".")[2])
    assert len(classes) >= 15
    measured = {key.rpartition(":")[2] for key in MEASURED_SPEEDUP["cpu"]}
    assert classes - measured == UNMEASURED_NETWORKS, "measure a new network with `bench steps --compile`"


def test_auto_leaves_a_short_run_eager_and_records_why(tmp_path):
    result_dir = tmp_path / "run"
    train(compose_config([*RUN, "trainer.compile=auto"], result_dir))
    runtime = json.loads((result_dir / "metrics.json").read_text())["runtime"]
    assert runtime["compiled"] is False
    assert runtime["compile_reason"].startswith("auto: 4 steps")
    assert runtime["compile_probe_s"] > 0


@pytest.mark.parametrize("value", ["sometimes", "2"])
def test_bad_setting_fails_in_one_line(value):
    with pytest.raises(ConfigError, match=r"trainer.compile.*auto.*true.*false") as info:
        build(compose_config([*RUN, f"trainer.compile={value}"]))
    assert "\n" not in str(info.value)


def test_true_without_a_compiler_fails_before_work(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match=r"trainer.compile=true: no C\+\+ compiler"):
        build(compose_config([*RUN, "trainer.compile=true"]))


def test_a_bad_compile_mode_fails_in_one_line():
    with pytest.raises(ConfigError, match=r"trainer.compile_mode.*max-autotune-no-cudagraphs"):
        build(compose_config([*RUN, "trainer.compile_mode=fastest"]))


def test_settings_accept_yaml_booleans():
    assert compile_setting(True) == "true"
    assert compile_setting(False) == "false"
    assert compile_setting("auto") == "auto"


# -- processes: data parallel, and a gpu_node sweep sharing one compile cache ------------------------------------
def test_compiled_ddp_keeps_the_processes_identical(tmp_path):
    """trainer=ddp with 2 processes (gloo) and trainer.compile=true, FactorVAE (encoder, decoder and TC discriminator
    compiled): both processes end with the same weights."""
    dump = tmp_path / "ranks"
    ddp = [o for o in FAST if o != "print_summary=false"]
    res = run_cli(*ddp, "print_summary=false", "trainer=ddp", "trainer.devices=2", "data=shapes2d", "model=factorvae",
                  "trainer.compile=true", "+callbacks.rank_dump._target_=ddp_probe.RankStateDump",
                  f"+callbacks.rank_dump.path={dump}", f"hydra.run.dir={tmp_path / 'run'}", timeout=600,
                  env={"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])})
    assert res.returncode == 0, res.stderr[-3000:]
    runtime = json.loads((tmp_path / "run" / "metrics.json").read_text())["runtime"]
    assert runtime["compiled"] is True
    a, b = (torch.load(dump / f"rank{r}.pt", weights_only=True)["state_dict"] for r in range(2))
    assert a["encoder.convs.0.weight"].ne(0).any()
    assert not [k for k in a if not torch.equal(a[k], b[k])]


def test_a_gpu_node_sweep_shares_one_compile_cache_so_later_jobs_start_warm(tmp_path):
    """hydra/launcher=gpu_node (one simulated GPU, one run at a time) with trainer.compile=true: the jobs compile into
    the sweep's .compile_cache, and the second job's first step (its compile) is much shorter than the first's."""
    env = {SIMULATE_VARIABLE: "1"}
    res = run_cli("-m", *FAST, "model=qlae", "data=shapes2d", "trainer.compile=true", "hydra/launcher=gpu_node",
                  "seed=0,1", f"hydra.sweep.dir={tmp_path}", env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    first = [json.loads(next(tmp_path.glob(f"{job}_*/metrics.json")).read_text())["runtime"] for job in (0, 1)]
    assert all(r["compiled"] for r in first)
    assert any((tmp_path / ".compile_cache").rglob("*.py")), "nothing in the sweep's compile cache"
    assert first[1]["first_step_s"] < 0.5 * first[0]["first_step_s"], first
