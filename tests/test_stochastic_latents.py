"""Stochastic and vector-quantized latents and the regularizers that read them: Gaussian KL (closed form and Monte
Carlo), β-TCVAE's decomposition, VQ-VAE's quantizer, BioAE's constraints (spec qlae.md §3.3–3.5, §4.3–4.6)."""
import math

import pytest
import torch
from torch import distributions as D

from disentangle.quantizers import GaussianLatent, VectorQuantizer, gaussian_kl
from disentangle.regularizers import (
    BiologicalConstraints,
    StepContext,
    biological_constraints,
    tcvae_decomposition,
)


def gaussian_params(b=6, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, generator=g), torch.rand(b, n, generator=g) * 1.5 + 0.1


# -- Gaussian latent --------------------------------------------------------------------------------------------
def test_gaussian_kl_matches_the_closed_form_of_torch_distributions():
    mu, sigma = gaussian_params()
    expected = D.kl_divergence(D.Normal(mu, sigma), D.Normal(0.0, 1.0)).sum(-1)
    assert torch.allclose(gaussian_kl(mu, sigma), expected, atol=1e-6)
    assert torch.allclose(gaussian_kl(torch.zeros(3, 5), torch.ones(3, 5)), torch.zeros(3))


def test_gaussian_kl_matches_a_monte_carlo_estimate():
    mu, sigma = gaussian_params(b=3, n=2, seed=1)
    g = torch.Generator().manual_seed(0)
    z = mu + sigma * torch.randn(200_000, *mu.shape, generator=g)
    log_q = D.Normal(mu, sigma).log_prob(z).sum(-1)
    log_p = D.Normal(0.0, 1.0).log_prob(z).sum(-1)
    mc = (log_q - log_p).mean(0)
    assert torch.allclose(mc, gaussian_kl(mu, sigma), atol=0.02)


def test_gaussian_latent_samples_in_training_and_uses_mu_in_evaluation():
    latent = GaussianLatent(n_latents=3, beta=2.0)
    assert latent.in_features == 6 and latent.out_features == 3 and not latent.discrete
    pre = torch.randn(5, 6)
    mu, sigma = pre[:, :3], torch.nn.functional.softplus(pre[:, 3:])
    torch.manual_seed(0)
    out = latent(pre)
    torch.manual_seed(0)
    eps = torch.randn(5, 3)
    assert torch.allclose(out.z, mu + sigma * eps)  # one reparameterised sample
    assert torch.allclose(out.params["mu"], mu) and torch.allclose(out.params["sigma"], sigma)
    assert out.sample is out.z
    assert torch.allclose(out.losses["kl"], gaussian_kl(mu, sigma).mean())
    assert latent.weights == {"kl": 2.0} and latent.density_terms == {"kl"}
    latent.eval()
    ev = latent(pre)
    assert torch.equal(ev.z, mu) and ev.sample is None
    assert torch.equal(latent.representation(ev), mu)


def test_gaussian_sample_is_differentiable_in_mu_and_sigma():
    latent = GaussianLatent(n_latents=2)
    pre = torch.randn(4, 4, requires_grad=True)
    latent(pre).z.sum().backward()
    assert (pre.grad[:, :2] == 1).all() and pre.grad[:, 2:].abs().sum() > 0


def test_gaussian_latent_rejects_a_negative_beta():
    with pytest.raises(ValueError, match="beta must be a non-negative number"):
        GaussianLatent(2, beta=-0.5)


# -- β-TCVAE decomposition --------------------------------------------------------------------------------------
def test_tcvae_terms_add_up_to_log_q_z_given_x_minus_log_p_z():
    mu, sigma = gaussian_params(b=16, n=5, seed=2)
    z = mu + sigma * torch.randn(16, 5, generator=torch.Generator().manual_seed(3))
    terms = tcvae_decomposition(z, mu, sigma, dataset_size=1000)
    assert all(terms[k].shape == (16,) for k in ("mi", "tc", "dwkl"))
    expected = D.Normal(mu, sigma).log_prob(z).sum(-1) - D.Normal(0.0, 1.0).log_prob(z).sum(-1)
    assert torch.allclose(terms["mi"] + terms["tc"] + terms["dwkl"], expected, atol=1e-5)


def test_tcvae_dataset_size_moves_log_q_z_and_the_product_of_marginals_by_the_expected_constants():
    """log q(z) moves by -log(N2/N1) and log prod_j q(z_j) by -n log(N2/N1); so MI grows by log(N2/N1), TC by
    (n - 1) log(N2/N1) and DWKL drops by n log(N2/N1)."""
    mu, sigma = gaussian_params(b=8, n=3, seed=4)
    z = mu + sigma * torch.randn(8, 3, generator=torch.Generator().manual_seed(5))
    a, b = tcvae_decomposition(z, mu, sigma, 1000), tcvae_decomposition(z, mu, sigma, 8000)
    shift = math.log(8)  # log(N2 / N1)
    assert torch.allclose(b["mi"] - a["mi"], torch.full((8,), shift), atol=1e-4)
    assert torch.allclose(b["tc"] - a["tc"], torch.full((8,), 2 * shift), atol=1e-4)
    assert torch.allclose(b["dwkl"] - a["dwkl"], torch.full((8,), -3 * shift), atol=1e-4)


def sample_posterior(mu, sigma, seed):
    return mu + sigma * torch.randn(mu.shape, generator=torch.Generator().manual_seed(seed))


def test_tcvae_total_correlation_is_near_zero_for_independent_and_clearly_positive_for_correlated_latents():
    """With N = 1 (no minibatch-weighting constant: MWS adds (n - 1) log N to every TC value, which carries no
    gradient) the estimate is the batch's own plug-in TC."""
    g = torch.Generator().manual_seed(6)
    mu_independent = torch.randn(512, 4, generator=g)
    base = torch.randn(512, 1, generator=g)
    mu_correlated = base.repeat(1, 4) + 0.05 * torch.randn(512, 4, generator=g)
    sigma = torch.full((512, 4), 0.7)
    tc_independent = tcvae_decomposition(sample_posterior(mu_independent, sigma, 7), mu_independent, sigma, 1)
    tc_correlated = tcvae_decomposition(sample_posterior(mu_correlated, sigma, 7), mu_correlated, sigma, 1)
    assert abs(tc_independent["tc"].mean().item()) < 0.1
    assert tc_correlated["tc"].mean().item() > 0.8  # the true TC of these latents is about 1.1 nats
    big_n = tcvae_decomposition(sample_posterior(mu_independent, sigma, 7), mu_independent, sigma, 480_000)
    assert big_n["tc"].mean().item() == pytest.approx(tc_independent["tc"].mean().item() + 3 * math.log(480_000),
                                                      abs=1e-3)


def test_tcvae_rejects_an_unknown_dataset_size():
    mu, sigma = gaussian_params()
    with pytest.raises(ValueError, match="dataset_size must be >= 1"):
        tcvae_decomposition(mu, mu, sigma, 0)


# -- VQ-VAE ------------------------------------------------------------------------------------------------------
def test_vector_quantizer_decoder_input_is_made_of_codebook_rows_with_nearest_indices():
    vq = VectorQuantizer(n_latents=3, codebook_size=16, code_dim=4)
    pre = torch.randn(10, 12)
    out = vq(pre)
    assert out.z.shape == (10, 12) and out.indices.shape == (10, 3)
    assert out.indices.min() >= 0 and out.indices.max() < 16 and out.indices.dtype == torch.long
    rows = out.z.reshape(10, 3, 4)
    assert torch.equal(rows, vq.codebook.detach()[out.indices])
    distances = ((pre.reshape(10, 3, 1, 4) - vq.codebook.detach()) ** 2).sum(-1)  # (10, 3, 16)
    assert torch.equal(out.indices, distances.argmin(-1))
    assert torch.equal(vq.representation(out), out.indices)
    assert vq.discrete and vq.categorical  # unordered labels: one-hot InfoE features, code-stepping interventions
    assert torch.equal(vq.decoder_input(out.indices.float()), out.z)


def test_vector_quantizer_init_and_loss_values_follow_the_spec():
    vq = VectorQuantizer(n_latents=2)
    bound = math.sqrt(3 / 64)
    assert vq.codebook.shape == (512, 64)
    assert vq.codebook.abs().max() <= bound and vq.codebook.abs().max() > 0.9 * bound
    assert vq.weights == {"quantize": 1.0, "commit": 0.25}
    pre = torch.randn(4, 128)
    out = vq(pre)
    expected = (pre - out.z.detach()).pow(2).mean()
    assert torch.allclose(out.losses["quantize"], expected) and torch.allclose(out.losses["commit"], expected)


def test_vector_quantizer_gradients_reach_the_encoder_and_move_the_codebook_only_through_the_quantize_loss():
    vq = VectorQuantizer(n_latents=2, codebook_size=8, code_dim=3)
    pre = torch.randn(6, 6, requires_grad=True)
    out = vq(pre)
    upstream = torch.randn(6, 6)
    ((out.z * upstream).sum() + out.losses["commit"]).backward()
    assert vq.codebook.grad is None or torch.all(vq.codebook.grad == 0)
    commit_grad = 2 * (pre - out.z).detach() / pre.numel()
    assert torch.allclose(pre.grad, upstream + commit_grad, atol=1e-6)  # straight-through + commitment
    pre.grad = None
    vq(pre).losses["quantize"].backward()
    assert vq.codebook.grad.abs().sum() > 0
    assert pre.grad is None or torch.all(pre.grad == 0)
    used = vq(pre).indices.unique()
    unused = torch.ones(8, dtype=torch.bool)
    unused[used] = False
    assert torch.all(vq.codebook.grad[unused] == 0)  # only the selected rows move


@pytest.mark.parametrize("kwargs, message", [({"codebook_size": 1}, "codebook_size must be an integer >= 2"),
                                             ({"code_dim": 0}, "code_dim must be an integer >= 1")])
def test_vector_quantizer_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VectorQuantizer(2, **kwargs)


# -- BioAE ------------------------------------------------------------------------------------------------------
def test_biological_constraints_known_answers():
    z = torch.tensor([[1.0, -2.0], [-0.5, 0.0]])
    terms = biological_constraints(z)
    assert terms["nonneg"].item() == pytest.approx((2.0 + 0.5) / 4)
    assert terms["activity"].item() == pytest.approx((1 + 4 + 0.25 + 0) / 4)
    assert biological_constraints(torch.rand(8, 3))["nonneg"].item() == 0  # non-negative latents cost nothing


def test_bio_regularizer_weights_its_two_terms():
    from disentangle.quantizers.base import LatentOutput

    reg = BiologicalConstraints(weight=1.0, nonneg_weight=1.0, activity_weight=0.01)
    z = torch.tensor([[1.0, -2.0]])
    terms = reg(StepContext(x=None, pre=z, latent=LatentOutput(z=z, z_continuous=z), logits=None))
    assert set(terms) == {"nonneg", "activity"}
    assert reg.term_weights == {"nonneg": 1.0, "activity": 0.01}
    with pytest.raises(ValueError, match="activity_weight must be a non-negative"):
        BiologicalConstraints(activity_weight=-1)


def test_vector_quantizer_codebook_gradient_is_bitwise_reproducible():
    """Runs are deterministic on one machine: the codebook lookup's backward must not depend on the order in
    which threads add up the rows (plain tensor indexing's CPU backward does)."""
    torch.manual_seed(0)
    vq = VectorQuantizer(n_latents=12)  # the paper's 512 x 64: big enough for the CPU kernels to go parallel
    pre = torch.randn(128, 12 * 64) * 0.05  # many vectors share a few rows
    upstream = torch.randn(128, 12, 64)

    def codebook_grad():
        vq.zero_grad()
        out = vq(pre)
        (vq.decoder_input(out.indices).reshape(128, 12, 64) * upstream).sum().backward()
        out = vq(pre)
        out.losses["quantize"].backward()
        return vq.codebook.grad.clone()

    first = codebook_grad()
    assert all(torch.equal(first, codebook_grad()) for _ in range(20))
