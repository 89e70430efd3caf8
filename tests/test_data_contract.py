"""One contract for every ground-truth-factor data module, procedural and prepared alike."""
import numpy as np
import pytest
import raw_fixtures
import torch

from disentangle.data import PreparedDataModule, ProceduralDataModule

PREPARED = ["shapes3d", "dsprites", "mpi3d", "falcor3d", "isaac3d"]


def make(kind: str, tmp_path):
    if kind in ("sprites", "shapes2d"):
        return ProceduralDataModule(kind, resolution=32, batch_size=8, eval_size=20, eval_seed=3)
    _, truth = raw_fixtures.WRITERS[kind](tmp_path)
    sizes = [int(s) for s in truth.max(0) + 1]
    # raw files only: the module converts them once on first use
    return PreparedDataModule(kind, root=tmp_path, batch_size=8, eval_size=min(20, len(truth)), eval_seed=3,
                              factor_sizes=sizes)


@pytest.mark.parametrize("kind", ["sprites", "shapes2d", *PREPARED])
def test_data_module_contract(kind, tmp_path):
    dm = make(kind, tmp_path)
    assert len(dm.factor_names) == len(dm.factor_sizes) == dm.n_factors > 0
    assert dm.num_samples == int(np.prod(dm.factor_sizes)) or kind in PREPARED
    # the training loader yields index batches; the transfer hook turns them into (images, factors)
    batch = next(iter(dm.train_dataloader()))
    assert batch.dtype == torch.long and batch.shape == (8,)
    images, factors = dm.on_after_batch_transfer(batch, 0)
    r = dm.resolution
    assert images.shape == (8, dm.num_channels, r, r) and images.dtype == torch.float32
    assert 0 <= images.min() and images.max() <= 1
    assert factors.shape == (8, dm.n_factors) and factors.dtype == torch.int64
    assert (factors >= 0).all() and (factors < torch.tensor(dm.factor_sizes)).all()
    # the evaluation subset is fixed by its seed and lies inside the dataset
    first, second = dm.eval_indices(), dm.eval_indices()
    assert torch.equal(first, second) and len(first.unique()) == len(first) == dm.eval_size
    assert first.max() < dm.num_samples
    gathered = torch.cat([f for _, f in dm.eval_batches(7)])
    assert torch.equal(gathered, dm.gather(first)[1])
    # gathering is deterministic
    again, _ = dm.gather(batch)
    assert torch.equal(images, again)


def test_eval_subset_changes_with_its_seed():
    a = ProceduralDataModule("sprites", eval_size=50, eval_seed=0).eval_indices()
    b = ProceduralDataModule("sprites", eval_size=50, eval_seed=1).eval_indices()
    assert not torch.equal(a, b)
