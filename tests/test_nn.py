"""Tests for disentangle.nn: the encoder/decoder contract, paper details and parameter counts.

The big architectures (QLAE, Tripod) are built once per module and only see tiny batches to keep this file fast.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from disentangle.nn import (
    ConvEncoder,
    ResidualDecoder,
    ResidualEncoder,
    SmallDecoder,
    SmallEncoder,
    StyleDecoder,
)

ARCHS = {
    "qlae": (ConvEncoder, StyleDecoder),
    "tripod": (ResidualEncoder, ResidualDecoder),
    "small": (SmallEncoder, SmallDecoder),
}

# Documented activation shapes (per sample) at resolution 64 with the default options.
ACTIVATION_SHAPES_64 = {
    "qlae": {"cond": (256,), "block0": (256, 8, 8), "block1": (128, 16, 16), "block2": (64, 32, 32)},
    "tripod": {"cond": (256,), "block0": (256, 8, 8), "block1": (128, 16, 16), "block2": (64, 32, 32)},
    "small": {"cond": (256,), "block0": (32, 8, 8), "block1": (16, 16, 16), "block2": (8, 32, 32)},
}


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def nets64():
    """One encoder/decoder pair per architecture at 3×64×64 with n_z = 12 (built once: the big ones are slow)."""
    torch.manual_seed(0)
    return {name: (enc(3, 64, 12), dec(12, 3, 64)) for name, (enc, dec) in ARCHS.items()}


# ------------------------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("arch", ["qlae", "tripod"])
@pytest.mark.parametrize("resolution,channels,n", [(64, 1, 5), (32, 3, 7), (16, 1, 3)])
def test_big_shapes(arch, resolution, channels, n):
    """(64, 3, 12) is covered by test_activation_dict_64; batch 1 at 64 keeps this cheap."""
    enc_cls, dec_cls = ARCHS[arch]
    enc, dec = enc_cls(channels, resolution, n), dec_cls(n, channels, resolution)
    batch = 1 if resolution == 64 else 2
    x = torch.rand(batch, channels, resolution, resolution)
    with torch.no_grad():
        z = enc(x)
        assert z.shape == (batch, n)
        assert dec(z).shape == (batch, channels, resolution, resolution)


@pytest.mark.parametrize("resolution", [16, 32, 64])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("n,width,hidden", [(1, 32, 256), (10, 8, 64), (24, 16, 128)])
def test_small_shapes(resolution, channels, n, width, hidden):
    enc = SmallEncoder(channels, resolution, n, width=width, hidden=hidden)
    dec = SmallDecoder(n, channels, resolution, width=width, hidden=hidden)
    x = torch.rand(3, channels, resolution, resolution)
    z = enc(x)
    assert z.shape == (3, n)
    logits, acts = dec(z, return_activations=True)
    assert logits.shape == (3, channels, resolution, resolution)
    assert acts["cond"].shape == (3, hidden)


@pytest.mark.parametrize(
    "options",
    [{"norm": "group"}, {"norm": "group", "width": 6}, {"activation": "relu"}, {"activation": "gelu"}],
)
def test_small_options(options):
    enc, dec = SmallEncoder(3, 32, 4, **options), SmallDecoder(4, 3, 32, **options)
    assert dec(enc(torch.rand(2, 3, 32, 32))).shape == (2, 3, 32, 32)


def test_qlae_repo_options_shapes():
    enc = ConvEncoder(3, 32, 6, norm_before_act=True, negative_slope=0.2)
    dec = StyleDecoder(6, 3, 32, negative_slope=0.2, output_kernel=3, adain_relu=True)
    assert dec(enc(torch.rand(2, 3, 32, 32))).shape == (2, 3, 32, 32)


# ------------------------------------------------------------------------------------------------ activations
@pytest.mark.parametrize("arch", list(ARCHS))
def test_activation_dict_64(nets64, arch):
    enc, dec = nets64[arch]
    with torch.no_grad():
        z = enc(torch.rand(2, 3, 64, 64))
        logits, acts = dec(z, return_activations=True)
        plain = dec(z)
    assert z.shape == (2, 12)
    assert logits.shape == (2, 3, 64, 64)
    assert dec.hessian_layers == ("cond", "block0", "block1", "block2")
    assert set(dec.hessian_layers) <= set(acts)
    assert set(acts) == set(dec.activation_names)
    assert "logits" in dec.activation_names and "logits" not in dec.hessian_layers
    for name, shape in ACTIVATION_SHAPES_64[arch].items():
        assert acts[name].shape == (2, *shape), name
    assert torch.equal(acts["logits"], logits)
    torch.testing.assert_close(logits, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("resolution,blocks", [(32, 2), (16, 1)])
def test_activation_names_fewer_stages(arch, resolution, blocks):
    _, dec_cls = ARCHS[arch]
    dec = dec_cls(4, 1, resolution)
    expected = ("cond",) + tuple(f"block{i}" for i in range(blocks))
    assert dec.hessian_layers == expected
    assert dec.activation_names == (*expected, "logits")
    with torch.no_grad():
        _, acts = dec(torch.randn(2, 4), return_activations=True)
    assert set(acts) == set(dec.activation_names)
    for i in range(blocks):
        assert acts[f"block{i}"].shape[-1] == 8 * 2**i  # block i is the (i+1)-th up-sampling output


# ------------------------------------------------------------------------------------------------ batch independence
@pytest.mark.parametrize("arch", list(ARCHS))
def test_per_sample_independence(nets64, arch):
    """Sample i's output must not depend on the rest of the batch (Hessian penalties batch perturbed copies).

    Run in float64: float32 convolutions pick batch-size-dependent kernels whose rounding differs by ~1e-5 on O(1)
    outputs, which would blur the check; in float64 any real cross-sample leak is far above the tolerance.
    """
    enc, dec = (copy.deepcopy(net).double() for net in nets64[arch])
    x = torch.rand(3, 3, 64, 64, dtype=torch.float64)
    z = torch.randn(3, 12, dtype=torch.float64)
    with torch.no_grad():
        z_batch = enc(x)
        logits_batch, acts_batch = dec(z, return_activations=True)
        z_alone = enc(x[1:2])
        logits_alone, acts_alone = dec(z[1:2], return_activations=True)
    torch.testing.assert_close(z_alone[0], z_batch[1], rtol=0, atol=1e-5)
    for name in dec.activation_names:  # includes "logits"
        torch.testing.assert_close(acts_alone[name][0], acts_batch[name][1], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits_alone[0], logits_batch[1], rtol=0, atol=1e-5)


def test_no_batchnorm_anywhere(nets64):
    for enc, dec in nets64.values():
        for module in (*enc.modules(), *dec.modules()):
            assert not isinstance(module, nn.modules.batchnorm._BatchNorm)


# ------------------------------------------------------------------------------------------------ parameter counts
@pytest.mark.parametrize(
    "n_z,encoder,decoder",
    [(12, 3_684_524, 3_967_136), (14, 3_685_038, 3_967_648), (18, 3_686_066, 3_968_672)],
)
def test_qlae_parameter_counts_repo_config(n_z, encoder, decoder):
    """qlae spec §2.5: repo configuration = 3×3 output conv, affine IN in the encoder, ReLU'd AdaIN."""
    assert n_params(ConvEncoder(3, 64, n_z, norm_before_act=True, negative_slope=0.2)) == encoder
    assert n_params(StyleDecoder(n_z, 3, 64, negative_slope=0.2, output_kernel=3, adain_relu=True)) == decoder
    # The paper's 1×1 output conv (the default) saves 32·3·(9 − 1) = 768 parameters.
    assert n_params(StyleDecoder(n_z, 3, 64)) == decoder - 768


def test_qlae_vae_and_vq_encoder_counts():
    assert n_params(ConvEncoder(3, 64, 2 * 12)) == 3_687_608  # β-VAE head: 2·n_z
    assert n_params(StyleDecoder(64 * 12, 3, 64, output_kernel=3, adain_relu=True)) == 4_160_672  # VQ-VAE


def test_tripod_parameter_counts(nets64):
    enc, dec = nets64["tripod"]
    assert n_params(enc) == pytest.approx(4.10e6, rel=0.01)
    assert n_params(dec) == pytest.approx(16.14e6, rel=0.01)


# ------------------------------------------------------------------------------------------------ initialisation
def test_qlae_init():
    dec = StyleDecoder(5, 3, 16)
    assert torch.all(dec.const == 0.1)
    for layer in dec.layers:
        cin, cout, k, _ = layer.conv.weight.shape
        bound = 1 / math.sqrt(cin * k * k)  # repo's ConvTranspose bound (qlae spec §2.4, §12 row 23)
        assert layer.conv.weight.abs().max() <= bound
        assert layer.conv.weight.abs().max() > 0.9 * bound
        assert layer.conv.bias is None
        assert torch.all(layer.style.bias[:cout] == 1.0)  # AdaIN scale starts at 1 (spec §12 row 4)
    relu_dec = StyleDecoder(5, 3, 16, adain_relu=True)
    assert not torch.all(relu_dec.layers[0].style.bias[:256] == 1.0)
    enc = ConvEncoder(3, 16, 5)
    assert all(layer.conv.bias is None for layer in enc.convs)


def test_tripod_const_init(nets64):
    assert torch.all(nets64["tripod"][1].const == 1.0)


def test_qlae_norm_order_option_changes_output():
    enc_paper = ConvEncoder(3, 16, 4)
    enc_repo = ConvEncoder(3, 16, 4, norm_before_act=True)
    enc_repo.load_state_dict(enc_paper.state_dict())
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        assert not torch.allclose(enc_paper(x), enc_repo(x))


def test_tripod_normalize_outputs():
    dec = ResidualDecoder(4, 3, 32, normalize_outputs=True)
    with torch.no_grad():
        _, acts = dec(torch.randn(2, 4), return_activations=True)
    for name in ("block0", "block1"):
        a = acts[name]
        torch.testing.assert_close(a.mean(dim=(2, 3)), torch.zeros(a.shape[:2]), rtol=0, atol=1e-4)
        torch.testing.assert_close(
            a.var(dim=(2, 3), unbiased=False), torch.ones(a.shape[:2]), rtol=0, atol=1e-2
        )


def test_tripod_encoder_rescales_input():
    """ResidualEncoder maps [0, 1] → [−1, 1] itself: its trunk sees 2x − 1."""
    enc = ResidualEncoder(1, 16, 3)
    x = torch.rand(2, 1, 16, 16)
    with torch.no_grad():
        expected = enc.head(enc.mlp(enc.trunk(2 * x - 1).mean(dim=(2, 3))))
        torch.testing.assert_close(enc(x), expected)


# ------------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("arch", list(ARCHS))
def test_gradients_reach_every_parameter(nets64, arch):
    enc, dec = nets64[arch]
    enc.zero_grad(set_to_none=True)
    dec.zero_grad(set_to_none=True)
    x = torch.rand(1, 3, 64, 64)
    logits = dec(enc(x))
    F.binary_cross_entropy_with_logits(logits, x).backward()
    for name, p in (*enc.named_parameters(), *dec.named_parameters()):
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------------------------------------ bad arguments
BAD_CONSTRUCTIONS = [
    (ConvEncoder, (0, 64, 12), {}),
    (ConvEncoder, (3, 64, -1), {}),
    (ConvEncoder, (3, 48, 12), {}),
    (ConvEncoder, (3, 128, 12), {}),
    (ConvEncoder, (3, 64, 12), {"negative_slope": -0.1}),
    (ConvEncoder, (3, 64, 12), {"norm_before_act": "yes"}),
    (StyleDecoder, (0, 3, 64), {}),
    (StyleDecoder, (12, 3, 8), {}),
    (StyleDecoder, (12, 3, 64), {"output_kernel": 2}),
    (StyleDecoder, (12, 3, 64), {"output_kernel": 0}),
    (StyleDecoder, (12, 3, 64), {"adain_relu": 1}),
    (ResidualEncoder, (3, 64, 0), {}),
    (ResidualEncoder, (3, 100, 12), {}),
    (ResidualDecoder, (12, 0, 64), {}),
    (ResidualDecoder, (12, 3, 64), {"normalize_outputs": None}),
    (SmallEncoder, (3, 8, 12), {}),
    (SmallEncoder, (3, 64, 12.5), {}),
    (SmallEncoder, (3, 64, 12), {"width": 0}),
    (SmallEncoder, (3, 64, 12), {"norm": "batch"}),
    (SmallDecoder, (True, 3, 64), {}),
    (SmallDecoder, (12, 3, 64), {"hidden": -5}),
    (SmallDecoder, (12, 3, 64), {"activation": "tanh"}),
    (SmallDecoder, (12, 3, 64), {"norm": None}),
]


@pytest.mark.parametrize("cls,args,kwargs", BAD_CONSTRUCTIONS)
def test_bad_arguments_raise(cls, args, kwargs):
    with pytest.raises(ValueError):
        cls(*args, **kwargs)


def test_unsupported_resolution_message_lists_supported():
    with pytest.raises(ValueError, match=r"supported resolutions are \(16, 32, 64\)"):
        ConvEncoder(3, 128, 12)


def test_wrong_input_shapes_raise():
    enc, dec = SmallEncoder(3, 32, 4), SmallDecoder(4, 3, 32)
    with pytest.raises(ValueError):
        enc(torch.rand(2, 3, 64, 64))
    with pytest.raises(ValueError):
        enc(torch.rand(2, 1, 32, 32))
    with pytest.raises(ValueError):
        dec(torch.randn(2, 5))
    with pytest.raises(ValueError):
        dec(torch.randn(4))


@pytest.mark.parametrize("name", ["StyleDecoder", "ResidualDecoder", "SmallDecoder"])
def test_decoding_until_the_regularized_activations_stops_early_with_the_same_values(name):
    import disentangle.nn as dnn

    torch.manual_seed(0)
    decoder = getattr(dnn, name)(in_features=4, out_channels=3, resolution=32).double()
    z = torch.randn(3, 4, dtype=torch.float64)
    _, full = decoder(z, return_activations=True)
    logits, partial = decoder(z, return_activations=True, until=decoder.hessian_layers)
    assert logits is None
    assert set(partial) >= set(decoder.hessian_layers) and "logits" not in partial
    for key in decoder.hessian_layers:
        assert torch.equal(partial[key], full[key])
    with pytest.raises(ValueError, match="unknown activations"):
        decoder(z, return_activations=True, until=["nope"])
