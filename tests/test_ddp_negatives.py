"""What the TC discriminator trains on under data parallelism (docs/runs.md, "Training on several GPUs"): in a real
2-process gloo run its positives and negatives are, at every step, the rows and permutations one process forms from
the same global batch; only each process's sampling noise and float summation order differ. The probe
(tests/ddp_negatives_probe.py) lets the Gaussian latent draw its noise but feeds the mean on, so the discriminator's
inputs are compared value by value."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import FAST, ROOT, compose_config

from disentangle.errors import ConfigError
from disentangle.regularizers import AdversarialTotalCorrelation
from disentangle.runtime.run import build, train

STEPS = 3
COMMON = [*FAST, "data=shapes2d", "model=factorvae", f"trainer.max_steps={STEPS}", "~callbacks.evaluation",
          "callbacks.checkpoint.every_n_train_steps=1000", "model.regularizers.tc_discriminator.hidden=64",
          "+callbacks.disc_inputs._target_=ddp_negatives_probe.DiscriminatorInputs"]
TOLERANCE = 1e-5  # float summation order: per-process gradient means averaged by DDP vs one mean, through Adam


def _global_batch(dump) -> list[dict]:
    """Every step's discriminator inputs and loss over the global batch: the processes' records in rank order
    (positives and negatives concatenated, losses averaged: the processes hold equal shares)."""
    ranks = [torch.load(path, weights_only=True) for path in sorted(dump.glob("rank*.pt"))]
    assert ranks and all(len(r) == STEPS for r in ranks)
    return [{"joint": torch.cat([r[s]["joint"] for r in ranks]),
             "negatives": torch.cat([r[s]["negatives"] for r in ranks]),
             "loss": torch.stack([r[s]["loss"] for r in ranks]).mean(), "ranks": len(ranks)} for s in range(STEPS)]


# second_batch checks both the rows (the global batch's halves) and the permutations; same_batch (Friede et al.'s
# models) only the permutations, which second_batch checks too: make test-slow runs it
@pytest.mark.parametrize("negatives", ["second_batch", pytest.param("same_batch", marks=pytest.mark.slow)])
def test_two_processes_train_the_discriminator_on_the_rows_and_permutations_one_process_uses(negatives, tmp_path):
    args = [*COMMON, f"model.regularizers.tc_discriminator.negatives={negatives}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    two_proc = subprocess.Popen(  # the real CLI under trainer=ddp: 2 gloo processes ...
        [sys.executable, "-m", "disentangle.train", *args, "trainer=ddp", "trainer.devices=2",
         f"+callbacks.disc_inputs.path={tmp_path / 'two'}", f"hydra.run.dir={tmp_path / 'two_run'}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:  # ... while this process trains the same model alone on the same global batches
        train(compose_config([*args, f"+callbacks.disc_inputs.path={tmp_path / 'one'}"], output_dir=tmp_path / "one_run"))
        _, stderr = two_proc.communicate(timeout=240)
    finally:
        if two_proc.poll() is None:
            two_proc.kill()
    assert two_proc.returncode == 0, stderr[-3000:]
    one, two = _global_batch(tmp_path / "one"), _global_batch(tmp_path / "two")
    assert one[0]["ranks"] == 1 and two[0]["ranks"] == 2
    differences = []
    for a, b in zip(one, two):
        assert a["joint"].shape == b["joint"].shape and len(a["joint"]) == (8 if negatives == "second_batch" else 16)
        assert not torch.equal(a["negatives"], a["joint"])  # something was permuted
        differences.append({key: (a[key] - b[key]).abs().max().item() for key in ("joint", "negatives", "loss")})
    print(f"{negatives}: max |2 processes - 1 process| per step: {differences}")
    for step, diff in enumerate(differences):
        assert max(diff.values()) < TOLERANCE, (negatives, step, diff)


def test_the_permutations_depend_on_the_runs_seed_and_the_step_only():
    torch.manual_seed(3)
    a = AdversarialTotalCorrelation()
    torch.rand(100)  # another process's generators, at another state
    b = AdversarialTotalCorrelation()
    torch.manual_seed(4)
    c = AdversarialTotalCorrelation()

    def draws(reg, step):
        return torch.rand(8, generator=reg.permutation_generator(step))

    assert torch.equal(draws(a, 5), draws(b, 5))  # same seed and step: the same draws, whatever the global state
    assert not torch.equal(draws(a, 6), draws(c, 6))  # another seed
    assert not torch.equal(draws(a, 7), draws(b, 8))  # another step
    assert not torch.equal(draws(a, 9), draws(a, 9))  # a repeated call at one step (no trainer): fresh draws


def test_a_global_batch_whose_halves_do_not_divide_over_the_processes_is_refused(tmp_path):
    cfg = compose_config([*FAST, "data=shapes2d", "model=factorvae", "model.batch_size=18", "trainer=ddp",
                          "trainer.devices=2"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="model.batch_size=18 is the global batch, cut in 2 .* 2 processes"):
        build(cfg)
