"""Evaluation across batches and processes: the torchmetrics accumulator (cat over batches, sort by
evaluation-set position), its all-gather over two real gloo processes, and a real 2-process DDP training run
whose evaluation equals a single-process evaluation of the same weights (spec qlae.md §8; §7.7 for the fixed
evaluation subset)."""
import json
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import FAST, FIGURES, run_cli
from hydra.utils import instantiate
from omegaconf import OmegaConf

from disentangle.callbacks import shard_positions
from disentangle.metrics import dci, infomec
from disentangle.metrics.accumulate import (
    DisentanglementMetric,
    LatentFactorAccumulator,
    disentanglement_metrics,
)

INFOMEC = {"ksg_k": 3, "seed": 0}
DCI = {"max_depth": 3, "n_estimators": 5, "n_jobs": 1}
OPTIONS = {"infomec": INFOMEC, "dci": DCI}


def _dataset(n=120, n_z=4, seed=0):
    """Latents that carry two of three factors (so the metrics are not degenerate), per-image PSNR."""
    rng = np.random.default_rng(seed)
    factors = np.stack([rng.integers(0, k, n) for k in (3, 4, 5)], 1).astype(np.int64)
    latents = np.concatenate([factors[:, :2] + 0.1 * rng.standard_normal((n, 2)),
                              rng.standard_normal((n, n_z - 2))], 1).astype(np.float32)
    psnr = rng.uniform(10, 30, n)
    return latents, factors, psnr


def _mse(psnr):
    return 10.0 ** (-psnr / 10.0)  # the MSE that gives this PSNR


def _update_batches(metric, latents, factors, psnr, positions_batches):
    for pos in positions_batches:
        metric.update(torch.as_tensor(latents[pos]), torch.as_tensor(factors[pos]), torch.as_tensor(pos),
                      torch.as_tensor(psnr[pos]), torch.as_tensor(_mse(psnr)[pos]))


# -- the accumulator in one process --------------------------------------------------------------------------
def test_accumulator_concatenates_batches_and_sorts_by_position():
    latents, factors, psnr = _dataset()
    batches = [np.arange(s, min(s + 25, 120)) for s in range(0, 120, 25)]
    acc = LatentFactorAccumulator()
    _update_batches(acc, latents, factors, psnr, batches[::-1])  # out of order, uneven last batch
    out = acc.compute()
    np.testing.assert_array_equal(out["index"], np.arange(120))
    np.testing.assert_array_equal(out["latents"], latents)
    np.testing.assert_array_equal(out["factors"], factors)
    np.testing.assert_array_equal(out["psnr"], psnr)
    np.testing.assert_array_equal(out["mse"], _mse(psnr))
    assert out["latents"].dtype == np.float32 and out["factors"].dtype == np.int64
    acc.reset()
    acc.update(torch.as_tensor(latents[:3]), torch.as_tensor(factors[:3]), torch.tensor([2, 0, 1]))
    out = acc.compute()
    assert out["psnr"] is None and out["mse"] is None
    np.testing.assert_array_equal(out["latents"], latents[[1, 2, 0]])


@pytest.mark.filterwarnings("ignore:The ``compute`` method:UserWarning")
def test_accumulator_rejects_duplicate_positions_bad_shapes_and_no_data():
    latents, factors, _ = _dataset(n=10)
    acc = LatentFactorAccumulator()
    with pytest.raises(ValueError, match="no rows"):
        acc.compute()
    acc.update(torch.as_tensor(latents[:4]), torch.as_tensor(factors[:4]), torch.arange(4))
    acc.update(torch.as_tensor(latents[:2]), torch.as_tensor(factors[:2]), torch.arange(2))
    with pytest.raises(ValueError, match="accumulated twice"):
        acc.compute()
    with pytest.raises(ValueError, match="expected latents"):
        acc.update(torch.zeros(4), torch.as_tensor(factors[:4]), torch.arange(4))
    with pytest.raises(ValueError, match="batch sizes differ"):
        acc.update(torch.as_tensor(latents[:4]), torch.as_tensor(factors[:3]), torch.arange(4))
    with pytest.raises(ValueError, match="psnr must have shape"):
        acc.update(torch.as_tensor(latents[:4]), torch.as_tensor(factors[:4]), torch.arange(4),
                   torch.zeros(3))


def test_disentanglement_metric_equals_the_metric_functions():
    latents, factors, psnr = _dataset()
    metric = DisentanglementMetric(discrete_latents=False, options=OPTIONS)
    _update_batches(metric, latents, factors, psnr, [np.arange(60, 120), np.arange(0, 60)])
    out = metric.compute()
    info, d = infomec(factors, latents, discrete_latents=False, **INFOMEC), dci(factors, latents, **DCI)
    for key in ("infom", "infoe", "infoc"):
        assert out[key] == info[key], key
    assert (out["dci_d"], out["dci_i"], out["dci_c"]) == (d["d"], d["i"], d["c"])
    np.testing.assert_array_equal(out["nmi"], info["nmi"])
    np.testing.assert_array_equal(out["dci_importance"], d["importance"])
    assert out["psnr"] == pytest.approx(psnr.mean()) and out["mse"] == pytest.approx(_mse(psnr).mean())
    only_infomec = disentanglement_metrics(latents, factors, discrete_latents=False, metrics=["infomec"])
    assert "dci_d" not in only_infomec and "psnr" not in only_infomec


@pytest.mark.parametrize("n, batch_size, world", [(256, 48, 2), (256, 256, 2), (10, 3, 3), (5, 8, 4)])
def test_shards_deal_whole_single_process_batches_round_robin(n, batch_size, world):
    single = shard_positions(n, batch_size)
    shards = [shard_positions(n, batch_size, rank, world) for rank in range(world)]
    dealt = sorted((b for shard in shards for b in shard), key=lambda b: int(b[0]))
    assert [b.tolist() for b in dealt] == [b.tolist() for b in single]  # same batches, each exactly once
    assert [len(s) for s in shards] == [len(single[r::world]) for r in range(world)]


# -- the accumulator across two real processes ---------------------------------------------------------------
def _echo_metrics(latents, factors, *, discrete_latents, metrics, options, psnr, mse):
    """A metric_fn that returns what DisentanglementMetric.compute hands it. (The real estimators are checked
    on the same arrays above; sklearn's process pools in spawned children delay their exit by minutes.)"""
    return {"latents": latents, "factors": factors, "psnr": psnr, "mse": mse, "discrete": discrete_latents,
            "metrics": np.array(metrics), "ksg_k": options["infomec"]["ksg_k"],
            "max_depth": options["dci"]["max_depth"]}


def _gloo_worker(rank, world, init_file, out_dir, batch_size):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        latents, factors, psnr = _dataset()
        shard = [b.numpy() for b in shard_positions(len(latents), batch_size, rank, world)]
        acc = LatentFactorAccumulator()
        metric = DisentanglementMetric(discrete_latents=False, options=OPTIONS, metric_fn=_echo_metrics)
        for m in (acc, metric):
            if shard:
                _update_batches(m, latents, factors, psnr, shard)
            else:  # an empty shard still contributes zero rows of the right dtype and width
                m.update(torch.as_tensor(latents[:0]), torch.as_tensor(factors[:0]),
                         torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64),
                         torch.zeros(0, dtype=torch.float64))
        gathered = acc.compute()
        result = metric.compute()
        np.savez(os.path.join(out_dir, f"rank{rank}.npz"), n_local=sum(len(b) for b in shard), **gathered,
                 **{f"m_{k}": np.asarray(v) for k, v in result.items()})
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("batch_size", [25, 200])  # uneven shards; one rank with no rows at all
def test_accumulator_gathers_two_gloo_processes_into_the_single_process_matrix(tmp_path, batch_size):
    mp.spawn(_gloo_worker, args=(2, str(tmp_path / "init"), str(tmp_path), batch_size), nprocs=2, join=True)
    latents, factors, psnr = _dataset()
    local = [int(np.load(tmp_path / f"rank{rank}.npz")["n_local"]) for rank in (0, 1)]
    assert sum(local) == len(latents) and (0 in local) == (batch_size >= len(latents))
    for rank in (0, 1):  # all-gather: every rank holds the whole matrix, in evaluation-set order
        got = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_array_equal(got["index"], np.arange(len(latents)))
        for prefix in ("", "m_"):  # the accumulator's arrays, and what DisentanglementMetric hands metric_fn
            np.testing.assert_array_equal(got[prefix + "latents"], latents)
            np.testing.assert_array_equal(got[prefix + "factors"], factors)
            np.testing.assert_array_equal(got[prefix + "psnr"], psnr)
            np.testing.assert_array_equal(got[prefix + "mse"], _mse(psnr))
        assert not got["m_discrete"] and list(got["m_metrics"]) == ["infomec", "dci"]
        assert got["m_ksg_k"] == 3 and got["m_max_depth"] == 3


# -- a real 2-process DDP training run -----------------------------------------------------------------------
def test_ddp_training_evaluation_equals_single_process_evaluation_of_the_same_weights(tmp_path):
    """`trainer=ddp trainer.devices=2` on CPU (gloo): each rank encodes whole batches of the evaluation
    subset, rank 0 gathers, computes and writes. Re-evaluating the run's final checkpoint in one process gives
    the identical latent/factor matrix and identical metrics."""
    run_dir = tmp_path / "ddp"
    overrides = [o for o in FAST if not o.startswith("print_summary")] + [
        FIGURES, "model=ae", "data=shapes2d", "trainer=ddp", "trainer.devices=2",
        "callbacks.evaluation.batch_size=48",  # 256 rows: 6 batches, 3 per rank, the last one short
        "callbacks.evaluation.save_latents=true", "print_summary=false",
    ]
    res = run_cli(*overrides, f"hydra.run.dir={run_dir}", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Starting with 2 processes" in res.stdout + res.stderr

    # the same weights, evaluated by the same callback in this (single) process
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4
    stored = OmegaConf.create(ckpt["disentangle_config"])
    datamodule = instantiate(stored.data)
    model = instantiate(stored.model, **ckpt["disentangle_shape"])
    model.load_state_dict(ckpt["state_dict"])
    evaluator = instantiate(stored.callbacks.evaluation, output_dir=tmp_path / "single")
    # Lightning gives each of the 2 local DDP processes cpus // 2 intra-op threads; a convolution's reductions split
    # over another number of threads round differently (~1e-7), so this process encodes with what a rank had
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    try:
        evaluator.run(model, datamodule, step=4)
    finally:
        torch.set_num_threads(threads)

    ddp_arrays, single_arrays = np.load(run_dir / "latents.npz"), np.load(tmp_path / "single" / "latents.npz")
    for key in ("latents", "factors", "psnr", "mse"):
        np.testing.assert_array_equal(ddp_arrays[key], single_arrays[key], err_msg=key)
    ddp_record = json.loads((run_dir / "metrics.json").read_text())
    assert ddp_record.pop("precision") == "32-true" and ddp_record.pop("runtime")["device"] == "cpu"  # what ran
    single_record = json.loads((tmp_path / "single" / "metrics.json").read_text())
    ddp_record.pop("eval_seconds"), single_record.pop("eval_seconds")
    assert ddp_record == single_record
    assert ddp_record["n_samples"] == 256

    # only rank 0 wrote: one history line per evaluation (step 2 periodic, step 4 final)
    history = [json.loads(line) for line in (run_dir / "metrics_history.jsonl").read_text().splitlines()]
    assert [(h["step"], h["final"]) for h in history] == [(2, False), (4, True)]
    assert history[-1]["infom"] == ddp_record["infom"]
    for name in ("nmi_heatmap.png", "dci_importance.png", "interventions.png", "reconstructions.png"):
        assert (run_dir / name).stat().st_size > 1000, name
