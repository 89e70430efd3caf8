"""The data contract shared by every ground-truth-factor dataset.

A dataset is a set of N images with integer factor classes. The training loader yields *batches of
indices* (no per-sample Python); ``on_after_batch_transfer`` turns them into (images, factors) on the
device the batch landed on, so procedural data is rendered there and stored data is gathered there.
Training uses the whole dataset; evaluation uses a fixed subset chosen by ``eval_seed`` (papers'
protocol: QLAE paper §5, after Locatello et al. 2019).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset


def _rank_slice(batch_size: int, parts: int = 1) -> slice | torch.Tensor:
    """This process's rows of a global batch of B under data-parallel training. The batch is cut into ``parts``
    equal consecutive parts (2 for a model that cuts each batch in two, e.g. FactorVAE's positives and
    second-half negatives) and rank r of N takes rows [r·P/N, (r+1)·P/N) of each part of P = B/parts rows (the data
    module checks that parts·N divides B): with one part, rows [r·B/N, (r+1)·B/N). So the N ranks together see
    exactly the batch a single process would, and the k-th parts of their batches, in rank order, make up the global
    batch's k-th part."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return slice(0, batch_size)
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    part = batch_size // parts
    share = part // world
    if parts == 1:
        return slice(rank * share, (rank + 1) * share)
    return torch.cat([torch.arange(k * part + rank * share, k * part + (rank + 1) * share) for k in range(parts)])


class IndexStream(IterableDataset):
    """Endless stream of index batches: a fresh permutation per epoch, cut into global batches of ``batch_size``
    (no replacement within an epoch); under data-parallel training each rank yields its rows of every global batch
    (:func:`_rank_slice`, the batch cut into ``parts``). ``start`` batches are skipped (a resumed run continues the
    stream where its checkpoint left it)."""

    def __init__(self, n: int, batch_size: int, seed: int, start: int = 0, parts: int = 1):
        self.n, self.batch_size, self.seed, self.start, self.parts = n, batch_size, seed, int(start), int(parts)

    def __iter__(self) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 100_003)
        mine = _rank_slice(self.batch_size, self.parts)
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
    instance repeats them). Friede et al.'s (App. 6) and disentanglement_lib's training distribution.

    ``factors``: the (N, n_factors) class table of the dataset; every combination of factor values must occur."""

    def __init__(self, factors: torch.Tensor, factor_sizes: Sequence[int], batch_size: int, seed: int, name: str = "",
                 start: int = 0, parts: int = 1):
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
        self.parts = int(parts)  # under data-parallel training: each rank's rows of a batch (:func:`_rank_slice`)

    def __iter__(self) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 100_003)
        mine = _rank_slice(self.batch_size, self.parts)
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


class ConstrainedStream(IterableDataset):
    """Endless index batches from the trainable samples ``allowed`` only (``data.split``, ``data.correlation``).
    Without weights: :class:`IndexStream`'s shuffled epochs, over positions in ``allowed``. With weights: i.i.d. draws
    with replacement, each sample with probability proportional to its weight (Roth et al.'s
    ``WeightedRandomSampler``), ``start`` batches' draws skipped on resume; each rank takes its rows
    (:func:`_rank_slice`)."""

    def __init__(self, allowed: torch.Tensor, weights: torch.Tensor | None, batch_size: int, seed: int,
                 start: int = 0, parts: int = 1):
        if allowed.numel() == 0 or (weights is None and allowed.numel() < batch_size):
            raise ValueError(f"only {allowed.numel()} samples remain for training under the split, fewer than "
                             f"model.batch_size={batch_size}")
        self.allowed, self.batch_size, self.seed, self.start, self.parts = allowed, int(batch_size), int(seed), int(
            start), int(parts)
        self.weights = None if weights is None else weights.double() / weights.double().sum()

    def __iter__(self) -> Iterator[torch.Tensor]:
        if self.weights is None:
            for positions in IndexStream(self.allowed.numel(), self.batch_size, self.seed, self.start, self.parts):
                yield self.allowed[positions]
            return
        gen = torch.Generator().manual_seed(self.seed * 100_003 + 7)
        mine = _rank_slice(self.batch_size, self.parts)
        for _ in range(self.start):
            torch.multinomial(self.weights, self.batch_size, replacement=True, generator=gen)
        while True:
            pick = torch.multinomial(self.weights, self.batch_size, replacement=True, generator=gen)
            yield self.allowed[pick][mine]


SAMPLINGS = ("epochs", "uniform_factors")


class FactorDataModule(pl.LightningDataModule):
    """Base LightningDataModule for images + integer factor labels.

    Subclasses set ``factor_names``, ``factor_sizes``, ``num_channels``, ``resolution``, ``num_samples``
    and implement :meth:`gather`.
    """

    name: str = "factors"
    continuous_factors: bool = False  # factors stored in fixed point (balls, cliff2d): no splits or correlations

    def __init__(self, batch_size: int = 64, eval_size: int = 10_000, eval_seed: int = 0, seed: int = 0,
                 sampling: str = "epochs", split: str = "random", split_ratio: float = 0.15,
                 split_keep: Sequence[str] = (), correlation=None):
        super().__init__()
        from .constraints import SPLITS

        if split not in SPLITS:
            raise ValueError(f"data.split must be one of {list(SPLITS)} (got {split!r})")
        if (split != "random" or correlation) and self.continuous_factors:
            raise ValueError(f"data.split and data.correlation need discrete factors; {type(self).__name__}'s are "
                             f"continuous")
        if (split != "random" or correlation) and sampling != "epochs":
            raise ValueError(f"data.sampling={sampling} cannot be combined with data.split or data.correlation "
                             f"(they define the training distribution themselves); use data.sampling=epochs")
        # train-time constraints (disentangle.data.constraints): held-out combinations and correlated pairs
        self.split, self.split_ratio, self.split_keep = split, float(split_ratio), tuple(split_keep or ())
        self.correlation = [dict(c) for c in correlation] if correlation else []
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
        # into how many equal parts the model cuts each batch (its batch_parts, set by
        # disentangle.runtime.run.build): under data-parallel training each rank takes its share of every part
        # (:func:`_rank_slice`)
        self.batch_parts = 1
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
        parts = self.batch_parts
        if self.batch_size % world:
            raise ValueError(f"model.batch_size={self.batch_size} is the global batch: it must divide evenly over the "
                             f"{world} processes (trainer.devices x trainer.num_nodes)")
        if self.batch_size % (world * parts):
            raise ValueError(f"model.batch_size={self.batch_size} is the global batch, which the model cuts in "
                             f"{parts}: each part must divide evenly over the {world} processes")
        if self.constrained:
            stream = self._constrained_stream(start, parts)
        elif self.sampling == "uniform_factors":
            stream = UniformFactorStream(self.factor_table(), self.factor_sizes, self.batch_size, self.seed, self.name,
                                         start=start, parts=parts)
        else:
            stream = IndexStream(self.num_samples, self.batch_size, self.seed, start=start, parts=parts)
        return DataLoader(stream, batch_size=None, num_workers=0)

    @property
    def constrained(self) -> bool:
        """True when training samples under ``data.split`` or ``data.correlation`` (not the whole grid uniformly)."""
        return self.split != "random" or bool(self.correlation)

    def heldout_mask(self) -> torch.Tensor:
        """(N,) bool: the samples whose factor combination ``data.split`` keeps out of training."""
        from .constraints import heldout_mask

        table = self.factor_table().numpy()
        return torch.from_numpy(heldout_mask(table, self.factor_sizes, self.factor_names, self.split,
                                             self.split_ratio, self.split_keep, dataset=self.name))

    def heldout_indices(self) -> torch.Tensor:
        """Indices of the held-out combinations (empty for ``data.split=random``): an evaluation set of their own."""
        return torch.nonzero(self.heldout_mask()).flatten()

    def training_weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The trainable indices and, under ``data.correlation``, their sampling weights (None: uniform)."""
        from .constraints import correlation_weights, parse_correlation

        allowed = torch.nonzero(~self.heldout_mask()).flatten()
        pairs = parse_correlation(self.correlation, self.factor_names)
        if not pairs:
            return allowed, None
        table = self.factor_table()[allowed].numpy()
        return allowed, torch.from_numpy(correlation_weights(table, self.factor_sizes, pairs))

    def _constrained_stream(self, start: int, parts: int):
        allowed, weights = self.training_weights()
        return ConstrainedStream(allowed, weights, self.batch_size, self.seed, start=start, parts=parts)

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
