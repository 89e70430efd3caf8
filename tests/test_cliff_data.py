"""Cliff's experiments' data and networks (spec cliff.md §2.1, §4, §5): the grid density and its discontinuities,
the nonlinear mixing, the 2-D and balls data modules, Lachapelle et al.'s networks, the encoder-only training mode end
to end through Hydra + Lightning, and bad inputs."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import compose_config
from hydra.utils import instantiate
from scipy.stats import spearmanr

from disentangle.callbacks.figures import factor_recovery_scatter
from disentangle.data.procedural import balls
from disentangle.data.synthetic import (
    FACTOR_LEVELS,
    BallsDataModule,
    Cliff2dDataModule,
    grid_density_sample,
    make_grid_density,
    mix,
    mixing_matrices,
)
from disentangle.errors import ConfigError
from disentangle.nn import AdditiveDecoder, LachapelleDecoder, LachapelleEncoder, MLPEncoder, ResNet18Trunk
from disentangle.runtime.run import build, train

RESNET18_WITHOUT_FC = 11_689_512 - (512 * 1000 + 1000)   # torchvision resnet18(): 11,689,512 incl. the 1000-way fc


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------ grid density
def test_marginal_density_is_flat_between_separators_and_jumps_at_them():
    """§5.1: each marginal is piecewise constant with value P(cell r) / width_r on [s_r, s_r+1]; a histogram with
    bins inside each interval must match it, and so the jumps sit at the separators."""
    density = make_grid_density([4, 3], generator=gen(1))
    z = grid_density_sample(400_000, density, generator=gen(2))
    cell_probs = density.priors.reshape(3, 4)      # [c2, c1]: the first axis varies fastest
    marginals = (cell_probs.sum(0), cell_probs.sum(1))
    for axis, sep in enumerate(density.separators):
        assert z[:, axis].min() >= sep[0] and z[:, axis].max() <= sep[-1]
        for r in range(len(sep) - 1):
            expected = float(marginals[axis][r] / (sep[r + 1] - sep[r]))
            inner = torch.linspace(0, 1, 5, dtype=torch.float64)[1:-1]          # 3 points well inside the interval
            width = 0.1 * (sep[r + 1] - sep[r])
            for t in sep[r] + (sep[r + 1] - sep[r]) * inner:
                inside = float(((z[:, axis] > t - width / 2) & (z[:, axis] < t + width / 2)).double().mean() / width)
                assert inside == pytest.approx(expected, rel=0.08), (axis, r)
        # left and right of every interior separator: the two intervals' densities (a jump of their difference)
        for r in range(1, len(sep) - 1):
            eps = 0.05
            left = float(((z[:, axis] > sep[r] - eps) & (z[:, axis] < sep[r])).double().mean() / eps)
            right = float(((z[:, axis] > sep[r]) & (z[:, axis] < sep[r] + eps)).double().mean() / eps)
            assert left == pytest.approx(float(marginals[axis][r - 1] / (sep[r] - sep[r - 1])), rel=0.15)
            assert right == pytest.approx(float(marginals[axis][r] / (sep[r + 1] - sep[r])), rel=0.15)


def test_cells_are_drawn_with_their_priors_and_separators_follow_the_2024_generator():
    density = make_grid_density([4, 4], generator=gen(0))
    for sep in density.separators:
        gaps = sep.diff()
        assert sep[0] == 0 and ((gaps >= 0.3) & (gaps <= 2.5)).all()
    assert float(density.priors.sum()) == pytest.approx(1.0) and (density.priors > 0).all()
    z = grid_density_sample(100_000, density, generator=gen(1))
    c = [torch.searchsorted(sep, z[:, i].contiguous(), right=True) - 1 for i, sep in enumerate(density.separators)]
    counts = torch.bincount(c[0] + 4 * c[1], minlength=16).double() / len(z)
    sd = (density.priors * (1 - density.priors) / len(z)).sqrt()
    assert ((counts - density.priors).abs() <= 5 * sd).all()
    diagonal = make_grid_density([3, 3], priors="diagonal", generator=gen(0)).priors.reshape(3, 3)
    off_diagonal = diagonal.clone().fill_diagonal_(0)
    assert (diagonal.diagonal() > 3 * off_diagonal.max()).all()   # the strong-diagonal builder


def test_sampler_is_a_pure_function_of_its_generator():
    density = make_grid_density([4, 4], generator=gen(1))
    state = torch.random.get_rng_state()
    a = grid_density_sample(100, density, generator=gen(5))
    assert torch.equal(torch.random.get_rng_state(), state)   # the global RNG is untouched
    assert torch.equal(a, grid_density_sample(100, density, generator=gen(5)))
    assert not torch.equal(a, grid_density_sample(100, density, generator=gen(6)))
    assert torch.equal(make_grid_density([4, 4], generator=gen(1)).priors, density.priors)


def test_mixing_is_deterministic_per_seed_bounded_by_tanh_and_invertible():
    a, b = mixing_matrices(2, seed=3)
    a2, b2 = mixing_matrices(2, seed=3)
    assert torch.equal(a, a2) and torch.equal(b, b2) and not torch.equal(a, mixing_matrices(2, seed=4)[0])
    assert torch.linalg.cond(a) <= 10 and torch.linalg.cond(b) <= 10
    assert (a.abs() <= 1 / math.sqrt(2)).all()
    density = make_grid_density([4, 4], generator=gen(1))
    z = grid_density_sample(2000, density, generator=gen(2))
    x = mix(z, a, b, low=density.low, high=density.high, input_range=3.0)
    t = torch.linalg.solve(b, x.T).T                     # = tanh(A (0.5 u)): strictly inside (-1, 1)
    assert t.abs().max() < 1 and t.abs().max() > 0.5      # bent by tanh, not saturated
    u = 2 * torch.linalg.solve(a, torch.atanh(t).T).T     # invert the map
    z_back = density.low + (u / 3.0 + 1) / 2 * (density.high - density.low)
    assert torch.allclose(z_back, z, atol=1e-9)
    raw = mix(z, a, b, input_range=None)                 # the printed formula on raw z
    assert torch.allclose(raw, torch.tanh(0.5 * z @ a.T) @ b.T)


# ------------------------------------------------------------------------------------------------ data modules
def test_cliff2d_module_gives_vectors_and_fixed_point_factors():
    dm = Cliff2dDataModule(num_samples=300, batch_size=300)
    assert (dm.num_channels, dm.resolution, dm.num_samples, dm.eval_size) == (2, 1, 300, 300)
    assert dm.factor_names == ("z1", "z2") and dm.factor_sizes == (FACTOR_LEVELS, FACTOR_LEVELS)
    batch = next(iter(dm.train_dataloader()))
    x, f = dm.on_after_batch_transfer(batch, 0)
    assert x.shape == (300, 2) and x.dtype == torch.float32 and f.dtype == torch.int64
    assert torch.equal(x, dm.observations[batch]) and torch.equal(f, dm.factors[batch])
    # the factors are the true z in fixed point: affine in z, within half a lattice step
    z = dm.latents
    assert torch.allclose(dm.density.from_lattice(dm.factors), z)
    step = (dm.density.high - dm.density.low) / (FACTOR_LEVELS - 1)
    raw = grid_density_sample(300, dm.density, generator=gen(2))
    assert ((raw - z).abs() <= step / 2 + 1e-12).all()
    # the observations are the mixing of the (snapped) z, and another seed gives another data set
    assert torch.allclose(x.double(), mix(z, *dm.mixing, low=dm.density.low, high=dm.density.high)[batch], atol=1e-6)
    assert not torch.equal(Cliff2dDataModule(num_samples=300, sample_seed=3).observations, dm.observations)


def test_balls_render_is_deterministic_and_balls_sit_at_their_positions():
    g = gen(0)
    pos = torch.rand(20, 4, generator=g) * 0.6 + 0.2
    images = balls.render(pos, 64)
    assert images.shape == (20, 3, 64, 64) and images.dtype == torch.float32
    assert 0 <= images.min() and images.max() <= 1
    assert torch.equal(balls.render(pos.flip(0), 64), images.flip(0))
    assert torch.equal(balls.render(pos[3:4], 64)[0], images[3])
    # one ball at a time (the other out of frame): the centroid of the ink is the centre, y measured from the bottom
    coords = torch.arange(64, dtype=torch.float32) + 0.5
    for ball in range(2):
        alone = pos.clone()
        alone[:, 2 * (1 - ball): 2 * (1 - ball) + 2] = 5.0
        ink = (1 - balls.render(alone, 64)).sum(1)                    # (B, H, W)
        cx = (ink * coords).sum((1, 2)) / ink.sum((1, 2))
        cy = (ink * coords[:, None]).sum((1, 2)) / ink.sum((1, 2))
        assert torch.allclose(cx, pos[:, 2 * ball] * 64, atol=0.05)
        assert torch.allclose(cy, (1 - pos[:, 2 * ball + 1]) * 64, atol=0.05)
        area = (ink / ink.amax((1, 2), keepdim=True)).sum((1, 2))     # the radius: int(0.16 * 64) = 10 px
        assert torch.allclose(area, torch.full_like(area, math.pi * 10**2), rtol=0.03)
    # ball 2 is drawn on top: at the same place only its colour is visible
    same = torch.tensor([[0.5, 0.5, 0.5, 0.5]])
    centre = balls.render(same, 64)[0, :, 32, 32] * 255
    assert torch.allclose(centre, torch.tensor([222.0, 100.0, 100.0]), atol=0.5)


def test_balls_module_factors_follow_the_grid_density_and_move_the_balls():
    dm = BallsDataModule(num_samples=400, eval_size=64, resolution=32, batch_size=64)
    assert (dm.num_channels, dm.resolution, dm.n_factors) == (3, 32, 4)
    # held-out evaluation draws after the training set
    assert torch.equal(dm.eval_indices(), torch.arange(400, 464)) and len(dm.factors) == 464
    # every coordinate lies in the density's support, each ball's (x, y) has the 5 x 4 grid's separators
    z = dm.latents(dm.factors)
    assert [len(s) for s in dm.density.separators] == [6, 5]
    assert (z >= dm.density.low.repeat(2) - 1e-9).all() and (z <= dm.density.high.repeat(2) + 1e-9).all()
    images, factors = dm.gather(torch.arange(64))
    assert torch.equal(images, balls.render(dm.positions(factors), 32))
    p = dm.positions(factors)
    assert p.min() >= 0.1 and p.max() <= 0.9
    # the ink of ball 1 (teal: unmix the two colours) moves with ball 1's factors
    ink = 1 - images
    teal = ink[:, 0] - (1 - 222 / 255) / (1 - 100 / 255) * ink[:, 1]
    coords = torch.arange(32, dtype=torch.float32)
    cx = (teal * coords).sum((1, 2)) / teal.sum((1, 2))
    cy = (teal * coords[:, None]).sum((1, 2)) / teal.sum((1, 2))
    assert spearmanr(cx, factors[:, 0]).statistic > 0.9
    assert spearmanr(cy, factors[:, 1]).statistic < -0.9                 # y from the bottom, rows from the top


# ------------------------------------------------------------------------------------------------ networks
def test_network_parameter_counts_match_the_architectures():
    def count(module) -> int:
        return sum(p.numel() for p in module.parameters())

    encoder = LachapelleEncoder(3, 64, 4)
    assert isinstance(encoder.trunk, ResNet18Trunk) and count(encoder.trunk) == RESNET18_WITHOUT_FC
    fc_block = 512 * 512 + 512 + 2 * 512                   # Linear + BatchNorm1d
    assert count(encoder) == RESNET18_WITHOUT_FC + 5 * fc_block + (512 * 4 + 4) + 2 * 4
    deconvs = (64 * 64 + 64 * 32 + 32 * 32 + 32 * 3) * 16 + (64 + 32 + 32 + 3)

    def decoder(d: int) -> int:
        return (d * 512 + 512 + 1024) + 4 * fc_block + (512 * 1024 + 1024 + 2048) + deconvs

    assert count(LachapelleDecoder(4, 3, 64)) == decoder(4)
    assert count(AdditiveDecoder(4, 3, 64, n_blocks=2)) == 2 * decoder(2)
    assert count(MLPEncoder(2, 1, 2)) == (2 * 50 + 50) + (50 * 100 + 100) + (100 * 50 + 50) + (50 * 2 + 2)


def test_networks_shapes_gradients_and_additivity():
    torch.manual_seed(0)
    # narrow decoders (hidden=64) keep this quick; the full widths are counted above
    enc, dec, add = LachapelleEncoder(3, 16, 4), LachapelleDecoder(4, 3, 16, hidden=64), AdditiveDecoder(4, 3, 16, hidden=64)
    x = torch.rand(4, 3, 16, 16)
    z = enc(x)
    out = dec(z)
    assert z.shape == (4, 4) and out.shape == (4, 3, 16, 16)
    assert LachapelleDecoder(4, 3, 64).eval()(torch.zeros(1, 4)).shape == (1, 3, 64, 64)
    logits, acts = add(z, return_activations=True)
    assert list(acts) == list(add.activation_names) and acts["cond"].shape == (4, 128, 4, 4)
    (out.square().mean() + logits.square().mean()).backward()
    for net in (enc, dec, add):
        for name, p in net.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    # additive: f(a, b) + f(a', b') = f(a, b') + f(a', b) (eval mode: BatchNorm uses running statistics)
    add.eval()
    dec.eval()
    a, a2, b, b2 = torch.randn(4, 3, 2).unbind(0)          # two values of each latent block, 3 samples

    def cross(f):
        return f(torch.cat([a, b], 1)) + f(torch.cat([a2, b2], 1)) - f(torch.cat([a, b2], 1)) - f(torch.cat([a2, b], 1))

    with torch.no_grad():
        assert cross(add).abs().max() < 1e-4
        assert cross(dec).abs().max() > 1e-3                   # the non-additive decoder is not
    mlp = MLPEncoder(2, 1, 2)
    assert torch.equal(mlp(torch.ones(3, 2)), mlp(torch.ones(3, 2, 1, 1)))


# ------------------------------------------------------------------------------------------------ end to end
QUIET = ["trainer.enable_progress_bar=false", "~callbacks.progress", "trainer.enable_model_summary=false",
         "callbacks.evaluation.progress=false", "print_summary=false"]


def test_encoder_only_cliff2d_trains_through_hydra_and_writes_mcc(tmp_path):
    cfg = compose_config(QUIET + ["experiment=cliff2d", "trainer.max_steps=3", "data.num_samples=600",
                                  "data.eval_size=600", "model.batch_size=600", "callbacks.evaluation.every_n_steps=2",
                                  "callbacks.checkpoint.every_n_train_steps=2"], output_dir=tmp_path)
    assert cfg.model.arch.decoder is None and cfg.model.optimizer.lr == pytest.approx(2e-3)
    assert cfg.model.regularizers.cliff.uni == 0 and cfg.trainer.max_steps == 3
    job = build(cfg)
    assert job.model.decoder is None and not job.model.has_decoder
    before = [p.detach().clone() for p in job.model.encoder.parameters()]
    x, _ = job.datamodule.gather(torch.arange(600))
    terms, _ = job.model.loss_terms(x)
    assert "reconstruction" not in terms and set(terms) >= {"biv", "kl_uni"}
    result = train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert 0 <= record["mcc"] <= 1 and record["mcc"] == pytest.approx(result["mcc"])
    assert "psnr" not in record and record["factor_names"] == ["z1", "z2"]
    assert (tmp_path / "factor_recovery.png").stat().st_size > 1000
    assert not (tmp_path / "reconstructions.png").exists() and not (tmp_path / "interventions.png").exists()
    history = [json.loads(line) for line in (tmp_path / "metrics_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 3]
    trained = build(cfg).model
    trained.load_state_dict(torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"])
    assert any(not torch.equal(p, q) for p, q in zip(before, trained.encoder.parameters()))


def test_ioss2d_trains_on_ioss_alone_or_with_cliffs_anti_collapse_term(tmp_path):
    base = QUIET + ["experiment=ioss2d", "trainer.max_steps=2", "data.num_samples=400", "data.eval_size=400",
                    "model.batch_size=400", "callbacks.evaluation.every_n_steps=0",
                    "callbacks.checkpoint.every_n_train_steps=0"]
    cfg = compose_config(base, output_dir=tmp_path)
    ioss_cfg = cfg.model.regularizers.ioss
    assert ioss_cfg.weight == 1 and ioss_cfg.n_pairs == 1 and cfg.model.optimizer.lr == pytest.approx(2e-3)
    x, _ = build(cfg).datamodule.gather(torch.arange(400))
    terms, _ = build(cfg).model.loss_terms(x)
    assert set(terms) == {"ioss"} and terms["ioss"] > 0                # the default: IOSS alone
    variant = compose_config(base + ["model.regularizers.cliff.weight=1"])
    terms, _ = build(variant).model.loss_terms(x)
    assert set(terms) == {"ioss", "uni", "biv", "kl_uni"} and terms["kl_uni"] > 0
    assert variant.model.regularizers.cliff.biv == 0 and variant.model.regularizers.cliff.uni == 0
    train(cfg)
    assert 0 <= json.loads((tmp_path / "metrics.json").read_text())["mcc"] <= 1


def test_the_synthetic_sweep_gives_every_seed_its_own_data_set():
    from test_published import _compose

    first, other = (_compose("cliff_synthetic", [f"seed={s}", "experiment=ioss2d"]).data for s in (0, 3))
    assert (first.mix_seed, first.sample_seed, other.mix_seed, other.sample_seed) == (0, 0, 3, 3)
    assert first.density_seed == other.density_seed        # the same grid density, new mixing and points


def test_balls_experiment_trains_a_few_steps_with_mse_and_spearman_mcc(tmp_path):
    cfg = compose_config(QUIET + ["experiment=cliff_balls", "trainer.max_steps=2", "trainer.accelerator=cpu",
                                  "data.num_samples=32", "data.eval_size=16", "data.resolution=16",
                                  "model.batch_size=8", "callbacks.evaluation.every_n_steps=0",
                                  "callbacks.evaluation.n_interventions=2", "callbacks.evaluation.n_reconstructions=2",
                                  "~callbacks.checkpoint"], output_dir=tmp_path)
    assert cfg.callbacks.evaluation.mcc.method == "spearman" and cfg.model.regularizers.cliff.weight == 0.1
    train(cfg)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert 0 <= record["mcc"] <= 1 and math.isfinite(record["psnr"])
    assert record["factor_names"] == ["ball1_x", "ball1_y", "ball2_x", "ball2_y"]
    from disentangle.runtime.compilation import compiler_missing

    if compiler_missing("cpu") is None:  # trainer.compile=auto: the ResNet-18 compiled was slower here, so eager
        assert record["runtime"]["compiled"] is False
        assert "compiled Lachapelle" in record["runtime"]["compile_reason"]
    assert (tmp_path / "reconstructions.png").is_file() and (tmp_path / "factor_recovery.png").is_file()
    additive = compose_config(["experiment=cliff_balls", "model/arch=balls_additive"]).model.arch.decoder
    decoder = instantiate(additive)(in_features=4, out_channels=3, resolution=16)
    assert isinstance(decoder, AdditiveDecoder) and decoder.n_blocks == 2 and decoder.block_size == 2


def test_encoder_only_mode_needs_a_loss_and_refuses_decoder_penalties():
    base = ["data=cliff2d", "model=ae", "model/arch=mlp_encoder", "data.num_samples=100", "data.eval_size=100"]
    with pytest.raises(ConfigError, match="encoder-only.*attach one"):
        build(compose_config(base))
    with pytest.raises(ConfigError, match="encoder-only"):
        build(compose_config(base + ["+regularizer=nhp"]))
    model = build(compose_config(base + ["+regularizer=klm"])).model
    z, recon = model.embed(torch.zeros(3, 2))
    assert z.shape == (3, 4) and recon is None
    with pytest.raises(ValueError, match="encoder-only"):
        model.decode(z)


def test_factor_recovery_figure(tmp_path):
    rng = np.random.default_rng(0)
    factors = rng.integers(0, 100, size=(200, 2))
    latents = np.stack([factors[:, 1] * 0.1, -factors[:, 0] * 0.2], axis=1) + rng.normal(size=(200, 2))
    path = factor_recovery_scatter(latents, factors, ["a", "b"], tmp_path / "f.png", matching=np.array([[1, 0], [0, 1]]))
    assert path.stat().st_size > 1000
    with pytest.raises(ValueError, match="matching must be"):
        factor_recovery_scatter(latents, factors, ["a", "b"], tmp_path / "g.png", matching=np.array([[2, 0]]))


# ------------------------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("call, message", [
    (lambda: make_grid_density([4, 0]), r"grid_dims\[1\] must be a positive integer"),
    (lambda: make_grid_density("44"), "grid_dims must be a non-empty list"),
    (lambda: make_grid_density([4, 4], min_spacing=3.0), "min_spacing <= max_spacing"),
    (lambda: make_grid_density([4, 4], priors="gauss"), "priors must be one of"),
    (lambda: make_grid_density([4, 3], priors="diagonal"), "same number of cells"),
    (lambda: grid_density_sample(0, make_grid_density([2, 2])), "n must be a positive integer"),
    (lambda: grid_density_sample(5, [[0, 1]]), "density must be a GridDensity"),
    (lambda: mixing_matrices(2, seed=0, max_condition=0.5), "max_condition must be >= 1"),
    (lambda: Cliff2dDataModule(num_samples=0), "data.num_samples must be a positive integer"),
    (lambda: Cliff2dDataModule(num_samples=50, sampling="uniform_factors"), "data.sampling must be 'epochs'"),
    (lambda: Cliff2dDataModule(num_samples=50, priors="x"), "data: priors must be one of"),
    (lambda: Cliff2dDataModule(num_samples=50, eval_size=60), "eval_size=60 exceeds"),
    (lambda: BallsDataModule(num_samples=50, eval_size=10, coupling="both"), "data.coupling must be one of"),
    (lambda: BallsDataModule(num_samples=50, eval_size=10, position_range=[0.9, 0.1]), "position_range must be"),
    (lambda: BallsDataModule(num_samples=50, eval_size=10, grid_dims=[5, 4, 3]), "grid_dims must have 2"),
    (lambda: balls.render(torch.zeros(2, 4, dtype=torch.long)), "positions must be a float tensor"),
    (lambda: balls.render(torch.zeros(2, 3)), r"shape \(B, 4\)"),
    (lambda: balls.render(torch.full((1, 4), float("nan"))), "finite"),
    (lambda: balls.render(torch.zeros(1, 4), 4), "resolution must be an int >= 8"),
    (lambda: LachapelleDecoder(4, 3, 48), "unsupported resolution 48"),
    (lambda: AdditiveDecoder(5, 3, 64, n_blocks=2), "multiple of n_blocks"),
    (lambda: LachapelleEncoder(3, 4, 4), "resolution must be an integer >= 8"),
    (lambda: MLPEncoder(2, 1, 2, activation="gelu"), "activation must be one of"),
    (lambda: MLPEncoder(2, 1, 2)(torch.zeros(3, 3)), r"expects input of shape \(B, 2\)"),
])
def test_bad_inputs_raise_one_line_value_errors(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_the_non_factorized_support_is_the_2024_builders_grid():
    """Barin-Pacela et al.'s build_2D_dataset_non_factorized_support: five of the 16 cells empty (so the support is
    no product of intervals), the diagonal at 0.26 : 0.24 : 0.27 : 0.23, the rest softmax(randn) of their seed."""
    from disentangle.data.synthetic import NON_FACTORIZED_SEED

    density = make_grid_density([4, 4], priors="non_factorized", generator=gen(1))
    p = density.priors
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
    empty = torch.nonzero(p == 0).flatten().tolist()
    assert empty == [2, 3, 8, 12, 13]
    # (x, y) of the empty cells, the first axis fastest: the support is not a product set
    coords = density.cell_coordinates(torch.tensor(empty)).tolist()
    assert coords == [[2, 0], [3, 0], [0, 2], [0, 3], [1, 3]]
    diagonal = p[[0, 5, 10, 15]]
    assert torch.allclose(diagonal / diagonal.sum(), torch.tensor([0.26, 0.24, 0.27, 0.23], dtype=torch.float64))
    rest = [k for k in range(16) if k not in (0, 5, 10, 15, 2, 3, 8, 12, 13)]
    raw = torch.randn(16, generator=torch.Generator().manual_seed(NON_FACTORIZED_SEED), dtype=torch.float64).softmax(0)
    assert torch.allclose(p[rest] / p[0], raw[rest] / 0.26)   # one normalising constant for every cell
    assert float(diagonal.sum()) > 0.6           # the heavy diagonal (0.62 of the mass): the factors are correlated
    # the separators are still the grid's (density_seed), and no point lands in an empty cell
    assert torch.equal(density.separators[0], make_grid_density([4, 4], generator=gen(1)).separators[0])
    z = grid_density_sample(20_000, density, generator=gen(3))
    c = [torch.searchsorted(sep, z[:, i].contiguous(), right=True) - 1 for i, sep in enumerate(density.separators)]
    cells = set((c[0] + 4 * c[1]).tolist())
    assert cells.isdisjoint(empty) and len(cells) == 11
    with pytest.raises(ValueError, match="4 x 4 grid"):
        make_grid_density([3, 4], priors="non_factorized")


def test_the_non_factorized_grid_is_one_override_on_the_2d_data():
    cfg = compose_config(["experiment=cliff2d", "data.priors=non_factorized"])
    data = instantiate(cfg.data)
    assert (data.density.priors == 0).sum() == 5 and len(data.observations) == 5000
    c = [torch.searchsorted(sep, data.latents[:, i].contiguous(), right=True).clamp(max=4) - 1
         for i, sep in enumerate(data.density.separators)]
    assert set((c[0] + 4 * c[1]).tolist()).isdisjoint({2, 3, 8, 12, 13})
