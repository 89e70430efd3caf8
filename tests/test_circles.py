"""Friede et al.'s Circles experiment (categorical_vae.md §16): the procedural circles data, the spatial-broadcast
decoder (§8 Table 3), the latent rotation angle and its figure, and a tiny end-to-end `experiment=circles` run."""
from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from conftest import compose_config
from hydra.utils import instantiate

from disentangle import metrics as M
from disentangle.callbacks.figures import latent_scatter
from disentangle.data import ProceduralDataModule
from disentangle.data.procedural import RENDERERS, circles
from disentangle.nn import BroadcastDecoder, DlibEncoder
from disentangle.runtime.run import train

RES = 64


# ---------------------------------------------------------------------------------------------------------------
# Renderer
# ---------------------------------------------------------------------------------------------------------------

def grid_factors() -> torch.Tensor:
    return torch.cartesian_prod(torch.arange(40), torch.arange(40))


def centroid(images: torch.Tensor) -> torch.Tensor:
    """(B, 1, H, W) -> (B, 2) intensity-weighted (x, y) centre in pixels (pixel centres at i + 0.5)."""
    img = images[:, 0]
    coords = torch.arange(img.shape[-1], dtype=torch.float32) + 0.5
    mass = img.sum(dim=(1, 2))
    return torch.stack([(img * coords).sum(dim=(1, 2)) / mass, (img * coords[:, None]).sum(dim=(1, 2)) / mass], 1)


def test_circles_is_registered_with_its_metadata():
    assert RENDERERS["circles"] is circles
    assert circles.FACTOR_NAMES == ("pos_x", "pos_y") and circles.FACTOR_SIZES == (40, 40)
    assert circles.NUM_CHANNELS == 1
    dm = ProceduralDataModule(name="circles", factor_names=["pos_x", "pos_y"], factor_sizes=[40, 40], eval_size=1600)
    assert dm.num_samples == 1600 and dm.num_channels == 1
    images, factors = dm.gather(torch.tensor([0, 41, 1599]))
    assert images.shape == (3, 1, RES, RES) and factors.tolist() == [[0, 0], [1, 1], [39, 39]]


def test_render_shape_range_and_disc_size():
    images = circles.render(grid_factors(), RES)
    assert images.shape == (1600, 1, RES, RES) and images.dtype == torch.float32
    assert images.min() == 0.0 and images.max() == pytest.approx(circles.GREY)
    assert images[:, :, 0].sum() == 0 and images[:, :, -1].sum() == 0          # never touches the border
    area = images.sum(dim=(1, 2, 3)) / circles.GREY                               # anti-aliased coverage
    expected = math.pi * (circles.RADIUS * RES) ** 2                              # ≈ 128.7 px
    assert ((area - expected).abs() < 0.02 * expected).all()
    assert images.unique().numel() > 50                                          # soft edges, not binary


def test_disc_centre_follows_the_factor_indices():
    factors = grid_factors()
    found = centroid(circles.render(factors, RES))
    table = torch.tensor(circles.centres(40), dtype=torch.float32) * RES
    expected = torch.stack([table[factors[:, 0]], table[factors[:, 1]]], dim=1)
    assert (found - expected).abs().max() < 0.05                                 # pixels
    assert expected[:, 0].min() == pytest.approx(0.2 * RES) and expected[:, 0].max() == pytest.approx(0.8 * RES)
    row = circles.render(torch.stack([torch.arange(40), torch.full((40,), 7)], 1), RES)
    assert (centroid(row)[:, 0].diff() > 0.9).all()                             # pos_x moves right, ≈ 1 px a step
    col = circles.render(torch.stack([torch.full((40,), 7), torch.arange(40)], 1), RES)
    assert (centroid(col)[:, 1].diff() > 0.9).all()                             # pos_y moves down


def test_render_is_deterministic_across_batches_and_chunks(monkeypatch):
    factors = grid_factors()[torch.randperm(1600, generator=torch.Generator().manual_seed(0))[:50]]
    whole = circles.render(factors, RES)
    assert torch.equal(circles.render(factors.flip(0), RES), whole.flip(0))
    for i in (0, 17, 49):
        assert torch.equal(circles.render(factors[i:i + 1], RES)[0], whole[i])
    monkeypatch.setattr(circles, "_CHUNK_PIXELS", 7 * RES * RES)
    assert torch.equal(circles.render(factors, RES), whole)
    with pytest.raises(ValueError, match="'pos_y'.*40"):
        circles.render(torch.tensor([[0, 40]]))


# ---------------------------------------------------------------------------------------------------------------
# Spatial-broadcast decoder
# ---------------------------------------------------------------------------------------------------------------

def test_broadcast_decoder_parameter_shapes():
    dec = BroadcastDecoder(in_features=2, out_channels=1, resolution=RES)
    shapes = {name: tuple(p.shape) for name, p in dec.named_parameters()}
    assert shapes == {
        "convs.0.0.weight": (64, 4, 3, 3), "convs.0.0.bias": (64,),      # z (2) + coordinates (2) -> 64
        "convs.1.0.weight": (64, 64, 3, 3), "convs.1.0.bias": (64,),
        "out.weight": (1, 64, 3, 3), "out.bias": (1,),
    }
    assert sum(p.numel() for p in dec.parameters()) == 39_873
    assert tuple(dec.coords.shape) == (1, 2, RES, RES)
    assert dec.coords[0, 0, 0].tolist() == pytest.approx(np.linspace(-1, 1, RES).tolist(), abs=1e-6)   # x along columns
    assert dec.coords[0, 1, :, 0].tolist() == pytest.approx(np.linspace(-1, 1, RES).tolist(), abs=1e-6)  # y along rows


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("channels,n", [(1, 2), (3, 5)])
def test_broadcast_decoder_output_shape_and_activations(padding, channels, n):
    dec = BroadcastDecoder(n, channels, RES, hidden=8, padding=padding)
    z = torch.randn(3, n, requires_grad=True)
    logits, acts = dec(z, return_activations=True)
    assert logits.shape == (3, channels, RES, RES) and logits.is_contiguous()
    assert tuple(acts) == dec.activation_names == ("cond", "block0", "block1", "logits")
    grid = RES if padding == "same" else RES + 6                                 # valid: 3 unpadded 3x3 convs
    assert acts["cond"].shape == (3, n + 2, grid, grid)
    assert dec.hessian_layers == ("cond", "block0", "block1")
    logits.sum().backward()
    assert z.grad.abs().sum() > 0 and all(p.grad is not None for p in dec.parameters())
    # per-sample independence (no layer mixes the batch)
    assert torch.allclose(dec(z[1:2]), logits[1:2], atol=1e-6)
    none, partial = dec(z, until={"block0"})
    assert none is None and "block1" not in partial


def test_broadcast_decoder_rejects_bad_options():
    for kwargs in ({"padding": "full"}, {"kernel_size": 4}, {"hidden": 0}, {"normalize_outputs": "false"}):
        with pytest.raises(ValueError):
            BroadcastDecoder(2, 1, RES, **kwargs)
    with pytest.raises(ValueError, match=r"\(B, 2\)"):
        BroadcastDecoder(2, 1, RES)(torch.zeros(4, 3))


def test_broadcast_arch_config_builds_for_any_model():
    for model in ("vae_friede", "dvae_friede", "ae"):
        cfg = compose_config([f"model={model}", "data=circles", "model/arch=broadcast", "model.n_latents=2"])
        net = instantiate(cfg.model, in_channels=1, resolution=RES)
        assert isinstance(net.encoder, DlibEncoder) and isinstance(net.decoder, BroadcastDecoder)
        assert net.decoder(torch.zeros(2, net.decoder.in_features)).shape == (2, 1, RES, RES)


# ---------------------------------------------------------------------------------------------------------------
# Rotation angle (known answers)
# ---------------------------------------------------------------------------------------------------------------

def rot(degrees: float) -> np.ndarray:
    t = math.radians(degrees)
    return np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])


@pytest.fixture(scope="module")
def factors() -> np.ndarray:
    return grid_factors().numpy()


def test_rotation_of_the_factors_themselves_is_zero(factors):
    out = M.rotation(factors, factors)
    assert out["rotation"] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(out["r2"], 1.0)
    np.testing.assert_allclose(np.abs(out["directions"]), np.eye(2), atol=1e-12)


@pytest.mark.parametrize("theta", [10.0, 30.0, 45.0])
def test_rotation_measures_the_rotation_angle(factors, theta):
    assert M.rotation(factors, factors @ rot(theta).T)["rotation"] == pytest.approx(theta, abs=1e-9)
    # theta and 90 - theta are the same axis alignment
    assert M.rotation(factors, factors @ rot(90 - theta).T)["rotation"] == pytest.approx(theta, abs=1e-9)


def test_rotation_invariances(factors):
    latents = (factors * [1.0, 4.0] + [3.0, -2.0]) @ rot(30).T             # per-factor scaling, then rotation
    base = M.rotation(factors, latents)
    assert base["rotation"] == pytest.approx(30.0, abs=1e-9)
    np.testing.assert_allclose(base["per_factor"], [30.0, 30.0], atol=1e-9)
    for transformed in (latents[:, ::-1], -latents, latents * [-1, 1], 7.5 * latents + 11.0):  # axes / scale
        assert M.rotation(factors, transformed)["rotation"] == pytest.approx(30.0, abs=1e-9)
    assert M.rotation(factors[:, ::-1], latents)["rotation"] == pytest.approx(30.0, abs=1e-9)  # factor order
    assert M.rotation(5 - 2 * factors, latents)["rotation"] == pytest.approx(30.0, abs=1e-9)  # factor affine
    # any per-axis latent scaling keeps an axis-aligned representation at 0 (it shears other angles)
    assert M.rotation(factors, factors * [0.01, 50.0])["rotation"] == pytest.approx(0.0, abs=1e-9)


def test_rotation_with_extra_latents_and_nonlinear_axes(factors):
    rng = np.random.default_rng(0)
    # monotone but curved axes and a noise latent, all on comparable scales (raw latents are not standardised)
    aligned = np.c_[np.tanh(factors[:, 0] / 20 - 1), rng.uniform(-1, 1, 1600), factors[:, 1] ** 2 / 800 - 1]
    assert M.rotation(factors, aligned)["rotation"] < 0.5
    out = M.rotation(factors, np.c_[factors @ rot(20).T, np.zeros(1600)])
    assert out["rotation"] == pytest.approx(20.0, abs=1e-9) and out["directions"].shape == (3, 2)


def test_rotation_needs_two_factors_and_two_latents(factors, caplog):
    with pytest.raises(ValueError, match="exactly 2 factors and at least 2 latent dimensions"):
        M.rotation(np.c_[factors, factors[:, :1]], factors)
    with pytest.raises(ValueError, match="exactly 2 factors and at least 2 latent dimensions"):
        M.rotation(factors, factors[:, :1])
    # the metric suite skips it with a logged reason instead, so `metrics: all` works on any dataset
    with caplog.at_level(logging.WARNING, logger="disentangle.metrics.suite"):
        out = M.array_metrics(factors.astype(float), np.c_[factors, factors[:, :1]],   # 3 factors
                              discrete_latents=False, metrics=["mig", "rotation"], options={"mig": {"n_bins": 10}})
    assert "rotation" not in out and "mig" in out
    assert "metric 'rotation' skipped" in caplog.text
    out = M.array_metrics(factors @ rot(30).T, factors, discrete_latents=False, metrics=["rotation"])
    assert out["rotation"] == pytest.approx(30.0) and out["rotation_per_factor"].shape == (2,)
    assert set(out) == {"rotation", "rotation_per_factor", "rotation_directions", "rotation_r2"}


def test_latent_scatter_figure(factors, tmp_path):
    latents = factors @ rot(30).T
    out = M.rotation(factors, latents)
    path = latent_scatter(latents, factors, ["pos_x", "pos_y"], tmp_path / "s.png", title="t: 30 deg",
                          directions=out["directions"])
    assert path.stat().st_size > 5000
    with pytest.raises(ValueError, match="dims"):
        latent_scatter(latents, factors, ["pos_x", "pos_y"], tmp_path / "t.png", dims=(0, 2))


# ---------------------------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------------------------

TINY = [
    "experiment=circles",
    "model.arch.decoder.hidden=4",
    "model.batch_size=8",
    "trainer.max_steps=3",
    "trainer.enable_model_summary=false",
    "trainer.enable_progress_bar=false",
    "~callbacks.progress",
    "callbacks.evaluation.n_samples=200",
    "callbacks.evaluation.every_n_steps=2",
    "callbacks.evaluation.dci.n_estimators=5",
    "callbacks.evaluation.dci.max_depth=3",
    "callbacks.evaluation.n_interventions=3",
    "callbacks.evaluation.progress=false",
    "callbacks.checkpoint.every_n_train_steps=2",
    "print_summary=false",
]


@pytest.mark.parametrize("model", ["vae_friede", "dvae_friede"])
def test_tiny_circles_run_writes_the_rotation_and_the_latent_figure(model, tmp_path):
    cfg = compose_config(TINY + [f"model={model}"], output_dir=tmp_path)
    assert cfg.model.n_latents == 2 and cfg.data.name == "circles" and cfg.data.sampling == "uniform_factors"
    assert cfg.model.arch.decoder._target_ == "disentangle.nn.BroadcastDecoder"
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert "rotation" in record["metrics"] and 0.0 <= record["rotation"] <= 45.0
    assert record["rotation"] == pytest.approx(result["rotation"])
    assert len(record["rotation_per_factor"]) == 2 and np.array(record["rotation_directions"]).shape == (2, 2)
    assert {"mig", "dci_d", "infom"} <= set(record) and record["method"] == model
    assert (tmp_path / "latent_scatter.png").stat().st_size > 5000
    history = [json.loads(line) for line in (tmp_path / "metrics_history.jsonl").read_text().splitlines()]
    assert "rotation" in history[0] and not history[0]["final"]          # periodic evaluation at step 2
