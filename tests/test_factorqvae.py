"""The FactorQVAE family (spec factorqvae.md): Gumbel-softmax quantizers, the adversarial TC discriminator, the
DALL-E-style networks, the lr schedule and the manual optimisation that trains a discriminator beside the model."""
import copy
import math

import pytest
import torch
from conftest import CONF, FAST, MODELS, compose_config
from hydra.utils import instantiate

from disentangle.nn import DalleDecoder, DalleEncoder
from disentangle.quantizers import GumbelQuantizer, categorical_kl_uniform, relaxed_one_hot
from disentangle.quantizers.base import LatentOutput
from disentangle.regularizers import (
    AdversarialTotalCorrelation,
    StepContext,
    discriminator_loss,
    permute_latents,
    tc_estimate,
)
from disentangle.regularizers.tc_discriminator import discriminator_net
from disentangle.runtime.run import build
from disentangle.foundation.schedules import cosine_factor


# -- Gumbel-softmax quantizers ------------------------------------------------------------------------------------
def test_relaxed_samples_lie_on_the_simplex_and_approach_one_hot_as_the_temperature_falls():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(256, 5, 16, generator=g)
    for tau in (2.0, 1.0, 0.3):
        y = relaxed_one_hot(logits, tau, generator=g)
        assert (y >= 0).all() and torch.allclose(y.sum(-1), torch.ones(256, 5))
    peak = [relaxed_one_hot(logits, tau, generator=g).max(-1).values.mean().item() for tau in (1.0, 0.1, 0.01)]
    assert peak[0] < peak[1] < peak[2] and peak[2] > 0.99


def test_relaxed_sample_picks_the_gumbel_max_code_when_cold():
    """At a tiny temperature the relaxed sample is the one-hot argmax of logits + Gumbel noise (Gumbel-max trick):
    its code frequencies match softmax(logits)."""
    logits = torch.log(torch.tensor([0.1, 0.2, 0.7])).expand(20000, 3)
    y = relaxed_one_hot(logits, 1e-3, generator=torch.Generator().manual_seed(1))
    freq = y.argmax(-1).bincount(minlength=3).float() / 20000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.7]), atol=0.015)


def test_categorical_kl_to_uniform_is_zero_for_uniform_and_log_k_for_one_hot():
    assert categorical_kl_uniform(torch.zeros(4, 64)).abs().max() < 1e-6
    one_hot = torch.full((4, 64), -1e4)
    one_hot[:, 3] = 0
    assert torch.allclose(categorical_kl_uniform(one_hot), torch.full((4,), math.log(64)), atol=1e-4)
    logits = torch.randn(3, 7)
    q = logits.softmax(-1)
    assert torch.allclose(categorical_kl_uniform(logits), (q * torch.log(7 * q)).sum(-1), atol=1e-6)


def test_qvae_logits_are_minus_the_distance_to_the_codebook_and_evaluation_takes_the_nearest_code():
    q = GumbelQuantizer(n_latents=3, codebook_size=8)
    pre = torch.randn(10, 3)
    squared = (pre.unsqueeze(-1) - q.codebook.detach().squeeze(-1)) ** 2
    assert torch.allclose(q.logits(pre), -squared, atol=1e-6)
    absolute = GumbelQuantizer(n_latents=3, codebook_size=8, distance="absolute")
    absolute.codebook.data.copy_(q.codebook.data)
    assert torch.allclose(absolute.logits(pre), -squared.sqrt(), atol=1e-5)
    q.eval()
    out = q(pre)
    assert torch.equal(out.indices, squared.argmin(-1)) and out.sample is None
    assert torch.equal(out.z, q.codebook.detach()[out.indices].squeeze(-1))
    assert torch.equal(q.representation(out), out.indices) and q.categorical and q.discrete


def test_qvae_training_sample_mixes_codebook_values_and_the_codebook_learns_through_it():
    q = GumbelQuantizer(n_latents=2, codebook_size=4, beta=0.5)
    pre = torch.randn(6, 2, requires_grad=True)
    out = q(pre)
    codes = out.sample.reshape(6, 2, 4)
    assert torch.allclose(out.z, (codes @ q.codebook).squeeze(-1))
    assert torch.allclose(out.losses["kl"], categorical_kl_uniform(q.logits(pre)).mean())
    assert q.weights == {"kl": 0.5} and not q.density_terms
    out.z.sum().backward()
    assert q.codebook.grad.abs().sum() > 0 and pre.grad.abs().sum() > 0


def test_dvae_takes_its_logits_from_the_encoder_and_evaluates_the_argmax():
    q = GumbelQuantizer(n_latents=3, codebook_size=5, logits="encoder")
    assert q.in_features == 15 and q.out_features == 3 and q.sample_features == 15
    pre = torch.randn(4, 15)
    assert torch.equal(q.logits(pre), pre.reshape(4, 3, 5))
    q.eval()
    assert torch.equal(q(pre).indices, pre.reshape(4, 3, 5).argmax(-1))


def test_vq_ablation_quantizes_code_vectors_and_keeps_the_discriminator_input_at_d_times_k():
    q = GumbelQuantizer(n_latents=3, codebook_size=64, code_dim=8)
    assert (q.in_features, q.out_features, q.sample_features) == (24, 24, 192)
    out = q(torch.randn(5, 24))
    assert out.z.shape == (5, 24) and out.sample.shape == (5, 192)


def test_temperature_follows_exp_minus_1e_5_t():
    q = GumbelQuantizer(n_latents=2)
    for step in (0, 1, 50_000, 100_000):
        q.schedule(step)
        assert q.temperature == pytest.approx(math.exp(-1e-5 * step))


@pytest.mark.parametrize("kwargs, message", [
    ({"codebook_size": 1}, "codebook_size must be an integer >= 2"),
    ({"initial_temperature": 0.0}, "initial_temperature must be > 0"),
    ({"temperature_decay": -1.0}, "temperature_decay must be a non-negative"),
    ({"logits": "nope"}, "logits must be one of"),
    ({"distance": "cosine"}, "distance must be one of"),
])
def test_gumbel_quantizer_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GumbelQuantizer(2, **kwargs)


# -- the adversarial TC discriminator ----------------------------------------------------------------------------
def test_permutation_moves_each_latents_block_as_a_whole_and_independently():
    b, n, k = 64, 3, 4
    samples = torch.arange(b * n * k, dtype=torch.float32).reshape(b, n * k)
    permuted = permute_latents(samples, n, generator=torch.Generator().manual_seed(0)).reshape(b, n, k)
    original = samples.reshape(b, n, k)
    rows = []
    for j in range(n):
        # every output row of latent j is a whole input row of latent j, and each input row is used once
        source = ((permuted[:, j, :1] - original[:, j, 0]).abs() < 0.5).float().argmax(1)
        assert torch.equal(permuted[:, j], original[source, j]) and source.unique().numel() == b
        rows.append(source)
    assert not torch.equal(rows[0], rows[1])  # independent permutations


def test_discriminator_loss_and_tc_estimate_follow_their_definitions():
    joint, permuted = torch.randn(8, 2), torch.randn(8, 2)
    expected = -0.5 * (joint.log_softmax(1)[:, 0].mean() + permuted.log_softmax(1)[:, 1].mean())
    assert torch.allclose(discriminator_loss(joint, permuted), expected)
    p = joint.softmax(1)[:, 0]
    assert torch.allclose(tc_estimate(joint), torch.log(p / (1 - p)), atol=1e-5)


def fit_discriminator(samples_fn, steps=300, seed=0):
    torch.manual_seed(seed)
    reg = AdversarialTotalCorrelation(weight=1.0, negatives="same_batch", hidden=64, layers=3)
    reg.n_latents = 4
    from disentangle.regularizers.tc_discriminator import discriminator_net

    reg.discriminator = discriminator_net(4, 64, 3)
    optimizer, _ = reg.configure_optimizer()
    for _ in range(steps):
        z = samples_fn(256)
        ctx = StepContext(x=None, pre=z, latent=LatentOutput(z=z, z_continuous=z, sample=z), logits=None)
        reg.discriminator_step(None, ctx, None, optimizer)
    z = samples_fn(4096)
    with torch.no_grad():
        return tc_estimate(reg.discriminator(z)).mean().item()


def test_the_discriminator_finds_no_total_correlation_in_independent_latents_and_some_in_correlated_ones():
    independent = fit_discriminator(lambda n: torch.randn(n, 4))
    correlated = fit_discriminator(lambda n: torch.randn(n, 1).repeat(1, 4) + 0.1 * torch.randn(n, 4))
    assert abs(independent) < 0.2
    assert correlated > 1.0


def test_tc_regularizer_needs_a_sampled_latent_and_sizes_its_discriminator_from_it():
    cfg = compose_config(["model=factorqvae", "model/arch=small", "data=shapes2d"])
    net = instantiate(cfg.model, in_channels=3, resolution=16)
    first = net.regularizers["tc_discriminator"].discriminator[0]
    assert first.in_features == 12 * 64 and net.split_batch
    cfg = compose_config(["model=factorvae", "model/arch=small", "data=shapes2d"])
    assert instantiate(cfg.model, in_channels=3, resolution=16).regularizers["tc_discriminator"].discriminator[0].in_features == 12


def small_factorqvae(tmp_path, *extra):
    cfg = compose_config(FAST + ["model=factorqvae", "data=shapes2d", *extra], output_dir=tmp_path)
    return build(cfg)


def test_the_model_step_does_not_move_the_discriminator_and_its_step_does_not_move_the_model(tmp_path):
    job = small_factorqvae(tmp_path)
    model = job.model
    main, disc = model.configure_optimizers()[0]
    d_params = list(model.regularizers["tc_discriminator"].parameters())
    main_ids = {id(p) for group in main.param_groups for p in group["params"]}
    assert not main_ids & {id(p) for p in d_params}
    assert {id(p) for group in disc.param_groups for p in group["params"]} == {id(p) for p in d_params}

    def snapshot(params):
        return [p.detach().clone() for p in params]

    model_params = [p for group in main.param_groups for p in group["params"]]
    x, _ = job.datamodule.gather(torch.arange(32))
    d_before, m_before = snapshot(d_params), snapshot(model_params)
    model.optimization_step(x, [main])  # the model's update only
    assert all(torch.equal(a, b) for a, b in zip(d_before, d_params))
    assert all(p.grad is None for p in d_params)  # D enters the model's loss as a constant
    assert any(not torch.equal(a, b) for a, b in zip(m_before, model_params))

    m_before = snapshot(model_params)
    _, _, ctx = model.step_terms(x[:16])
    logs = model.regularizers["tc_discriminator"].discriminator_step(model, ctx, x[16:], disc)
    assert all(torch.equal(a, b) for a, b in zip(m_before, model_params))
    assert any(not torch.equal(a, b) for a, b in zip(d_before, d_params))
    assert set(logs) == {"disc_loss", "disc_accuracy"}


def test_a_checkpoint_round_trip_restores_both_optimizers_and_the_schedules(tmp_path):
    import pytorch_lightning as pl

    job = small_factorqvae(tmp_path / "a", "trainer.max_steps=3", "callbacks.checkpoint.every_n_train_steps=3",
                           "callbacks.evaluation.every_n_steps=0", "model.optimizer.schedule.steps=5")
    job.trainer.fit(job.model, datamodule=job.datamodule)
    path = tmp_path / "a" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    assert len(ckpt["optimizer_states"]) == 2 and len(ckpt["lr_schedulers"]) == 2
    assert ckpt["global_step"] == 3  # the discriminator's steps are not counted

    seen = {}

    class Capture(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            # copies: the live state moves on with the next step
            seen["optimizers"] = [copy.deepcopy(opt.state_dict()) for opt in trainer.optimizers]
            seen["schedulers"] = [copy.deepcopy(cfg.scheduler.state_dict()) for cfg in trainer.lr_scheduler_configs]
            seen["disc"] = {k: v.clone() for k, v in pl_module.regularizers.state_dict().items()}
            seen["step"] = trainer.global_step

    resumed = small_factorqvae(tmp_path / "b", "trainer.max_steps=4", "callbacks.evaluation.every_n_steps=0",
                               "model.optimizer.schedule.steps=5")
    resumed.trainer.callbacks.append(Capture())
    resumed.trainer.fit(resumed.model, datamodule=resumed.datamodule, ckpt_path=str(path))
    assert seen["step"] == 3
    for restored, saved in zip(seen["optimizers"], ckpt["optimizer_states"]):
        assert restored["state"].keys() == saved["state"].keys()
        for key, state in saved["state"].items():
            assert torch.equal(restored["state"][key]["exp_avg"], state["exp_avg"])
            assert restored["state"][key]["step"] == 3
    assert [s["last_epoch"] for s in seen["schedulers"]] == [s["last_epoch"] for s in ckpt["lr_schedulers"]] == [3, 3]
    for key, value in seen["disc"].items():
        assert torch.equal(value, ckpt["state_dict"][f"regularizers.{key}"])


def test_temperature_is_read_from_the_global_step_during_training(tmp_path):
    job = small_factorqvae(tmp_path, "trainer.max_steps=3", "model.latent.temperature_decay=0.1",
                           "callbacks.evaluation.every_n_steps=0")
    job.trainer.fit(job.model, datamodule=job.datamodule)
    assert job.model.latent.temperature == pytest.approx(math.exp(-0.1 * 2))  # set before the third (last) batch


# -- protocol pieces ---------------------------------------------------------------------------------------------
def test_cosine_schedule_decays_to_the_final_lr_then_holds_or_cycles():
    ratio = 1.25e-6 / 1e-3
    assert cosine_factor(0, 50_000, ratio) == pytest.approx(1.0)
    assert cosine_factor(25_000, 50_000, ratio) == pytest.approx((1 + ratio) / 2)
    assert cosine_factor(50_000, 50_000, ratio) == pytest.approx(ratio)
    assert cosine_factor(90_000, 50_000, ratio, "hold") == pytest.approx(ratio)
    assert cosine_factor(100_000, 50_000, ratio, "periodic") == pytest.approx(1.0)  # torch's CosineAnnealingLR


def test_mse_models_decode_centred_images():
    cfg = compose_config(["model=ae_fq", "model/arch=small", "data=shapes2d"])
    net = instantiate(cfg.model, in_channels=3, resolution=16)
    x = torch.rand(4, 3, 16, 16)
    out = net.decode(net.encode(x).z)
    assert torch.allclose(net.reconstruction_loss(out, x), ((out - (x - 0.5)) ** 2).mean())
    assert torch.allclose(net.embed(x)[1], out + 0.5)


def test_dalle_networks_follow_the_authors_code():
    enc, dec = DalleEncoder(3, 64, 12), DalleDecoder(12, 3, 64)
    assert enc.dense[1].in_features == 512 * 16 * 16  # no pooling after the last group: a 131072 -> 128 layer
    assert dec.dense.out_features == 64 * 16 * 16  # the seed: 64 channels at 16 x 16 (spec A6)
    weights = [m.weight for m in enc.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert all(m.bias is None or (m.bias == 0).all() for m in enc.modules() if isinstance(m, torch.nn.Conv2d))
    assert torch.cat([w.flatten() for w in weights]).std().item() == pytest.approx(0.02, rel=0.05)
    x = torch.rand(2, 3, 64, 64)
    z = enc(x)
    logits, acts = dec(z, return_activations=True)
    assert z.shape == (2, 12) and logits.shape == (2, 3, 64, 64)
    assert acts["block0"].shape == (2, 512, 32, 32) and dec.hessian_layers == ("cond", "block0")
    assert dec(z, until=("cond", "block0"))[0] is None
    with pytest.raises(ValueError, match="divisible by 4"):
        DalleEncoder(3, 30, 12)


def test_interventions_step_through_a_scalar_codebook_by_value():
    q = GumbelQuantizer(n_latents=1, codebook_size=5)
    q.codebook.data = torch.tensor([[0.3], [-1.0], [2.0], [0.0], [-0.5]])
    assert q.order_codes(torch.tensor([0, 1, 2, 3, 4])).tolist() == [1, 4, 3, 0, 2]
    assert GumbelQuantizer(1, codebook_size=5, code_dim=2).order_codes(torch.tensor([3, 1])).tolist() == [3, 1]


@pytest.mark.parametrize("model", [m for m in MODELS if "tc_discriminator" in
                                   (CONF / "model" / f"{m}.yaml").read_text()])
def test_each_papers_tc_discriminator_has_its_authors_depth(model):
    """FactorQVAE's authors: Linear(D_in, 1000) + 4 x Linear(1000, 1000), then Linear(1000, 2) (spec factorqvae.md
    §3.3); Friede et al. / disentanglement_lib: 6 x FC(1000), then FC(2) (categorical_vae.md §5)."""
    cfg = compose_config([f"model={model}", "data=shapes3d"]).model.regularizers.tc_discriminator
    reg = instantiate(cfg)
    net = discriminator_net(40, reg.hidden, reg.layers, reg.negative_slope)
    linear = [m for m in net if isinstance(m, torch.nn.Linear)]
    assert len(linear) == (7 if model.endswith("_friede") else 6), model
    assert all(m.out_features == 1000 for m in linear[:-1]) and linear[-1].out_features == 2
