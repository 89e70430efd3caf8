"""Intervention-based metrics that draw their own samples: the FactorVAE score and the BetaVAE score.

Both follow disentanglement_lib exactly, as Friede et al.'s code uses it (``david-friede/lddr``):
FactorVAE score — Kim & Mnih 2018, "Disentangling by Factorising", §4; BetaVAE score — Higgins et al. 2017,
"β-VAE: Learning Basic Visual Concepts with a Constrained Variational Framework", §3.

Unlike the other metrics these need the generative model, so they take a data module and an encoder:

* ``datamodule``: a :class:`disentangle.data.base.FactorDataModule` (duck-typed: ``factor_sizes``,
  ``num_samples`` and ``gather(indices: LongTensor) -> (images, factors)``). Factor vectors are drawn uniformly
  (with replacement, like disentanglement_lib, so any sample size works on any dataset) and mapped to dataset
  indices: through the module's factor table when it has one (``datamodule.data.factors``, prepared data),
  otherwise by the C-order ravel over ``factor_sizes`` that procedural modules use (see ``unravel`` in
  ``disentangle/data/procedural_module.py``). Every gathered batch is checked against the requested factors.
* ``encode``: ``images (B, C, H, W) float tensor -> (B, n_latents)`` tensor or array; called under
  ``torch.no_grad()`` on batches of about ``encode_batch_size`` images (whole points at a time).

torch is imported lazily, so importing ``disentangle.metrics`` stays torch-free.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from disentangle.checks import check_counts
from disentangle.metrics.common import as_numpy

__all__ = ["BETAVAE_SOLVER", "FACTORVAE_ACTIVE_STD", "betavae_score", "factorvae_score"]

# Latents whose global standard deviation is below this are "collapsed" and ignored (disentanglement_lib).
FACTORVAE_ACTIVE_STD = 0.05
# Friede et al.'s code (david-friede/lddr) uses newton-cg (disentanglement_lib: sklearn's default, lbfgs);
# both minimise the same L2-regularised objective, newton-cg converges more reliably on unscaled features.
BETAVAE_SOLVER = "newton-cg"

Encoder = Callable[[Any], Any]


# ----------------------------------------------------------------------------------------------------------------
# Sampling factor vectors and encoding their images
# ----------------------------------------------------------------------------------------------------------------
class _Sampler:
    """Draws factor vectors, turns them into images via the data module, and encodes them in large batches."""

    def __init__(self, datamodule: Any, encode: Encoder, device: Any, encode_batch_size: int, seed: int,
                 progress: str | None = None):
        self.datamodule, self.encode, self.device = datamodule, encode, device
        self.progress = progress  # progress-bar label, None = no bar
        self.sizes = np.array([int(s) for s in datamodule.factor_sizes], dtype=np.int64)
        if self.sizes.size == 0 or (self.sizes < 1).any():
            raise ValueError(f"data module has invalid factor_sizes {list(self.sizes)}")
        check_counts(encode_batch_size=(encode_batch_size, 1))
        self.encode_batch_size = int(encode_batch_size)
        self.rng = np.random.default_rng(seed)
        self.lookup = self._index_lookup()
        # more images than factor vectors: a nuisance variable (e.g. SmallNORB's instance) varies within a vector
        self.nuisance = int(datamodule.num_samples) > int(np.prod(self.sizes))
        self.generator = None
        if self.nuisance:
            import torch

            self.generator = torch.Generator().manual_seed(int(seed))
        self.n_latents: int | None = None

    def _index_lookup(self) -> np.ndarray | None:
        """Flat grid code -> dataset index from the module's factor table; None means the C-order ravel."""
        table = getattr(getattr(self.datamodule, "data", None), "factors", None)
        n_grid = int(np.prod(self.sizes))
        if table is None:
            if int(self.datamodule.num_samples) != n_grid:
                raise ValueError(
                    f"{type(self.datamodule).__name__} has {self.datamodule.num_samples} samples but its factor "
                    f"grid {list(self.sizes)} has {n_grid}, and no factor table to map factors to indices"
                )
            return None
        table = np.asarray(table, dtype=np.int64)
        lookup = np.full(n_grid, -1, dtype=np.int64)
        lookup[np.ravel_multi_index(tuple(table.T), tuple(self.sizes))] = np.arange(len(table))
        return lookup

    def factors(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform factor vectors of shape (*shape, n_factors)."""
        return self.rng.integers(0, self.sizes, size=(*shape, self.sizes.size))

    def _encode_flat(self, factors: np.ndarray) -> np.ndarray:
        """Latents (M, n_latents) of the images of factor vectors (M, n_factors), in one gather + encode."""
        import torch

        flat = np.ravel_multi_index(tuple(factors.T), tuple(self.sizes))
        pick = getattr(self.datamodule, "indices_for_factors", None)
        if self.nuisance and pick is not None:
            # several images per factor vector (SmallNORB's instance): a random one, as disentanglement_lib draws
            flat = as_numpy(pick(torch.as_tensor(factors), generator=self.generator))
        elif self.lookup is not None:
            flat = self.lookup[flat]
            if (flat < 0).any():
                raise ValueError("a sampled factor combination is missing from the dataset's factor table")
        indices = torch.as_tensor(flat, dtype=torch.long, device=self.device)
        with torch.no_grad():
            images, got = self.datamodule.gather(indices)
            if not np.array_equal(as_numpy(got), factors):
                raise RuntimeError(
                    "the data module returned other factors than requested: its index order does not match "
                    "the factor grid"
                )
            latents = as_numpy(self.encode(images)).astype(np.float64)
        if latents.ndim != 2 or latents.shape[0] != len(factors):
            raise ValueError(f"encode must return shape ({len(factors)}, n_latents), got {latents.shape}")
        if self.n_latents is not None and latents.shape[1] != self.n_latents:
            raise ValueError(f"encode returned {latents.shape[1]} latents, earlier {self.n_latents}")
        if not np.isfinite(latents).all():
            raise ValueError("encode returned NaN or infinite latents")
        self.n_latents = latents.shape[1]
        return latents

    def encode_points(self, factors: np.ndarray, stage: str = "") -> Any:
        """Yield (factors chunk (p, m, F), latents (p, m, L)) over chunks of whole points (m images per point)."""
        per_point = factors.shape[1]
        step = max(1, self.encode_batch_size // per_point)
        desc = f"{self.progress}: {stage}" if stage else self.progress
        with tqdm(total=len(factors), desc=desc, unit="pt", leave=False, disable=self.progress is None) as bar:
            for start in range(0, len(factors), step):
                chunk = factors[start : start + step]
                latents = self._encode_flat(chunk.reshape(-1, chunk.shape[-1]))
                bar.update(len(chunk))
                yield chunk, latents.reshape(len(chunk), per_point, -1)

    def usable_factors(self) -> np.ndarray:
        """Indices of factors with more than one value (only those can be the fixed/labelled factor)."""
        usable = self.sizes > 1
        for k in np.flatnonzero(~usable):
            warnings.warn(
                f"factor {k} has a single value; it is never chosen as the fixed factor",
                RuntimeWarning,
                stacklevel=3,
            )
        if usable.sum() < 2:
            raise ValueError(
                f"need at least 2 factors with more than one value, got factor_sizes {list(self.sizes)}"
            )
        return np.flatnonzero(usable)


# ----------------------------------------------------------------------------------------------------------------
# FactorVAE score
# ----------------------------------------------------------------------------------------------------------------
def _factorvae_votes(
    sampler: _Sampler,
    n_points: int,
    batch_size: int,
    usable: np.ndarray,
    global_var: np.ndarray,
    active: np.ndarray,
    stage: str,
) -> np.ndarray:
    """Vote counts (n_factors, n_latents): per point the fixed factor k votes for its least-varying latent."""
    ks = sampler.rng.choice(usable, size=n_points)
    factors = sampler.factors((n_points, batch_size))
    points = np.arange(n_points)
    # Every vector of a point shares the fixed factor's value with the point's first vector.
    factors[points, :, ks] = factors[points, 0, ks][:, None]
    active_idx = np.flatnonzero(active)
    votes = np.zeros((sampler.sizes.size, global_var.size), dtype=np.int64)
    done = 0
    for chunk, latents in sampler.encode_points(factors, stage):
        local_var = latents[:, :, active_idx].var(axis=1, ddof=1)
        # disentanglement_lib records the argmin's position within the active subset as the latent index;
        # mapping it back to the latent itself only relabels columns one-to-one, so the score is identical.
        best = active_idx[np.argmin(local_var / global_var[active_idx], axis=1)]
        np.add.at(votes, (ks[done : done + len(chunk)], best), 1)
        done += len(chunk)
    return votes


def factorvae_score(
    datamodule: Any,
    encode: Encoder,
    *,
    n_train: int = 10_000,
    n_eval: int = 5_000,
    batch_size: int = 64,
    n_variance: int = 10_000,
    seed: int = 0,
    device: Any = "cpu",
    encode_batch_size: int = 1024,
    progress: bool = False,
) -> dict[str, Any]:
    """FactorVAE disentanglement score (Kim & Mnih 2018 §4; disentanglement_lib settings).

    1. Global variances of the latents over ``n_variance`` random samples (ddof=1); a latent is active if its
       standard deviation is >= 0.05. No active latent ⇒ score 0.
    2. Each of ``n_train`` train and ``n_eval`` eval points: pick a factor k uniformly, draw ``batch_size``
       factor vectors, set factor k of all of them to that of the first, encode, and take the per-latent
       variance (ddof=1) divided by the global variance over the active latents; the point votes
       (k, argmin latent).
    3. The majority-vote classifier maps each latent to the factor with most train votes; the score is its
       accuracy on the eval votes (``"train_accuracy"`` on the train votes).

    Factors with a single value are never picked as k (RuntimeWarning); fewer than 2 multi-valued factors,
    ``batch_size`` < 2 or ``n_variance`` < 2 (ddof=1 needs two samples) raise ValueError. Returns
    ``{"factorvae": float, "train_accuracy": float, "n_active": int, "active": (n_latents,) bool,
    "global_variance": (n_latents,)}``. Reported ×100 in the papers.
    """
    check_counts(n_train=(n_train, 1), n_eval=(n_eval, 1), batch_size=(batch_size, 2), n_variance=(n_variance, 2))
    sampler = _Sampler(datamodule, encode, device, encode_batch_size, seed, "factorvae" if progress else None)
    usable = sampler.usable_factors()

    reference = sampler.factors((int(n_variance), 1))
    latents = np.concatenate([z[:, 0] for _, z in sampler.encode_points(reference, "variances")])
    global_var = latents.var(axis=0, ddof=1)
    active = np.sqrt(global_var) >= FACTORVAE_ACTIVE_STD
    result = {"n_active": int(active.sum()), "active": active, "global_variance": global_var}
    if not active.any():
        return {"factorvae": 0.0, "train_accuracy": 0.0, **result}

    train_votes = _factorvae_votes(sampler, int(n_train), int(batch_size), usable, global_var, active, "train")
    eval_votes = _factorvae_votes(sampler, int(n_eval), int(batch_size), usable, global_var, active, "eval")
    classifier = train_votes.argmax(axis=0)  # the factor each latent votes for most often
    columns = np.arange(train_votes.shape[1])
    train_acc = train_votes[classifier, columns].sum() / train_votes.sum()
    eval_acc = eval_votes[classifier, columns].sum() / eval_votes.sum()
    return {"factorvae": float(eval_acc), "train_accuracy": float(train_acc), **result}


# ----------------------------------------------------------------------------------------------------------------
# BetaVAE score
# ----------------------------------------------------------------------------------------------------------------
def _betavae_points(
    sampler: _Sampler, n_points: int, batch_size: int, usable: np.ndarray, stage: str
) -> tuple[np.ndarray, np.ndarray]:
    """Features (n_points, n_latents) = mean |r(x1) − r(x2)| over pairs sharing factor k, and labels k."""
    ks = sampler.rng.choice(usable, size=n_points)
    first = sampler.factors((n_points, batch_size))
    second = sampler.factors((n_points, batch_size))
    points = np.arange(n_points)
    second[points, :, ks] = first[points, :, ks]  # row-wise copy: pair i shares factor k
    pairs = np.concatenate([first, second], axis=1)  # (n, 2B, F): one point's images go in the same call
    features = []
    for _, latents in sampler.encode_points(pairs, stage):
        features.append(np.abs(latents[:, :batch_size] - latents[:, batch_size:]).mean(axis=1))
    return np.concatenate(features), ks


def betavae_score(
    datamodule: Any,
    encode: Encoder,
    *,
    n_train: int = 10_000,
    n_eval: int = 5_000,
    batch_size: int = 64,
    seed: int = 0,
    device: Any = "cpu",
    encode_batch_size: int = 1024,
    progress: bool = False,
) -> dict[str, Any]:
    """BetaVAE disentanglement score (Higgins et al. 2017 §3; disentanglement_lib settings).

    Each of ``n_train`` train and ``n_eval`` eval points: pick a factor k uniformly, draw two batches of
    ``batch_size`` factor vectors, copy factor k of batch 1 into batch 2 row-wise, and use
    mean_batch |r(x1) − r(x2)| as the feature with label k. A ``LogisticRegression(solver="newton-cg")`` (the
    official code's choice, see :data:`BETAVAE_SOLVER`; otherwise sklearn defaults: L2, C=1) is fit on train;
    the score is its eval accuracy.

    Factors with a single value are never picked as k (RuntimeWarning); fewer than 2 multi-valued factors raise
    ValueError, as does an ``n_train`` so small that the train labels hold a single factor. Returns
    ``{"betavae": float, "train_accuracy": float}``. Reported ×100 in the papers.
    """
    check_counts(n_train=(n_train, 1), n_eval=(n_eval, 1), batch_size=(batch_size, 1))
    sampler = _Sampler(datamodule, encode, device, encode_batch_size, seed, "betavae" if progress else None)
    usable = sampler.usable_factors()
    x_train, y_train = _betavae_points(sampler, int(n_train), int(batch_size), usable, "train")
    if np.unique(y_train).size < 2:  # before the eval points are drawn and encoded
        raise ValueError(f"n_train={n_train} train points cover a single factor; use more points")
    x_eval, y_eval = _betavae_points(sampler, int(n_eval), int(batch_size), usable, "eval")
    model = LogisticRegression(solver=BETAVAE_SOLVER, random_state=seed)
    # Thin matrices: multi-threaded BLAS only adds overhead (see infomec._fit_log_loss).
    with threadpool_limits(limits=1, user_api="blas"):
        model.fit(x_train, y_train)
        train_acc = model.score(x_train, y_train)
        eval_acc = model.score(x_eval, y_eval)
    return {"betavae": float(eval_acc), "train_accuracy": float(train_acc)}
