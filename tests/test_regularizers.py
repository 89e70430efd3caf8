"""KLM and NHP against known answers and invariances; weight decay parameter groups."""
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from disentangle.quantizers import ContinuousLatent, LatentQuantizer
from disentangle.regularizers import (
    KernelMultiInformation,
    NormalizedHessianPenalty,
    batch_std,
    decay_groups,
    kernel_multi_information,
    normalized_hessian_penalty,
)


def klm(z):
    return kernel_multi_information(z, batch_std(z)).mean().item()


def test_klm_is_larger_for_dependent_than_for_independent_latents():
    g = torch.Generator().manual_seed(0)
    independent = torch.randn(256, 6, generator=g)
    base = torch.randn(256, 2, generator=g)
    dependent = torch.cat([base, base + 0.05 * torch.randn(256, 2, generator=g), base[:, :1] ** 2, -base[:, 1:]], 1)
    assert klm(dependent) > klm(independent) + 1.0


def test_klm_is_invariant_to_per_dimension_rescaling():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(128, 5, generator=g)
    z[:, 1] = z[:, 0] + 0.3 * z[:, 1]
    scale = torch.tensor([0.01, 3.0, 7.0, 0.5, 100.0])
    assert klm(z * scale) == pytest.approx(klm(z), rel=1e-4)


def test_klm_regularizer_takes_bandwidth_from_the_continuous_latents():
    q = LatentQuantizer(4)
    pre = torch.randn(64, 4, requires_grad=True)
    out = q(pre)
    from disentangle.regularizers import StepContext

    ctx = StepContext(x=None, pre=pre, latent=out, logits=None)
    value = KernelMultiInformation(1.0)(ctx)["klm"]
    expected = kernel_multi_information(out.z, out.z_continuous.std(0, unbiased=False) + 1e-6).mean()
    assert torch.allclose(value, expected)
    value.backward()
    assert pre.grad is not None  # gradients flow through the bandwidth (authors' code)


class ToyDecoder(nn.Module):
    """g(z) with named activations; ``mix`` adds an interaction between z0 and z1."""

    def __init__(self, mix: float, scale: float = 1.0):
        super().__init__()
        self.mix, self.scale = mix, scale

    def forward(self, z, return_activations=False):
        additive = torch.sin(z) + z**2  # separable part: no mixed derivatives
        a = torch.cat([additive, self.mix * (z[:, :1] * z[:, 1:2])], 1) * self.scale
        b = (torch.cos(2 * z).sum(1, keepdim=True) + self.mix * z[:, 2:3] * z[:, 0:1] ** 2) * self.scale
        acts = {"a": a, "b": b}
        return (a, acts) if return_activations else a


def nhp(decoder, z, sigma, aggregate="per_layer", seed=0):
    g = torch.Generator().manual_seed(seed)
    base = decoder(z, return_activations=True)[1]
    return normalized_hessian_penalty(
        lambda v: decoder(v, return_activations=True)[1], z, sigma, base, ("a", "b"),
        aggregate=aggregate, generator=g,
    )


@pytest.mark.parametrize("aggregate", ["per_layer", "pooled"])
def test_nhp_is_zero_for_an_additive_decoder_and_positive_with_interactions(aggregate):
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(2))
    sigma = z.std(0)
    assert nhp(ToyDecoder(mix=0.0), z, sigma, aggregate).abs().max() < 1e-6
    assert nhp(ToyDecoder(mix=1.0), z, sigma, aggregate).mean() > 1e-2


@pytest.mark.parametrize("aggregate", ["per_layer", "pooled"])
def test_nhp_is_unchanged_when_decoder_activations_are_rescaled(aggregate):
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))
    sigma = z.std(0)
    plain = nhp(ToyDecoder(mix=1.0), z, sigma, aggregate)
    scaled = nhp(ToyDecoder(mix=1.0, scale=7.0), z, sigma, aggregate)
    assert torch.allclose(plain, scaled, rtol=1e-3, atol=1e-6)


def test_nhp_is_unchanged_when_latents_are_rescaled_per_dimension():
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(4))
    s = torch.tensor([0.1, 5.0, 2.0, 0.7])
    dec = ToyDecoder(mix=1.0)

    class Rescaled(nn.Module):  # the same function expressed in rescaled coordinates
        def forward(self, zs, return_activations=False):
            return dec(zs / s, return_activations)

    plain = nhp(dec, z, z.std(0))
    rescaled = nhp(Rescaled(), z * s, (z * s).std(0))
    assert torch.allclose(plain, rescaled, rtol=1e-3)


def test_vanilla_penalty_would_change_under_rescaling_but_nhp_does_not():
    """The degeneracy NHP fixes (Tripod Prop. 3.1): shrinking the output shrinks an unnormalized penalty."""
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(5))
    ones = torch.ones(4)
    g = torch.Generator().manual_seed(0)

    def vanilla(decoder):
        v = (torch.randint(0, 2, (2, 32, 4), generator=g) * 2 - 1).float() * 0.1
        out = [decoder(z + d) - 2 * decoder(z) + decoder(z - d) for d in v]
        return torch.stack(out).var(0).mean()

    assert vanilla(ToyDecoder(1.0, scale=0.1)) < 0.05 * vanilla(ToyDecoder(1.0))
    assert torch.allclose(nhp(ToyDecoder(1.0, 0.1), z, ones), nhp(ToyDecoder(1.0), z, ones), rtol=1e-3)


def test_nhp_regularizer_rejects_unknown_layers_and_bad_values():
    class Dec(ToyDecoder):
        activation_names = ("a", "b")
        hessian_layers = ("a",)

    # bind() reads only the model contract (RegularizedModel): the latent's description and the decoder
    model = SimpleNamespace(decoder=Dec(1.0), latent_spec=ContinuousLatent(2).spec(), n_latents=2)
    reg = NormalizedHessianPenalty(1.0)
    reg.bind(model)
    assert reg.layers == ("a",) and reg.needs_activations == ("a",)
    with pytest.raises(ValueError, match="not decoder activations"):
        NormalizedHessianPenalty(1.0, layers=["nope"]).bind(model)
    with pytest.raises(ValueError, match="aggregate must be one of"):
        NormalizedHessianPenalty(1.0, aggregate="max")
    with pytest.raises(ValueError, match="non-negative"):
        NormalizedHessianPenalty(-1.0)
    with pytest.raises(ValueError, match="n_perturbations"):
        NormalizedHessianPenalty(1.0, n_perturbations=1)


def test_weight_decay_groups_exempt_biases_norm_shifts_and_codebooks():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(4, 4), nn.Linear(4, 2))
    net.const = nn.Parameter(torch.ones(2))
    codebook = LatentQuantizer(3)
    decayed, undecayed = decay_groups({"net": net, "latent": codebook}, 0.1, exempt=[codebook])
    ids = lambda ps: {id(p) for p in ps}
    assert decayed["weight_decay"] == 0.1 and undecayed["weight_decay"] == 0.0
    assert ids(decayed["params"]) == ids([net[0].weight, net[1].weight, net[2].weight, net.const])
    assert ids(undecayed["params"]) == ids([net[0].bias, net[1].bias, net[2].bias, codebook.values])
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        decay_groups({"net": net}, -0.1)


# -- naive Tripod's options of the same modules (tripod spec §9 item 3) -----------------------------------------
def vanilla_hp(decoder, z, aggregate="per_layer", seed=0):
    g = torch.Generator().manual_seed(seed)
    base = decoder(z, return_activations=True)[1]
    return normalized_hessian_penalty(
        lambda v: decoder(v, return_activations=True)[1], z, None, base, ("a", "b"),
        aggregate=aggregate, normalized=False, generator=g,
    )


@pytest.mark.parametrize("aggregate", ["per_layer", "pooled"])
def test_vanilla_hessian_penalty_sees_interactions_and_scales_with_the_output(aggregate):
    z = torch.randn(32, 4, generator=torch.Generator().manual_seed(6))
    assert vanilla_hp(ToyDecoder(mix=0.0), z, aggregate).abs().max() < 1e-6
    plain = vanilla_hp(ToyDecoder(mix=1.0), z, aggregate)
    assert plain.mean() > 1e-2
    # no denominator: scaling the activations by s scales the penalty by s^2 (the degeneracy NHP removes)
    assert torch.allclose(vanilla_hp(ToyDecoder(mix=1.0, scale=3.0), z, aggregate), 9 * plain, rtol=1e-3)


def test_vanilla_hessian_penalty_matches_its_definition_with_plain_rademacher_directions():
    """One layer, n_p = 2: the mean over activation dims of the population variance of the two finite-difference
    second derivatives along +-1 directions (no sigma scaling)."""
    z = torch.randn(8, 4, generator=torch.Generator().manual_seed(7))
    dec = ToyDecoder(mix=1.0)
    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (2, 8, 4), generator=g).float() * 2 - 1
    second = torch.stack([(dec(z + 0.1 * v) - 2 * dec(z) + dec(z - 0.1 * v)) / 0.01 for v in signs])
    expected = second.var(0, unbiased=False).mean(-1)
    base = dec(z, return_activations=True)[1]
    got = normalized_hessian_penalty(lambda v: dec(v, return_activations=True)[1], z, None, base, ("a",),
                                     normalized=False, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(got, expected, rtol=1e-4)


def test_klm_with_a_fixed_bandwidth_ignores_the_batch_spread():
    z = torch.randn(64, 3, generator=torch.Generator().manual_seed(8))
    z[:, 1] = z[:, 0] + 0.2 * z[:, 1]
    from disentangle.quantizers.base import LatentOutput
    from disentangle.regularizers import StepContext

    def value(latents, **kwargs):
        out = LatentOutput(z=latents, z_continuous=latents)
        return KernelMultiInformation(1.0, **kwargs)(StepContext(x=None, pre=latents, latent=out, logits=None))["klm"]

    assert torch.allclose(value(z, bandwidth=0.5), kernel_multi_information(z, torch.full((3,), 0.5)).mean())
    # Tripod's batch-std bandwidth is scale-invariant; a fixed one is not (why naive Tripod is naive)
    assert value(10 * z).item() == pytest.approx(value(z).item(), rel=1e-4)
    assert abs(value(10 * z, bandwidth=1.0).item() - value(z, bandwidth=1.0).item()) > 0.1
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        KernelMultiInformation(1.0, bandwidth=0.0)
