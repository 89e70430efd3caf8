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
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class IndexStream(IterableDataset):
    """Endless stream of index batches: a fresh permutation per epoch, cut into batches (no replacement
    within an epoch). Each distributed rank draws from its own seed."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed

    def __iter__(self) -> Iterator[torch.Tensor]:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        worker = get_worker_info()
        stream_id = rank * 1000 + (worker.id if worker else 0)
        gen = torch.Generator().manual_seed(self.seed * 100_003 + stream_id)
        while True:
            order = torch.randperm(self.n, generator=gen)
            for start in range(0, self.n - self.batch_size + 1, self.batch_size):
                yield order[start : start + self.batch_size]


class FactorDataModule(pl.LightningDataModule):
    """Base LightningDataModule for images + integer factor labels.

    Subclasses set ``factor_names``, ``factor_sizes``, ``num_channels``, ``resolution``, ``num_samples``
    and implement :meth:`gather`.
    """

    name: str = "factors"

    def __init__(self, batch_size: int = 64, eval_size: int = 10_000, eval_seed: int = 0, seed: int = 0):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"data.batch_size must be >= 1 (got {batch_size})")
        if int(eval_size) < 1:
            raise ValueError(f"data.eval_size must be >= 1 (got {eval_size})")
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

    def train_dataloader(self) -> DataLoader:
        stream = IndexStream(self.num_samples, self.batch_size, self.seed)
        return DataLoader(stream, batch_size=None, num_workers=0)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        if isinstance(batch, torch.Tensor) and batch.dtype == torch.long and batch.dim() == 1:
            return self.gather(batch)
        return batch
