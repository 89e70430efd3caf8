"""Models with several updates per step under real multi-process data parallelism (gloo on CPU): the TC
discriminator's models and the GANs train under ``trainer=ddp``, every network's gradients are averaged, so all
processes end with the same weights and optimizer states; the discriminator's negatives are the single-process
negatives of the global batch (in training: tests/test_ddp_negatives.py). KLM, NHP and Cliff (per-process batch
statistics) train the same way."""
from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import FAST, ROOT, run_cli

from disentangle.regularizers.tc_discriminator import permute_across_processes, permute_latents

B, N_LATENTS, WIDTH = 8, 3, 2  # a global batch of 8 samples of 3 latents, 2 columns each (e.g. one-hot codes)


def _samples() -> torch.Tensor:
    return torch.arange(B * N_LATENTS * WIDTH, dtype=torch.float32).reshape(B, N_LATENTS * WIDTH)


def _negatives_on_rank(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(1234 + rank)  # the processes' global generators differ: they must not decide
        local = _samples().chunk(world)[rank]
        torch.save(permute_across_processes(local, N_LATENTS, torch.Generator().manual_seed(7)), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_processes_draw_the_negatives_one_process_draws_from_the_same_global_batch(tmp_path):
    """"Same": the global batch is the ranks' slices in rank order, and every process's permutation generator is in
    the single process's state; then the concatenated per-rank negatives are exactly the single process's permuted
    batch (tests/test_ddp_negatives.py checks that training meets both conditions)."""
    out = str(tmp_path / "neg")
    mp.spawn(_negatives_on_rank, args=(2, f"file://{tmp_path / 'store'}", out), nprocs=2, join=True)
    two = torch.cat([torch.load(f"{out}.{r}") for r in range(2)])
    one = permute_latents(_samples(), N_LATENTS, generator=torch.Generator().manual_seed(7))
    assert torch.equal(two, one)
    assert torch.equal(permute_across_processes(_samples(), N_LATENTS, torch.Generator().manual_seed(7)), one)
    # each latent's block is a permutation of that latent's column block across the batch
    blocks = two.reshape(B, N_LATENTS, WIDTH)
    for j in range(N_LATENTS):
        assert sorted(blocks[:, j, 0].tolist()) == sorted(_samples().reshape(B, N_LATENTS, WIDTH)[:, j, 0].tolist())
    assert not torch.equal(two, _samples())  # something was permuted


DDP = [o for o in FAST if o not in ("print_summary=false",)] + ["print_summary=false", "trainer=ddp",
                                                                 "trainer.devices=2", "data=shapes2d"]
CASES = {
    "factorvae": ["model=factorvae"],                              # Gaussian + TC discriminator, second-batch negatives
    "qlinfowgan_gp": ["model=qlinfowgan_gp", "trainer.max_steps=10"],  # critic + generator (2 generator updates)
    "tripod+cliff": ["model=tripod", "+regularizer=cliff"],        # KLM, NHP and Cliff on each process's slice
    "factordvae_friede": ["model=factordvae_friede"],              # categorical latent, same-batch negatives
}
# factordvae_friede takes factorvae's code path (the negatives option aside): make test-slow runs it
SLOW = {"factordvae_friede"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_every_network_stays_identical_across_processes(case, tmp_path):
    dump = tmp_path / "ranks"
    res = run_cli(*DDP, *CASES[case], "+callbacks.rank_dump._target_=ddp_probe.RankStateDump",
                  f"+callbacks.rank_dump.path={dump}", f"hydra.run.dir={tmp_path / 'run'}", timeout=300,
                  env={"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])})
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] > 0
    ranks = [torch.load(dump / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] > 0
    a, b = (r["state_dict"] for r in ranks)
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{case}: parameters differ across processes (gradients not averaged): {different[:5]}"
    assert len(ranks[0]["optimizers"]) == len(ranks[1]["optimizers"]) >= 1
    for i, (x, y) in enumerate(zip(ranks[0]["optimizers"], ranks[1]["optimizers"])):
        for p, state in x["state"].items():
            for key, value in state.items():
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(y["state"][p][key])), (case, i, p, key)
    if case in ("factorvae", "factordvae_friede", "qlinfowgan_gp"):
        assert len(ranks[0]["optimizers"]) == 2  # the discriminator's / generator's optimizer too
