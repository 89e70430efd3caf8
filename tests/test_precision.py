"""Mixed precision keeps every estimator right (issues 22, 30): the fp32 islands of
:mod:`disentangle.foundation.precision`, each of which must earn its place (its term on a real model batch is
wrong under bf16 autocast without it and right with it), each sensitive term under bf16 autocast against
float32, NHP against a decoder with a known Hessian, the quickstarts' first logged terms under
``trainer.precision=bf16-mixed``, and the refusals."""
from __future__ import annotations

import csv
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT, compose_config, run_cli
from hydra.utils import instantiate
from torch import nn

import disentangle
from disentangle.data import ProceduralDataModule
from disentangle.errors import ConfigError
from disentangle.quantizers.base import LatentOutput
from disentangle.regularizers import NormalizedHessianPenalty
from disentangle.regularizers.base import StepContext, batch_std
from disentangle.regularizers.nhp import normalized_hessian_penalty
from disentangle.regularizers.tc_discriminator import discriminator_logits
from disentangle.foundation.precision import (
    ISLANDS,
    KEPT_ISLANDS,
    autocast_for,
    in_float32,
    islands_disabled,
    resolve_precision,
)
from disentangle.runtime.run import build, train

BF16 = "bf16-mixed"


# -- the island mechanism ----------------------------------------------------------------------------------
def test_an_island_computes_in_float32_under_autocast_and_is_a_plain_call_outside():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    matmul = in_float32(torch.matmul)
    with autocast_for(BF16, "cpu"):
        assert torch.matmul(a, b).dtype == torch.bfloat16  # what autocast does to a matmul
        inside = matmul(a.bfloat16(), b)  # a bf16 input is cast up, the product is float32
    assert inside.dtype == torch.float32
    assert torch.equal(inside, a.bfloat16().float() @ b)
    assert torch.equal(matmul(a, b), a @ b)  # outside autocast: untouched


def test_an_island_switched_off_by_name_is_a_plain_call_under_autocast_and_unknown_names_are_refused():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    matmul = in_float32(torch.matmul, name="tests.matmul")
    try:
        assert "tests.matmul" in ISLANDS
        with islands_disabled("tests.matmul"), autocast_for(BF16, "cpu"):
            assert matmul(a, b).dtype == torch.bfloat16
        with autocast_for(BF16, "cpu"):  # on again after the block
            assert matmul(a, b).dtype == torch.float32
        with islands_disabled("tests.matmul"):
            assert torch.equal(matmul(a, b), a @ b)
        with pytest.raises(KeyError, match="no fp32 island named 'tests.nothing'"), islands_disabled("tests.nothing"):
            pass
    finally:
        ISLANDS.pop("tests.matmul", None)


# -- every sensitive term on a real model batch --------------------------------------------------------------
# (model overrides, how to get its terms): every latent module and every regularizer with a sensitive term
TERM_CASES = {
    "tripod (klm, nhp, fixed grid)": ["model=tripod"],
    "tripod_naive (vanilla hp)": ["model=tripod_naive"],
    "qlae (quantizer distances, commitment)": ["model=qlae"],
    "vqvae (codebook distances)": ["model=vqvae"],
    "betavae (gaussian kl)": ["model=betavae"],
    "betatcvae (log-density table)": ["model=betatcvae"],
    "bioae": ["model=bioae"],
    "factorqvae (gumbel, tc logits)": ["model=factorqvae"],
    "dvae_friede (categorical softmax, kl)": ["model=dvae_friede"],
    "dip_vae_ii_friede": ["model=dip_vae_ii_friede"],
    "annealed_vae_friede": ["model=annealed_vae_friede"],
    "betavae + cliff": ["model=betavae", "+regularizer=cliff"],
    "betavae + hfs": ["model=betavae", "+regularizer=hfs"],
    "ae + ioss": ["model=ae", "+regularizer=ioss"],
    "vae_friede + supervision (bce)": ["model=vae_friede", "+regularizer=supervision"],
    "vae_friede + supervision (l2)": ["model=vae_friede", "+regularizer=supervision",
                                      "model.regularizers.supervision.loss=l2"],
    "dvae_friede + supervision (binned ce)": ["model=dvae_friede", "+regularizer=supervision"],
    "infowgan_gp (gradient penalty)": ["model=infowgan_gp"],
    "qlinfowgan_gp": ["model=qlinfowgan_gp"],
}
# Terms that may be computed in bf16 under autocast, by design (an fp32 island there did not earn its place,
# docs/precision.md): Cliff's bivariate term (its einsum), the TC discriminator's estimate (its logits) and DIP-VAE's
# penalty (its covariance; DIP-VAE-II adds float32 variances). Every other term is float32: elementwise on the latent
# island's float32 output, or a loss that autocast computes in float32.
BF16_TERMS = {"biv", "adv_tc", "dip"}
DATA = ProceduralDataModule("shapes2d", resolution=32, eval_size=10)


def _model(overrides, resolution=32, batch=32, seed=0):
    cfg = compose_config(["experiment=quickstart", f"data.resolution={resolution}", f"model.batch_size={batch}",
                          *overrides])
    torch.manual_seed(seed)
    model = instantiate(cfg.model, in_channels=3, resolution=resolution, dataset_size=10_000)
    if any(reg.needs_data for reg in model.regularizers.values()):  # the labelled examples a Trainer's setup draws
        model.attach_data(DATA)
    return model.train()


def _batch(n, seed=2):
    """A real batch: ``n`` shapes2d images (32 x 32) drawn with ``seed``."""
    return DATA.gather(torch.randperm(DATA.num_samples, generator=torch.Generator().manual_seed(seed))[:n])[0].float()


def _raw_terms(model, x, precision, disabled=()):
    torch.manual_seed(1)  # the same noise (samples, directions, interpolation weights) in every run
    for reg in model.regularizers.values():  # the same labelled batch in every run
        if hasattr(reg, "steps"):
            reg.steps.zero_()
    with islands_disabled(*disabled), autocast_for(precision, "cpu"):
        return model.loss_terms(x)[0] if hasattr(model, "loss_terms") else model.critic_terms(x)[0]


def _terms(model, x, precision, disabled=()):
    return {name: float(value.detach()) for name, value in _raw_terms(model, x, precision, disabled).items()}


# |bf16 - fp32| <= 2e-2 |fp32|, relative to each term (no absolute part: QLAE's commitment is 1e-3, the TC estimate
# 1e-3): the networks' own bf16 rounding (8 significant bits) moves every term of these models by at most 8.5e-3 of
# itself here (QLInfoWGAN's quantizer terms, which read the bf16 critic trunk's features; then HFS, 5.3e-3).
TERM_TOLERANCE = 2e-2


@pytest.mark.parametrize("case", list(TERM_CASES))
def test_each_sensitive_term_under_bf16_autocast_equals_its_float32_value(case):
    model = _model(TERM_CASES[case])
    x = _batch(32)
    fp32, raw = _terms(model, x, "32-true"), _raw_terms(model, x, BF16)
    assert fp32.keys() == raw.keys()
    for name, value in fp32.items():
        mixed = float(raw[name].detach())
        assert name in BF16_TERMS or raw[name].dtype == torch.float32, (case, name, raw[name].dtype)
        assert abs(mixed - value) <= TERM_TOLERANCE * abs(value), f"{case}: {name} fp32 {value} vs bf16 {mixed}"


def test_the_tc_discriminator_is_the_network_itself_with_or_without_replaced_parameters():
    model = _model(["model=factorqvae"])
    samples = model.encode(_batch(32)).sample.detach()
    net = model.regularizers["tc_discriminator"].discriminator
    frozen = {name: p.detach() for name, p in net.named_parameters()}
    assert torch.equal(discriminator_logits(net, samples), net(samples))
    assert torch.equal(discriminator_logits(net, samples, frozen), net(samples))


# -- every fp32 island earns its place -------------------------------------------------------------------------
# Every module of the package imported: ISLANDS then lists every island, and each must have a case below.
for _module in pkgutil.walk_packages(disentangle.__path__, "disentangle."):
    importlib.import_module(_module.name)

# island -> (model overrides, the island's own term, what is compared, tolerance relative to it). "value": the
# term; "gradient": the term's gradient with respect to every trained parameter (L2 norm of the difference over the
# norm of float32's). Each tolerance lies between the relative error under bf16 autocast with the island and without
# it, for the model and batch below (seed 0) and for four other seeds of both; the comments give the ranges over the
# five (docs/precision.md) and why the term needs float32.
ISLAND_CASES = {
    # Friede et al.'s categorical KL to the uniform prior, 0.06 nats over 10 near-uniform latents: a sum of
    # q log(q m) over nearly equal probabilities. From a bf16 softmax it is 33-41% off; in the island 1.6e-4-7.1e-4
    # (the encoder's own rounding).
    "models.base.LatentModel.run_latent": (["model=dvae_friede"], "kl", "value", 1e-2),
    # (||grad C|| - 1)^2 pins the critic's input-gradient norm through its gradient: with a bf16 critic pass and input
    # gradient the penalty's gradient is 5.6e-3-8.9e-3 off; in the island 8.2e-4-1.8e-3 (the fake images' and the
    # trunk's bf16 rounding). Its value is not a check: 1.5e-4-4.1e-3 off without, 1.2e-5-8.1e-4 with, overlapping.
    "models.gan.InfoWGAN.gradient_penalty_at": (["model=infowgan_gp"], "gradient_penalty", "gradient", 3e-3),
    # Second differences of decoder activations divided by eps^2: from bf16 activations NHP measures rounding noise
    # (11-29% off, its gradient 100%); in the island 2.9e-4-2.7e-3.
    "regularizers.nhp.NormalizedHessianPenalty.forward": (["model=tripod"], "nhp", "value", 2e-2),
}


def _measured(model, x, term, measure, precision, disabled=()):
    """The term (``measure="value"``) or its gradient with respect to every trained parameter, flattened."""
    value = _raw_terms(model, x, precision, disabled)[term]
    if measure == "value":
        return value.detach().double().reshape(1)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(value, params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten().double() for g, p in zip(grads, params)])


def test_the_kept_islands_are_the_registry_the_cases_and_the_docs_table():
    """One list (``KEPT_ISLANDS``): every island in it is registered once the package is imported (an island deleted
    with its registration fails here), has a case below, and is a row of docs/precision.md's table, and no other
    island is registered, measured or documented."""
    assert sorted(ISLANDS) == sorted(KEPT_ISLANDS), "registered vs KEPT_ISLANDS"
    assert sorted(ISLAND_CASES) == sorted(KEPT_ISLANDS), "ISLAND_CASES vs KEPT_ISLANDS"
    text = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    table = text[text.index("| island | term (model) |"):].split("\n\n")[0].splitlines()[2:]
    documented = [re.match(r"\| `([\w.]+)`", row).group(1) for row in table]
    assert documented == list(KEPT_ISLANDS), "docs/precision.md's island table vs KEPT_ISLANDS"


@pytest.mark.parametrize("island", sorted(set(ISLANDS) | set(KEPT_ISLANDS)))
def test_each_fp32_island_makes_its_term_right_under_bf16_where_it_is_wrong_without_it(island):
    """The mutation check: switching any one island off (and nothing else) makes its term's check fail. The islands
    are the registry's and the kept list's, so an island added without a case fails here, and so does a kept island
    deleted with its registration."""
    assert island in ISLANDS, f"fp32 island {island} is in KEPT_ISLANDS but nothing registers it (deleted?)"
    assert island in ISLAND_CASES and island in KEPT_ISLANDS, (
        f"fp32 island {island} has no case: add it to KEPT_ISLANDS and ISLAND_CASES with a case showing its term "
        f"wrong under bf16 without it, or remove the island")
    overrides, term, measure, tolerance = ISLAND_CASES[island]
    model = _model(overrides)
    x = _batch(32)
    fp32 = _measured(model, x, term, measure, "32-true")
    error_with, error_without = (float((_measured(model, x, term, measure, BF16, off) - fp32).norm() / fp32.norm())
                                 for off in ((), [island]))
    assert error_with <= tolerance < error_without, (island, measure, error_with, error_without)


# -- NHP against a decoder with a known Hessian ------------------------------------------------------------
class QuadraticDecoder(nn.Module):
    """a_d(z) = (w_d . z)^2: each activation's Hessian is 2 w_d w_d^T, so v'H_d v = 2 (w_d . v)^2 exactly and a
    central second difference is exact up to rounding."""

    activation_names = hessian_layers = ("square",)

    def __init__(self, n_z: int, width: int):
        super().__init__()
        self.linear = nn.Linear(n_z, width, bias=False)

    def forward(self, z, return_activations=False, until=None):
        h = self.linear(z)  # a bf16 product under autocast
        out = h * h
        return (out, {"square": out}) if return_activations else out


def _known_nhp(w: torch.Tensor, z: torch.Tensor, sigma: torch.Tensor, n_p: int) -> torch.Tensor:
    """The per-layer NHP (Var_v[v'Hv] / Var_w[w'Hw], mean over dimensions) of the quadratic decoder, from the
    directions NHP draws after ``torch.manual_seed(3)``, in float64."""
    torch.manual_seed(3)
    shape = (n_p, *z.shape)
    rademacher = torch.randint(0, 2, shape).to(z.dtype) * 2 - 1
    gauss = torch.randn(shape, dtype=z.dtype)
    directions = (torch.cat([rademacher, gauss]) * sigma).double()
    quad = 2 * (directions @ w.double().T) ** 2  # (2 n_p, B, D): v'H_d v
    numer, denom = quad[:n_p].var(0, unbiased=False), quad[n_p:].var(0, unbiased=False)
    return numer.mean(-1) / (denom.mean(-1) + 1e-10)


def test_nhp_under_bf16_autocast_matches_a_known_hessian_and_bf16_activations_would_not():
    torch.manual_seed(0)
    n_z, batch, n_p = 6, 16, 2
    decoder = QuadraticDecoder(n_z, 32)
    z = torch.randn(batch, n_z)
    sigma = batch_std(z)
    per_sample = _known_nhp(decoder.linear.weight.detach(), z, sigma, n_p)
    expected = per_sample.mean()
    reg = NormalizedHessianPenalty(weight=1.0, layers=["square"], n_perturbations=n_p)
    ctx = StepContext(x=torch.zeros(batch), pre=z, latent=LatentOutput(z=z, z_continuous=z), logits=None,
                      decoder=decoder)
    for precision in ("32-true", BF16):
        with autocast_for(precision, "cpu"):
            ctx.activations = decoder(z, return_activations=True)[1]
            torch.manual_seed(3)
            value = reg(ctx)["nhp"].detach()
        assert value.dtype == torch.float32
        assert abs(float(value) - float(expected)) <= 1e-3 * float(expected), (precision, float(value), expected)
    # the failure the island prevents: the same estimator from bf16 activations measures rounding noise
    with autocast_for(BF16, "cpu"):
        torch.manual_seed(3)
        raw = normalized_hessian_penalty(lambda s: decoder(s, return_activations=True)[1], z, sigma,
                                         decoder(z, return_activations=True)[1], ["square"], n_perturbations=n_p)
    error = ((raw.detach().double() - per_sample).abs() / per_sample).mean()
    assert error > 0.1, f"mean relative error of the per-sample NHP from bf16 activations: {float(error):.3f}"


# -- the quickstarts under trainer.precision=bf16-mixed ----------------------------------------------------
QUICKSTARTS = ("tripod", "qlae", "betavae", "betatcvae", "factorqvae", "dvae_friede", "infowgan_gp")
SHORT = ["trainer.max_steps=3", "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
         "trainer.enable_model_summary=false", "~callbacks.progress", "print_summary=false",
         "callbacks.evaluation.metrics=[infomec]", "callbacks.evaluation.n_samples=256",
         "callbacks.evaluation.figures=false", "callbacks.evaluation.progress=false", "data.eval_size=256"]


def _logged(run_dir: Path) -> list[dict[str, float]]:
    (path,) = run_dir.rglob("metrics.csv")
    rows = [{k: float(v) for k, v in row.items() if v and k.startswith("train/") and k != "train/loss"}
            for row in csv.DictReader(path.open())]
    return [row for row in rows if row]


@pytest.mark.parametrize("model", QUICKSTARTS)
def test_a_quickstarts_first_logged_terms_under_bf16_mixed_are_close_to_float32s(model, tmp_path):
    logged = {}
    for precision in ("32-true", BF16):
        out = tmp_path / precision
        train(compose_config(["experiment=quickstart", f"model={model}", f"trainer.precision={precision}", *SHORT],
                             output_dir=out))
        logged[precision] = _logged(out)
        record = json.loads((out / "metrics.json").read_text())
        assert record["precision"] == precision
        ckpt = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)
        assert ckpt["disentangle_config"]["trainer"]["precision"] == precision
    fp32, bf16 = logged["32-true"], logged[BF16]
    assert len(fp32) == len(bf16) == 3
    # step 0: the same weights and batch; only the networks' bf16 rounding differs
    for name, value in fp32[0].items():
        if name.endswith("accuracy"):
            continue
        assert abs(bf16[0][name] - value) <= 2e-2 * abs(value) + 2e-3, f"step 0 {name}: {value} vs {bf16[0][name]}"
    # the next steps: the weights now differ by Adam's first (sign-like) steps; the terms stay near fp32's
    for name in fp32[0]:
        a, b = (sum(row[name] for row in rows) / 3 for rows in (fp32, bf16))
        assert abs(b - a) <= 0.15 * abs(a) + 5e-3, f"{name}: mean of 3 steps {a} vs {b}"


# -- what cannot run, refused in one line before any work --------------------------------------------------
def test_auto_precision_is_float32_on_the_cpu_and_unknown_values_name_the_choices():
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("bf16", "cpu") == BF16
    with pytest.raises(ConfigError, match=r"trainer.precision='bf16-true' is not supported; choose one of"):
        resolve_precision("bf16-true", "cpu")


def test_16_mixed_on_a_cpu_names_bf16_mixed_and_an_adversarial_model_refuses_16_mixed():
    with pytest.raises(ConfigError, match="on the CPU use trainer.precision=bf16-mixed"):
        resolve_precision("16-mixed", "cpu")
    with pytest.raises(ConfigError, match="several optimizer updates per step"):
        resolve_precision("16-mixed", "gpu", updates_per_step=2)
    cfg = compose_config(["experiment=quickstart", "model=factorqvae", "trainer.precision=16-mixed"])
    with pytest.raises(ConfigError, match="16-mixed needs a CUDA GPU"):
        build(cfg)


def test_the_cli_refuses_16_mixed_on_a_cpu_in_one_line(tmp_path):
    res = run_cli("experiment=quickstart", "trainer.precision=16-mixed", f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "trainer.precision=bf16-mixed" in lines[-1]
    assert not list((tmp_path / "run").rglob("*.ckpt")) and not list((tmp_path / "run").rglob("metrics.csv"))


def test_bench_steps_times_fp32_and_bf16_interleaved_and_prints_their_ratio(capsys):
    from disentangle.bench import main

    main(["steps", "--device", "cpu", "--precision", BF16, "--only", "betavae_friede", "--repeats", "1",
          "--batch-size", "8"])
    lines = capsys.readouterr().out.splitlines()
    assert "32-true vs bf16-mixed" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"qlae", "betavae_friede"}  # QLAE, the baseline, always runs
    for cells in rows.values():  # label, fp32 s, "s", bf16 s, "s", ratio
        fp32, mixed, ratio = float(cells[1]), float(cells[3]), float(cells[5].rstrip("x"))
        assert fp32 > 0 and mixed > 0
        # the seconds are printed to 3 decimals (±5e-4) and the ratio, of the unrounded medians, to 2 (±5e-3):
        # ~20 ms steps leave only two significant digits, so the ratio is checked against the interval they allow
        low, high = (fp32 - 5e-4) / (mixed + 5e-4), (fp32 + 5e-4) / (mixed - 5e-4)
        assert low - 5e-3 <= ratio <= high + 5e-3


def test_bench_steps_refuses_16_mixed_on_a_cpu_naming_bf16_mixed(capsys):
    from disentangle.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(["steps", "--device", "cpu", "--precision", "16-mixed"])
    assert exit_info.value.code == 2
    assert "use trainer.precision=bf16-mixed" in capsys.readouterr().err
