"""Quantizer properties: outputs on the grid, straight-through gradients, codebook updates."""
import pytest
import torch

from disentangle.quantizers import ContinuousLatent, FixedGridQuantizer, LatentQuantizer


def test_latent_quantizer_outputs_lie_on_each_dimensions_codebook():
    q = LatentQuantizer(n_latents=4, n_values=10)
    with torch.no_grad():
        q.values.add_(torch.randn_like(q.values) * 0.1)  # make the dimensions' codebooks differ
    pre = torch.randn(256, 4)
    out = q(pre)
    for j in range(4):
        book = q.values[j]
        assert torch.isin(out.z[:, j], book).all()
        # nearest value: no codebook value is closer than the chosen one
        dist = (pre[:, j, None] - book).abs()
        assert torch.allclose((out.z[:, j] - pre[:, j]).abs(), dist.min(1).values)
        assert torch.equal(book[out.indices[:, j]], out.z[:, j])


def test_latent_quantizer_initial_codebook_is_linspace():
    q = LatentQuantizer(n_latents=3, n_values=10)
    assert torch.allclose(q.values[1], torch.linspace(-0.5, 0.5, 10))
    assert q.values.shape == (3, 10)


def test_straight_through_gradient_reaches_the_encoder_unchanged():
    q = LatentQuantizer(n_latents=5, quantize_weight=0, commit_weight=0)
    pre = torch.randn(8, 5, requires_grad=True)
    upstream = torch.randn(8, 5)
    (q(pre).z * upstream).sum().backward()
    assert torch.allclose(pre.grad, upstream)


def test_codebook_moves_only_through_the_quantize_loss():
    q = LatentQuantizer(n_latents=3)
    pre = torch.randn(16, 3, requires_grad=True)
    out = q(pre)
    # the decoder path and the commit loss give the codebook no gradient
    (out.z.sum() + out.losses["commit"]).backward()
    assert q.values.grad is None or torch.all(q.values.grad == 0)
    assert pre.grad is not None and pre.grad.abs().sum() > 0
    # the quantize loss moves the codebook and not the encoder
    q.zero_grad()
    pre.grad = None
    q(pre).losses["quantize"].backward()
    assert q.values.grad.abs().sum() > 0
    assert pre.grad is None or torch.all(pre.grad == 0)


def test_quantize_step_pulls_selected_values_toward_encoder_outputs():
    q = LatentQuantizer(n_latents=1, n_values=4)
    pre = torch.full((32, 1), 0.2)
    before = q(pre).losses["quantize"].item()
    opt = torch.optim.SGD(q.parameters(), lr=0.25)
    for _ in range(20):
        opt.zero_grad()
        q(pre).losses["quantize"].backward()
        opt.step()
    assert q(pre).losses["quantize"].item() < 0.01 * before


def test_global_codebook_is_shared_by_all_dimensions():
    q = LatentQuantizer(n_latents=6, n_values=10, shared_codebook=True)
    assert q.values.shape == (1, 10)
    pre = torch.randn(64, 6)
    out = q(pre)
    assert torch.isin(out.z, q.values[0]).all()
    # identical inputs in different dimensions quantize identically
    same = q(torch.full((2, 6), 0.13)).z
    assert torch.all(same == same[0, 0])
    per_dim = LatentQuantizer(n_latents=6, n_values=10)
    assert sum(p.numel() for p in per_dim.parameters()) == 6 * sum(p.numel() for p in q.parameters())


def test_fixed_grid_outputs_on_the_grid_and_gradient_is_tanh_derivative():
    q = FixedGridQuantizer(n_latents=3, n_levels=12)
    pre = torch.randn(500, 3, requires_grad=True) * 3
    pre.retain_grad()
    out = q(pre)
    grid = torch.linspace(-1, 1, 12)
    assert torch.isin(out.z.detach().round(decimals=5), grid.round(decimals=5)).all()
    assert (out.indices >= 0).all() and (out.indices <= 11).all()
    assert not list(q.parameters()) and out.losses == {}
    out.z.sum().backward()
    assert torch.allclose(pre.grad, 1 - torch.tanh(pre.detach()) ** 2, atol=1e-6)
    # the continuous latent is the tanh output, within half a grid step of z
    assert torch.allclose(out.z_continuous, torch.tanh(pre.detach()))
    assert (out.z - out.z_continuous).abs().max() <= 1 / 11 + 1e-6


def test_fixed_grid_finer_quantization_has_more_levels():
    pre = torch.linspace(-4, 4, 10_000)[:, None]
    assert FixedGridQuantizer(1, 12)(pre).z.unique().numel() == 12
    assert FixedGridQuantizer(1, 144)(pre).z.unique().numel() == 144


def test_continuous_latent_is_identity_and_not_discrete():
    q = ContinuousLatent(4)
    pre = torch.randn(3, 4)
    assert torch.equal(q(pre).z, pre) and not q.discrete


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: LatentQuantizer(4, n_values=1), "n_values must be >= 2"),
        (lambda: LatentQuantizer(0), "n_latents must be >= 1"),
        (lambda: LatentQuantizer(4, quantize_weight=-1), "quantize_weight must be a non-negative"),
        (lambda: FixedGridQuantizer(4, n_levels=1), "n_levels must be >= 2"),
    ],
)
def test_invalid_quantizer_arguments_fail_clearly(make, message):
    with pytest.raises(ValueError, match=message):
        make()
