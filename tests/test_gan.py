"""InfoWGAN-GP / QLInfoWGAN-GP (QLAE paper Alg. 3; spec qlae.md §4.7, §5.1, §5.3): the gradient penalty's known
answers, the n_critic:1 schedule, which parameters each update moves, the weight-decay groups, the latent
reconstruction term, end-to-end runs through Hydra and the Lightning Trainer, checkpoint resume, bad input."""
import copy
import json
import math

import pytest
import pytorch_lightning as pl
import torch
from conftest import FAST, FIGURES, compose_config
from hydra.utils import instantiate
from torch import nn

from disentangle.errors import ConfigError, NonFiniteLossError
from disentangle.models import InfoWGAN
from disentangle.models.gan import gradient_penalty, sample_prior
from disentangle.quantizers import ContinuousLatent, GaussianLatent, LatentQuantizer
from disentangle.runtime.run import build, train

GANS = ("infowgan_gp", "qlinfowgan_gp", "qlinfowgan_gp_no_wd")
SUMMARY = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


def small_gan(model="qlinfowgan_gp", *overrides):
    """The model of a config on tiny small networks, for 16x16 images."""
    cfg = compose_config([f"model={model}", "data=shapes3d", "model/arch=small", "model.arch.encoder.width=4",
                          "model.arch.decoder.width=4", "model.arch.encoder.hidden=32",
                          "model.arch.decoder.hidden=32", *overrides])
    return instantiate(cfg.model, in_channels=3, resolution=16)


# -- the configs (spec §6.1 Table 10, §6.2) ------------------------------------------------------------------
def test_configs_carry_the_paper_protocol_and_the_authors_per_dataset_weight_decay():
    chosen = {"infowgan_gp": {"isaac3d": 1e-4},  # 1e-4 everywhere (the config's default)
              "qlinfowgan_gp": {"shapes3d": 1e-3, "mpi3d": 1e-3, "falcor3d": 1e-4, "isaac3d": 1e-3},
              "qlinfowgan_gp_no_wd": {"isaac3d": 0.0}}
    for model, per_data in chosen.items():
        for data, decay in per_data.items():
            cfg = compose_config([f"model={model}", f"data={data}"]).model
            assert cfg.optimizer.weight_decay == pytest.approx(decay), (model, data)
        assert (cfg.batch_size, cfg.n_critic, cfg.optimizer.lr, list(cfg.optimizer.betas)) == (64, 5, 2e-4, [0, 0.9])
        assert (cfg.value_weight, cfg.gradient_penalty_weight, cfg.latent_weight) == (1, 10, 200)
        assert cfg.n_latents == 18 and cfg.arch.encoder._target_.endswith("ConvEncoder")  # isaac3d: 2 x 9 sources
        if model != "infowgan_gp":
            assert (cfg.latent.n_values, cfg.latent.quantize_weight, cfg.latent.commit_weight) == (10, 0.01, 0.01)


# -- gradient penalty (spec §4.7) ---------------------------------------------------------------------------
def test_gradient_penalty_is_zero_for_a_unit_norm_linear_critic_and_matches_hand_computed_values():
    torch.manual_seed(0)
    x_real, x_fake = torch.rand(5, 3, 4, 4), torch.rand(5, 3, 4, 4)
    w = torch.randn(3, 4, 4)
    unit = w / w.norm()

    def linear(scale):
        return lambda x: (x * (scale * unit)).sum((1, 2, 3))

    assert gradient_penalty(linear(1.0), x_real, x_fake).item() == pytest.approx(0.0, abs=1e-10)
    assert gradient_penalty(linear(3.0), x_real, x_fake).item() == pytest.approx(4.0)  # (3 - 1)^2, any epsilon

    # C(x) = ||x||^2 / 2 has gradient x: the penalty is mean_i (||x~_i|| - 1)^2 at x~ = e x_real + (1 - e) x_fake
    eps = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    expected = sum((math.sqrt(float(((e * a + (1 - e) * b) ** 2).sum())) - 1) ** 2
                   for e, a, b in zip(eps.tolist(), x_real, x_fake)) / 5
    value = gradient_penalty(lambda x: 0.5 * x.pow(2).sum((1, 2, 3)), x_real, x_fake, epsilon=eps)
    assert value.item() == pytest.approx(expected, rel=1e-5)

    # differentiable in the critic's parameters: d/dw (||w|| - 1)^2 = 2 (||w|| - 1) w / ||w||
    weight = (2.0 * unit).clone().requires_grad_(True)
    gradient_penalty(lambda x: (x * weight).sum((1, 2, 3)), x_real, x_fake).backward()
    assert torch.allclose(weight.grad, 2 * (2.0 - 1) * unit, atol=1e-6)


# -- priors (spec §3.1, §3.4) -----------------------------------------------------------------------------
def test_prior_samples_lie_on_the_codebook_and_in_the_unit_cube_and_other_latents_are_refused():
    quantizer = LatentQuantizer(n_latents=4)
    with torch.no_grad():
        quantizer.values.mul_(torch.arange(1, 5.0)[:, None])  # a different codebook per dimension
    z = sample_prior(quantizer, 500)
    for j in range(4):
        on_book = (z[:, j, None] == quantizer.values[j]).any(1)
        assert on_book.all() and len(z[:, j].unique()) == 10  # every value drawn, only codebook values
    z.sum().backward()
    assert quantizer.values.grad.sum() == 500 * 4  # a gather: every draw sends gradient to its codebook value
    z = sample_prior(ContinuousLatent(n_latents=3), 2000)
    assert z.shape == (2000, 3) and 0 <= z.min() and z.max() < 1 and abs(z.mean().item() - 0.5) < 0.03
    with pytest.raises(ValueError, match="GaussianLatent has no prior"):
        sample_prior(GaussianLatent(n_latents=3), 4)


def test_interventions_start_from_a_fixed_prior_draw_or_by_option_from_the_data():
    """Spec qlae.md §9.1 item 6: the authors' GAN figures intervene on prior samples."""
    model = small_gan("qlinfowgan_gp")
    x = torch.rand(1, 3, 16, 16)
    state = torch.get_rng_state()
    base = model.intervention_base(x)
    assert torch.equal(torch.get_rng_state(), state)                  # seeded without touching the global stream
    assert torch.equal(base, model.intervention_base(x)) and base.shape == (1, model.n_latents)
    assert all((base[0, j] == model.latent.values[j]).any() for j in range(model.n_latents))   # on the codebook
    assert not torch.equal(base, model.embed(x)[0])
    data = small_gan("qlinfowgan_gp", "model.intervene_on=data")
    data.load_state_dict(model.state_dict())
    assert torch.equal(data.intervention_base(x), model.embed(x)[0])


# -- the schedule and what each update moves (spec §5.3, Alg. 3) --------------------------------------------
def test_the_generator_updates_once_per_n_critic_iterations_and_each_update_moves_only_its_own_parameters():
    torch.manual_seed(0)
    model = small_gan("qlinfowgan_gp", "model.n_critic=3")  # 9 iterations: generator updates after 3, 6, 9
    critic_opt, generator_opt = model.configure_optimizers()[0]
    counts = {"critic": [], "generator": []}
    for key, opt in (("critic", critic_opt), ("generator", generator_opt)):
        opt.register_step_post_hook(lambda *_, key=key: counts[key].append(iteration))
    critic_side = [*model.encoder.parameters(), *model.critic.parameters()]
    generator_side = [*model.decoder.parameters(), model.latent.values]
    x = torch.rand(8, 3, 16, 16)
    for iteration in range(9):
        before = [p.detach().clone() for p in critic_side + generator_side]
        model.optimization_step(x, [critic_opt, generator_opt])
        moved = [not torch.equal(b, p) for b, p in zip(before, critic_side + generator_side)]
        critic_moved, generator_moved = moved[: len(critic_side)], moved[len(critic_side):]
        assert any(critic_moved)
        if (iteration + 1) % 3:  # encoder/critic update only: the generator and the codebook stay put
            assert not any(generator_moved)
        else:
            assert any(generator_moved) and not torch.equal(before[-1], model.latent.values)
    assert counts["critic"] == list(range(9))
    assert counts["generator"] == [2, 5, 8]  # after every third encoder/critic update



# -- parameter groups (spec §5.1) ---------------------------------------------------------------------------
def expected_groups(model):
    """§5.1 by module type: kernels, weight matrices (critic head included), norm scales and the generator's
    constant are decayed; biases, norm shifts and the codebook are not."""
    decayed, undecayed = set(), set()
    for module in model.modules():
        own = dict(module.named_parameters(recurse=False))
        if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear, nn.GroupNorm)):
            decayed |= {id(own["weight"])} if "weight" in own else set()
            undecayed |= {id(own["bias"])} if "bias" in own else set()
    decayed.add(id(model.decoder.const))
    undecayed.add(id(model.latent.values))
    return decayed, undecayed


@pytest.mark.parametrize("name, decay", [("qlinfowgan_gp", 1e-3), ("qlinfowgan_gp_no_wd", 0.0)])
def test_weight_decay_groups_follow_the_spec_and_each_optimizer_holds_its_side(name, decay):
    cfg = compose_config([f"model={name}", "data=shapes3d"])  # the paper networks
    model = instantiate(cfg.model, in_channels=3, resolution=16)
    decayed, undecayed = expected_groups(model)
    assert decayed | undecayed == {id(p) for p in model.parameters()} and not decayed & undecayed
    critic_opt, generator_opt = model.configure_optimizers()[0]
    sides = {"critic": {id(p) for m in (model.encoder, model.critic) for p in m.parameters()},
             "generator": {id(p) for m in (model.decoder, model.latent) for p in m.parameters()}}
    for side, opt in (("critic", critic_opt), ("generator", generator_opt)):
        groups = {g["name"]: g for g in opt.param_groups}
        assert {id(p) for g in opt.param_groups for p in g["params"]} == sides[side]
        assert {id(p) for p in groups["decayed"]["params"]} == decayed & sides[side]
        assert {id(p) for p in groups["undecayed"]["params"]} == undecayed & sides[side]
        assert groups["decayed"]["weight_decay"] == pytest.approx(decay) and groups["undecayed"]["weight_decay"] == 0
        assert groups["decayed"]["lr"] == pytest.approx(2e-4) and groups["decayed"]["betas"] == (0.0, 0.9)
    assert id(model.critic.linear.weight) in decayed and id(model.critic.linear.bias) in undecayed
    assert any(id(p) == id(model.latent.values) for p in generator_opt.param_groups[1]["params"])


# -- the latent reconstruction term (spec §4.7) -------------------------------------------------------------
class PixelGenerator(nn.Module):
    """Writes z into the first n_z pixels: logit(offset + scale·z), so that sigmoid gives back offset + scale·z."""

    def __init__(self, in_features, out_channels, resolution, offset=0.0, scale=1.0):
        super().__init__()
        self.shape, self.offset, self.scale = (out_channels, resolution, resolution), offset, scale
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, z):
        logits = torch.zeros(z.shape[0], math.prod(self.shape))
        logits[:, : z.shape[1]] = torch.logit(self.offset + self.scale * z * self.gain, eps=0)
        return logits.reshape(-1, *self.shape)


class PixelEncoder(nn.Module):
    """Reads the first n_z pixels back as (x - offset) / scale, then an identity Linear head."""

    def __init__(self, in_channels, resolution, out_features, offset=0.0, scale=1.0):
        super().__init__()
        self.n, self.offset, self.scale = out_features, offset, scale
        self.head = nn.Linear(out_features, out_features)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(out_features))
            self.head.bias.zero_()

    def forward_features(self, x):
        return (x.flatten(1)[:, : self.n] - self.offset) / self.scale

    def forward(self, x):
        return self.head(self.forward_features(x))


def inverse_pair(latent, offset, scale):
    def make(cls):
        return lambda **kw: cls(**kw, offset=offset, scale=scale)

    return InfoWGAN(arch={"encoder": make(PixelEncoder), "decoder": make(PixelGenerator)}, latent=latent,
                    n_latents=3, in_channels=1, resolution=4)


@pytest.mark.parametrize("quantized", [False, True])
def test_latent_reconstruction_is_zero_when_the_encoder_inverts_the_generator_and_positive_otherwise(quantized):
    torch.manual_seed(0)
    if quantized:  # codebook values in [-0.5, 0.5] -> pixels in [0.25, 0.75]
        model = inverse_pair(LatentQuantizer, offset=0.5, scale=0.5)
        z_fake = sample_prior(model.latent, 16).detach()
    else:
        model = inverse_pair(ContinuousLatent, offset=0.0, scale=1.0)
        z_fake = 0.05 + 0.9 * torch.rand(16, 3)
    x_real = torch.rand(16, 1, 4, 4)
    for terms in (model.critic_terms(x_real, z_fake=z_fake)[0], model.generator_terms(16, z_fake=z_fake)[0]):
        assert terms["latent"].item() < 1e-12
        if quantized:
            assert terms["quantize"].item() < 1e-12 and terms["commit"].item() < 1e-12
    with torch.no_grad():
        model.encoder.head.weight.mul_(0.5)  # now the encoder recovers z / 2 (before quantization)
    terms = model.generator_terms(16, z_fake=z_fake)[0]
    if quantized:
        assert terms["latent"].item() > 1e-3
    else:  # MSE(z/2, z) = mean(z^2) / 4
        assert terms["latent"].item() == pytest.approx(z_fake.pow(2).mean().item() / 4, rel=1e-5)


# -- end to end: Hydra config + Lightning Trainer ------------------------------------------------------------
@pytest.mark.parametrize("model", GANS)
def test_each_gan_trains_from_the_config_and_writes_metrics(model, tmp_path):
    cfg = compose_config(FAST + [FIGURES, f"model={model}", "data=shapes2d", "model.n_critic=2",
                                 "callbacks.evaluation.every_n_steps=0"], output_dir=tmp_path)
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["method"] == model and record["discrete_latents"] == (model != "infowgan_gp")
    for key in SUMMARY:
        assert math.isfinite(record[key]) and record[key] == pytest.approx(result[key]), key
    assert len(record["nmi"]) == 6 and len(record["nmi"][0]) == 12
    assert (tmp_path / "interventions.png").stat().st_size > 1000
    assert (tmp_path / "samples.png").stat().st_size > 1000  # generated images
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4  # encoder/critic updates; the generator's are not counted
    steps = [{int(s["step"]) for s in opt["state"].values()} for opt in ckpt["optimizer_states"]]
    assert steps == [{4}, {2}]  # 4 encoder/critic updates, 2 generator updates (n_critic = 2)
    assert ckpt["disentangle_config"]["model"]["name"] == model
    header = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "train/wasserstein" in header and "train/generator/loss" in header


@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # the resumed run writes to a directory of its own
def test_a_checkpoint_round_trip_restores_both_optimizers_and_the_schedule(tmp_path):
    common = FAST + ["model=qlinfowgan_gp", "data=shapes2d", "model.n_critic=3", "~callbacks.evaluation",
                     "callbacks.checkpoint.every_n_train_steps=4", "model.n_samples_figure=0"]
    first = build(compose_config(common + ["trainer.max_steps=4"], output_dir=tmp_path / "a"))
    first.trainer.fit(first.model, datamodule=first.datamodule)
    path = tmp_path / "a" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    seen = {}

    class Capture(pl.Callback):
        def on_train_start(self, trainer, pl_module):  # copies: the live state moves on with the next step
            seen["optimizers"] = [copy.deepcopy(opt.state_dict()) for opt in trainer.optimizers]
            seen["step"] = trainer.global_step
            seen["codebook"] = pl_module.latent.values.detach().clone()

        def on_train_end(self, trainer, pl_module):
            seen["end"] = [copy.deepcopy(opt.state_dict()) for opt in trainer.optimizers]

    resumed = build(compose_config(common + ["trainer.max_steps=6"], output_dir=tmp_path / "b"))
    resumed.trainer.callbacks.append(Capture())
    resumed.trainer.fit(resumed.model, datamodule=resumed.datamodule, ckpt_path=str(path))
    assert seen["step"] == 4 and torch.equal(seen["codebook"], ckpt["state_dict"]["latent.values"])
    assert len(seen["optimizers"]) == len(ckpt["optimizer_states"]) == 2
    for restored, saved in zip(seen["optimizers"], ckpt["optimizer_states"]):
        assert restored["state"].keys() == saved["state"].keys() and saved["state"]
        for key, state in saved["state"].items():
            assert torch.equal(restored["state"][key]["exp_avg"], state["exp_avg"])
            assert torch.equal(restored["state"][key]["step"], state["step"])
    # the schedule continues: iterations 0-3 updated G once (t = 2); 4-5 add t = 5, so two in all
    assert {int(s["step"]) for s in seen["end"][0]["state"].values()} == {6}
    assert {int(s["step"]) for s in seen["end"][1]["state"].values()} == {2}


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override, message", [
    ("model.n_critic=0", "model.n_critic must be an integer >= 1 (got 0)"),
    ("model.gradient_penalty_weight=-1", "model.gradient_penalty_weight must be a number >= 0 (got -1"),
    ("model.latent_weight=nan", "model.latent_weight must be a number >= 0"),
    ("model/latent=gaussian", "model.latent: GaussianLatent has no prior"),
    ("model/arch=dlib data.resolution=64", "model.arch.encoder: DlibEncoder has no forward_features trunk"),
    ("+model.optimizer.schedule={kind:cosine,steps:10}", "model.optimizer.schedule is not supported"),
    ("model.intervene_on=noise", "model.intervene_on must be one of ['prior', 'data'] (got 'noise')"),
])
def test_bad_values_fail_before_training_in_one_line(override, message, tmp_path):
    cfg = compose_config(FAST + ["model=qlinfowgan_gp", "data=shapes2d", *override.split()], output_dir=tmp_path)
    with pytest.raises(ConfigError) as info:
        build(cfg)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_a_nan_loss_stops_the_run_naming_the_term_and_the_step(tmp_path):
    # a huge learning rate blows the critic up in its first update: iteration 1's critic values are NaN
    cfg = compose_config(FAST + ["model=qlinfowgan_gp", "data=shapes2d", "model.optimizer.lr=1e30",
                                 "model.optimizer.clip_value=0", "trainer.max_steps=20"], output_dir=tmp_path)
    with pytest.raises(NonFiniteLossError, match=r"at step 1: term 'value' = nan \(encoder/critic update\)"):
        train(cfg)
    assert not (tmp_path / "metrics.json").exists()
