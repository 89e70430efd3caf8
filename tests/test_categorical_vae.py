"""Friede et al.'s D-VAE pieces (categorical_vae.md): the categorical latent and its Gumbel-scale schedule,
disentanglement_lib's networks (parameter counts of §8), the summed Bernoulli likelihood, i.i.d. uniform factor
sampling, and the paper's model configs."""
import math

import pytest
import torch
from conftest import FAST, compose_config
from hydra.utils import instantiate

from disentangle.data.base import UniformFactorStream
from disentangle.nn import DlibDecoder, DlibEncoder
from disentangle.quantizers import CategoricalLatent, gumbel_scale
from disentangle.runtime.run import build


def params(module):
    return sum(p.numel() for p in module.parameters())


def test_gumbel_scale_follows_the_cosine_schedule():
    assert gumbel_scale(0) == pytest.approx(0.5)
    assert gumbel_scale(150_000) == pytest.approx(1.25)
    assert gumbel_scale(300_000) == pytest.approx(2.0)
    assert gumbel_scale(450_000) == pytest.approx(2.0)
    latent = CategoricalLatent(2)
    latent.schedule(75_000)
    assert latent.noise_scale == pytest.approx(1.25 - 0.75 * math.cos(math.pi / 4))


def test_representation_is_the_softmax_mean_on_the_grid_and_ignores_the_noise():
    latent = CategoricalLatent(n_latents=3, n_categories=8)
    pre = torch.randn(5, 24)
    v = torch.linspace(-1, 1, 8)
    expected = torch.softmax(pre.reshape(5, 3, 8), -1) @ v
    torch.manual_seed(0)
    first = latent.representation(latent(pre))
    torch.manual_seed(1)
    second = latent.representation(latent(pre))
    assert torch.allclose(first, expected, atol=1e-6) and torch.equal(first, second)
    assert (first.abs() <= 1).all() and not latent.discrete
    latent.eval()
    out = latent(pre)  # noise scale 0 at evaluation: the decoder gets the representation itself
    assert torch.allclose(out.z, expected, atol=1e-6) and out.sample is None


def test_training_sample_uses_the_scaled_gumbel_noise_and_feeds_z_to_a_discriminator():
    latent = CategoricalLatent(n_latents=2, n_categories=4)
    pre = torch.zeros(20000, 8)
    latent.noise_scale = 1.0
    out = latent(pre)
    assert out.sample is out.z and out.z.shape == (20000, 2)
    assert out.z.std() > 0.1  # uniform logits: the noise alone moves z
    latent.noise_scale = 0.0
    assert torch.allclose(latent(pre).z, torch.zeros(20000, 2), atol=1e-6)  # softmax of equal logits: the grid's mean


def test_kl_is_zero_for_uniform_logits_and_n_log_m_for_one_hot_ones():
    latent = CategoricalLatent(n_latents=10, n_categories=64)
    assert latent(torch.zeros(4, 640)).losses["kl"].abs() < 1e-5
    one_hot = torch.full((4, 10, 64), -1e4)
    one_hot[..., 7] = 0
    assert latent(one_hot.reshape(4, 640)).losses["kl"].item() == pytest.approx(10 * math.log(64), rel=1e-4)
    assert latent.density_terms == {"kl"} and latent.weights == {"kl": 1.0}


def test_hard_mode_forward_value_is_exactly_one_hot_and_passes_gradients_through():
    latent = CategoricalLatent(n_latents=3, n_categories=5)
    latent.hard = True
    pre = torch.randn(6, 15, requires_grad=True)
    out = latent(pre)
    codes = (out.z.detach().unsqueeze(-1) - latent.values).abs().min(-1).values
    assert codes.max() < 1e-6  # every z is exactly one of the grid values
    out.z.sum().backward()
    assert pre.grad.abs().sum() > 0


def test_categorical_latent_rejects_bad_values():
    with pytest.raises(ValueError, match="n_categories must be an integer >= 2"):
        CategoricalLatent(2, n_categories=1)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        CategoricalLatent(2, temperature=0)


@pytest.mark.parametrize("channels, discrete_enc, gaussian_enc, decoder", [
    (1, 468_544, 309_204, 381_313),
    (3, 469_568, 310_228, 382_339),
])
def test_dlib_networks_have_the_parameter_counts_of_the_spec(channels, discrete_enc, gaussian_enc, decoder):
    assert params(DlibEncoder(channels, 64, 10 * 64)) == discrete_enc
    assert params(DlibEncoder(channels, 64, 2 * 10)) == gaussian_enc
    assert params(DlibDecoder(10, channels, 64)) == decoder
    with pytest.raises(ValueError, match="64x64"):
        DlibEncoder(channels, 32, 10)


def test_the_papers_models_total_and_discriminator_sizes():
    for model, total in (("dvae_friede", 849_857), ("vae_friede", 690_517)):
        net = instantiate(compose_config([f"model={model}", "data=dsprites"]).model, in_channels=1, resolution=64)
        assert params(net) == total
    net = instantiate(compose_config(["model=factordvae_friede", "data=dsprites"]).model, in_channels=1, resolution=64)
    reg = net.regularizers["tc_discriminator"]
    assert params(reg) == 5_018_002 and reg.negatives == "same_batch" and reg.negative_slope == 0.01
    assert reg.optimizer_cfg["lr"] == 1e-4 and reg.optimizer_cfg["betas"] == (0.5, 0.9) and reg.schedule is None
    assert not net.split_batch


def test_summed_bernoulli_likelihood():
    net = instantiate(compose_config(["model=dvae_friede", "model/arch=small", "data=shapes2d"]).model,
                      in_channels=3, resolution=16)
    logits, x = torch.randn(4, 3, 16, 16), torch.rand(4, 3, 16, 16)
    expected = (torch.nn.functional.softplus(logits) - x * logits).sum((1, 2, 3)).mean()
    assert torch.allclose(net.reconstruction_loss(logits, x), expected, rtol=1e-5)


# -- i.i.d. uniform factor sampling -----------------------------------------------------------------------------
def test_uniform_factor_stream_draws_each_factor_uniformly_with_replacement():
    sizes = (3, 4)
    table = torch.stack(torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij"), -1).reshape(-1, 2)
    stream = iter(UniformFactorStream(table, sizes, batch_size=6000, seed=0))
    batch = next(stream)
    counts = torch.bincount(batch, minlength=12).float() / 6000
    assert torch.allclose(counts, torch.full((12,), 1 / 12), atol=0.02)
    assert batch.unique().numel() < batch.numel()  # with replacement


def test_uniform_factor_stream_picks_among_images_that_share_the_factors_and_needs_a_full_grid():
    # two images (a nuisance, e.g. an object instance) for every combination, stored in no particular order
    table = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]]).repeat(2, 1)[torch.tensor([5, 0, 7, 2, 1, 6, 4, 3])]
    batch = next(iter(UniformFactorStream(table, (2, 2), batch_size=8000, seed=1)))
    assert torch.bincount(batch, minlength=8).min() > 800  # every image drawn, about 1/8 each
    with pytest.raises(ValueError, match="needs every combination of factor values, but toy has 3 of 4"):
        UniformFactorStream(table[:3], (2, 2), 8, 0, name="toy")


def test_uniform_factor_sampling_trains_from_the_config(tmp_path):
    cfg = compose_config(FAST + ["model=dvae_friede", "model/arch=small", "data=sprites", "data.sampling=uniform_factors",
                                 "callbacks.evaluation.every_n_steps=0"], output_dir=tmp_path)
    job = build(cfg)
    batch = next(iter(job.datamodule.train_dataloader()))
    assert batch.shape == (16,) and batch.max() < job.datamodule.num_samples
    job.trainer.fit(job.model, datamodule=job.datamodule)
    assert job.trainer.global_step == 4
    with pytest.raises(Exception, match="data.sampling must be one of"):
        build(compose_config(FAST + ["data.sampling=nope"], output_dir=tmp_path / "bad"))
