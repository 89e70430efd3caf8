"""The data contract shared by every ground-truth-factor dataset.

A dataset is a set of N images with integer factor classes. The training loader yields *batches of
indices* (no per-sample Python); ``on_after_batch_transfer`` turns them into (images, factors) on the
device the batch landed on, so procedural data is rendered there and stored data is gathered there.
Training uses the whole dataset; evaluation uses a fixed subset chosen by ``eval_seed`` (papers'
protocol: Locatello et al. 2019, spec qlae.md §7.7).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset


def _rank_slice(batch_size: int) -> slice:
    """This process's share of a global batch under data-parallel training: rank r of N takes rows
    [r·B/N, (r+1)·B/N) (the data module checks that N divides B), so the N ranks together see exactly the batch a
    single process would."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return slice(0, batch_size)
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    share = batch_size // world
    return slice(rank * share, (rank + 1) * share)


class IndexStream(IterableDataset):
    """Endless stream of index batches: a fresh permutation per epoch, cut into global batches of ``batch_size``
    (no replacement within an epoch); under data-parallel training each rank yields its slice of every global batch
    (:func:`_rank_slice`). ``start`` batches are skipped (a resumed run continues the stream where its checkpoint
    left it)."""

    def __init__(self, n: int, batch_size: int, seed: int, start: int = 0):
        self.n, self.batch_size, self.seed, self.start = n, batch_size, seed, int(start)

    def __iter__(self) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 100_003)
        mine = _rank_slice(self.batch_size)
        per_epoch = max(1, len(range(0, self.n - self.batch_size + 1, self.batch_size)))
        skip_epochs, skip = divmod(self.start, per_epoch)
        for _ in range(skip_epochs):  # whole epochs: one permutation each keeps the generator in step
            torch.randperm(self.n, generator=gen)
        while True:
            order = torch.randperm(self.n, generator=gen)
            for start in range(skip * self.batch_size, self.n - self.batch_size + 1, self.batch_size):
                yield order[start : start + self.batch_size][mine]
            skip = 0


class UniformFactorStream(IterableDataset):
    """Endless stream of index batches whose factor vectors are i.i.d. uniform: each factor drawn uniformly over its
    values, with replacement, then one of the images with those factors (uniformly, if a nuisance such as an object
    instance repeats them). Friede et al.'s and disentanglement_lib's training distribution (categorical_vae.md §11).

    ``factors``: the (N, n_factors) class table of the dataset; every combination of factor values must occur."""

    def __init__(self, factors: torch.Tensor, factor_sizes: Sequence[int], batch_size: int, seed: int, name: str = "",
                 start: int = 0):
        sizes = torch.as_tensor([int(s) for s in factor_sizes], dtype=torch.long)
        # mixed-radix place values, C order: radix_i = prod(sizes[i + 1:])
        self.radix = torch.cat([sizes.flip(0).cumprod(0).flip(0)[1:], torch.ones(1, dtype=torch.long)])
        codes = (factors.long().cpu() * self.radix).sum(1)
        self.codes, self.order = torch.sort(codes)
        present = torch.unique_consecutive(self.codes).numel()
        total = int(sizes.prod())
        if present != total:
            raise ValueError(
                f"data.sampling=uniform_factors needs every combination of factor values, but {name or 'the data'} "
                f"has {present} of {total}"
            )
        self.sizes, self.batch_size, self.seed, self.start = sizes, int(batch_size), int(seed), int(start)

    def __iter__(self) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 100_003)
        mine = _rank_slice(self.batch_size)
        for _ in range(self.start):  # a resumed run: the same draws as the skipped batches, in the same shapes
            torch.rand(self.batch_size, len(self.sizes), generator=gen)
            torch.rand(self.batch_size, generator=gen)
        while True:
            draws = (torch.rand(self.batch_size, len(self.sizes), generator=gen) * self.sizes).long()
            codes = (draws * self.radix).sum(1)
            lo = torch.searchsorted(self.codes, codes, right=False)
            hi = torch.searchsorted(self.codes, codes, right=True)
            pick = lo + (torch.rand(self.batch_size, generator=gen) * (hi - lo)).long()
            yield self.order[pick][mine]


SAMPLINGS = ("epochs", "uniform_factors")


class FactorDataModule(pl.LightningDataModule):
    """Base LightningDataModule for images + integer factor labels.

    Subclasses set ``factor_names``, ``factor_sizes``, ``num_channels``, ``resolution``, ``num_samples``
    and implement :meth:`gather`.
    """

    name: str = "factors"

    def __init__(self, batch_size: int = 64, eval_size: int = 10_000, eval_seed: int = 0, seed: int = 0,
                 sampling: str = "epochs"):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"data.batch_size must be >= 1 (got {batch_size})")
        if int(eval_size) < 1:
            raise ValueError(f"data.eval_size must be >= 1 (got {eval_size})")
        if sampling not in SAMPLINGS:
            raise ValueError(f"data.sampling must be one of {list(SAMPLINGS)} (got {sampling!r})")
        self.sampling = sampling
        self.batch_size = int(batch_size)
        self.eval_size = int(eval_size)
        self.eval_seed = int(eval_seed)
        self.seed = int(seed)
        self.factor_names: tuple[str, ...] = ()
        self.factor_sizes: tuple[int, ...] = ()
        self.num_channels = 3
        self.resolution = 64
        self.num_samples = 0

    # -- what subclasses provide -------------------------------------------------------------------
    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(images float (B, C, R, R) in [0, 1], factors int64 (B, n_factors)) on ``indices.device``."""
        raise NotImplementedError

    # -- shared behaviour --------------------------------------------------------------------------
    @property
    def n_factors(self) -> int:
        return len(self.factor_sizes)

    def _check_metadata(self, names: Sequence[str] | None, sizes: Sequence[int] | None) -> None:
        """Configured factor names/sizes (if given) must agree with what the data provides."""
        if sizes is not None and tuple(int(s) for s in sizes) != tuple(self.factor_sizes):
            raise ValueError(
                f"data.factor_sizes={list(sizes)} does not match {self.name}'s {list(self.factor_sizes)}"
            )
        if names is not None and tuple(names) != tuple(self.factor_names):
            raise ValueError(
                f"data.factor_names={list(names)} does not match {self.name}'s {list(self.factor_names)}"
            )
        if self.eval_size > self.num_samples:
            raise ValueError(
                f"data.eval_size={self.eval_size} exceeds the {self.num_samples} samples of {self.name}"
            )

    def eval_indices(self) -> torch.Tensor:
        """The fixed evaluation subset: ``eval_size`` indices drawn without replacement by ``eval_seed``."""
        gen = torch.Generator().manual_seed(self.eval_seed)
        return torch.randperm(self.num_samples, generator=gen)[: self.eval_size]

    def eval_batches(self, batch_size: int, device: torch.device | str = "cpu", limit: int | None = None):
        """Iterate over the evaluation subset as (images, factors) batches on ``device``."""
        indices = self.eval_indices()
        if limit is not None:
            indices = indices[:limit]
        for chunk in indices.split(batch_size):
            yield self.gather(chunk.to(device))

    def factor_table(self) -> torch.Tensor:
        """(N, n_factors) factor classes of every sample, on the CPU (for samplers that draw by factors)."""
        return self.gather(torch.arange(self.num_samples))[1].cpu()

    def train_dataloader(self) -> DataLoader:
        """Index batches: shuffled epochs without replacement (``sampling="epochs"``), or i.i.d. uniform factor
        vectors with replacement (``"uniform_factors"``)."""
        start = self.batches_done()
        world = self.trainer.world_size if self.trainer is not None else 1
        if self.batch_size % world:
            raise ValueError(f"model.batch_size={self.batch_size} is the global batch: it must divide evenly over the "
                             f"{world} processes (trainer.devices x trainer.num_nodes)")
        if self.sampling == "uniform_factors":
            stream = UniformFactorStream(self.factor_table(), self.factor_sizes, self.batch_size, self.seed, self.name,
                                         start=start)
        else:
            stream = IndexStream(self.num_samples, self.batch_size, self.seed, start=start)
        return DataLoader(stream, batch_size=None, num_workers=0)

    def batches_done(self) -> int:
        """Training batches this rank has already been through: 0 for a fresh run, the checkpoint's count for a run
        resumed with ``Trainer.fit(ckpt_path=...)`` (Lightning restores its loop counters before it asks for the
        loader), so the stream goes on with the batch an uninterrupted run would have drawn next."""
        trainer = self.trainer
        if trainer is None:
            return 0
        try:
            return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)
        except AttributeError:  # not fitting (e.g. a bare Trainer)
            return 0

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        if isinstance(batch, torch.Tensor) and batch.dtype == torch.long and batch.dim() == 1:
            return self.gather(batch)
        return batch
