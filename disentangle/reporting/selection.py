"""Unsupervised model selection by the straight-through gap Δ_ST of Friede et al. (§3.4, §6.3).

Δ_ST = |mean loss(y_hard) − mean loss(y_soft)| over a fixed stream of training batches, with the Gumbel noise scale
at 0, so that y_soft = softmax(ℓ) and y_hard = onehot(argmax ℓ). It is 0 for a model whose categorical posteriors
are already one-hot. Per dataset, the run with the smallest gap is selected (the "Selection" row of Table 1).

``straight_through_gap`` is the pure measurement on one model; ``select`` pools runs by dataset; the command line
is :mod:`disentangle.select`.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# "loss": the total training loss, γ·TC-estimate included for FactorDVAE (the authors' eval.py);
# "elbo": reconstruction + KL, what the paper's text says (Friede et al. §3.4). They coincide for γ = 0.
CRITERIA = ("loss", "elbo")
# "delta_st": the smallest straight-through gap (unsupervised, Friede et al. §6.3); "labels": the highest MIG
# on a semi-supervised run's held-out labelled examples (Locatello et al. 2020; Friede et al. §6.4)
RULES = ("delta_st", "labels")
METRIC_KEYS = ("mig", "dci_d", "sap", "modularity", "factorvae", "betavae", "infom", "infoe", "infoc")


def check_criterion(criterion: str) -> str:
    if criterion not in CRITERIA:
        raise ValueError(f"criterion: unknown {criterion!r}; choose from {', '.join(CRITERIA)}")
    return criterion


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"rule: unknown {rule!r}; choose from {', '.join(RULES)}")
    return rule


def straight_through_mode(model, hard: bool):
    """``model.straight_through_mode(hard)``: the model in its training-mode forward (so adversarial terms see the
    latent sample) with the Gumbel noise scale at 0 and the categorical latent soft (``hard=False``) or
    straight-through one-hot (``hard=True``)."""
    return model.straight_through_mode(hard)


def check_categorical(model) -> None:
    """One ValueError line unless the model's latent has Δ_ST's soft/hard relaxation (a categorical latent)."""
    spec = model.latent_spec
    if not spec.straight_through:
        raise ValueError(f"Δ_ST needs a categorical latent (model/latent=categorical); this model's is "
                         f"{spec.distribution or spec.module}")


def straight_through_gap(model, batches: Iterable[torch.Tensor], *, criterion: str = "loss",
                         progress: bool = False) -> dict:
    """Δ_ST of one model over ``batches`` of images (Friede et al. §3.4; computed as in
    their code's ``eval.py``).

    Each batch is passed once soft and once hard (same images); the batch-mean ``loss`` (every weighted term of
    the training step) and ``elbo`` (reconstruction + the latent's KL) are averaged over batches. Returns
    ``delta_st`` (for ``criterion``), ``delta_st_loss``, ``delta_st_elbo``, the four means and ``batches``."""
    import torch  # here, not at the top: `python -m disentangle.select --help` stays torch-free

    with torch.no_grad():
        return _straight_through_gap(model, batches, criterion, progress)


def _straight_through_gap(model, batches, criterion: str, progress: bool) -> dict:
    check_criterion(criterion)
    check_categorical(model)
    kl_terms = set(model.latent_spec.loss_terms)
    sums = {f"{kind}_{mode}": 0.0 for kind in CRITERIA for mode in ("soft", "hard")}
    n = 0
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="Δ_ST", unit="batch", leave=False)
    for x in batches:
        if model.split_batch:  # the model's loss sees the first half, as in its training step
            x = x.chunk(2)[0]
        for mode in ("soft", "hard"):
            with model.straight_through_mode(hard=mode == "hard"):
                terms, weights = model.loss_terms(x)
            loss = sum(weights[k] * v for k, v in terms.items())
            elbo = terms["reconstruction"] + sum(weights[k] * terms[k] for k in kl_terms)
            sums[f"loss_{mode}"] += float(loss)
            sums[f"elbo_{mode}"] += float(elbo)
        n += 1
    if n == 0:
        raise ValueError("Δ_ST needs at least one batch")
    means = {k: v / n for k, v in sums.items()}
    out = {f"delta_st_{kind}": abs(means[f"{kind}_hard"] - means[f"{kind}_soft"]) for kind in CRITERIA}
    out.update(delta_st=out[f"delta_st_{criterion}"], criterion=criterion, batches=n, **means)
    return out


def training_batches(datamodule, n_batches: int, device: torch.device | str = "cpu") -> Iterator[torch.Tensor]:
    """The first ``n_batches`` image batches of the data module's training stream (deterministic given its seed)."""
    import torch

    if hasattr(datamodule, "setup"):
        datamodule.setup("fit")
    for i, batch in enumerate(datamodule.train_dataloader()):
        if i >= n_batches:
            return
        if isinstance(batch, torch.Tensor):
            batch = batch.to(device)
        yield datamodule.on_after_batch_transfer(batch, 0)[0].to(device)


# -- runs on disk --------------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One trained run: its directory, dataset, model name, metrics and Δ_ST (None until measured)."""

    path: Path
    data: str = "?"
    model: str = "?"
    metrics: dict = field(default_factory=dict)
    gap: dict | None = None
    validation: float | None = None  # MIG on the held-out labels (semi-supervised runs, rule "labels")
    error: str | None = None

    @property
    def delta_st(self) -> float | None:
        return None if self.gap is None else self.gap["delta_st"]

    def score(self, rule: str) -> float | None:
        """The selection key: Δ_ST (smaller is better) or the held-out-label MIG (larger is better)."""
        return self.delta_st if rule == "delta_st" else self.validation


def find_runs(dirs: Sequence[Path | str]) -> list[Path]:
    """Every run directory under ``dirs``: a directory holding ``checkpoints/last.ckpt`` or ``metrics.json``."""
    found: set[Path] = set()
    for d in dirs:
        d = Path(d).expanduser()
        if not d.is_dir():
            raise ValueError(f"{d}: no such directory")
        for ckpt in d.rglob("last.ckpt"):
            if ckpt.parent.name == "checkpoints":
                found.add(ckpt.parent.parent)
        found.update(m.parent for m in d.rglob("metrics.json"))
    return sorted(found)


def _write_json_atomic(path: Path, record: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, path)


def measure_run(path: Path, *, rule: str = "delta_st", criterion: str = "loss", n_batches: int = 1000,
                batch_size: int = 64, stream_seed: int | None = 42, device: str = "cpu", recompute: bool = False,
                progress: bool = False) -> RunRecord:
    """The selection key of the run in ``path`` (its ``checkpoints/last.ckpt``), stored into its ``metrics.json``:
    for ``rule="delta_st"`` Δ_ST as ``delta_st`` (for ``criterion``), ``delta_st_loss``, ``delta_st_elbo`` and the
    settings; for ``rule="labels"`` ``label_validation_mig``. A stored value with the same settings is reused unless
    ``recompute``. Problems become ``RunRecord.error`` (one line)."""
    from ..runtime.checkpointing import load_checkpoint
    from ..runtime.config import one_line

    check_rule(rule)
    record = RunRecord(path)
    metrics_path = path / "metrics.json"
    try:
        record.metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    except json.JSONDecodeError as exc:
        record.error = f"metrics.json unreadable: {exc}"
        return record
    m = record.metrics
    record.data, record.model = m.get("data", "?"), m.get("method", "?")
    settings = {"batches": n_batches, "batch_size": batch_size, "stream_seed": stream_seed}
    if not recompute and rule == "delta_st" and m.get("delta_st_settings") == settings and "delta_st_loss" in m:
        record.gap = {"delta_st": m[f"delta_st_{criterion}"], "delta_st_loss": m["delta_st_loss"],
                      "delta_st_elbo": m["delta_st_elbo"], "criterion": criterion}
        return record
    if not recompute and rule == "labels" and "label_validation_mig" in m:
        record.validation = m["label_validation_mig"]
        return record
    ckpt = path / "checkpoints" / "last.ckpt"
    if not metrics_path.is_file():
        record.error = "no metrics.json (the run did not finish its evaluation)"
        return record
    if not ckpt.is_file():
        record.error = "no checkpoints/last.ckpt"
        return record
    try:
        overrides = {"batch_size": batch_size}
        if stream_seed is not None:
            overrides["seed"] = stream_seed
        model, run, datamodule, _ = load_checkpoint(ckpt, data_overrides=overrides)
        record.data, record.model = run.data.name, run.model.name
        model.attach_data(datamodule)  # the same labelled examples as in training (their seed is in the config)
        model.to(device)
        if rule == "delta_st":
            check_categorical(model)
            record.gap = straight_through_gap(model, training_batches(datamodule, n_batches, device),
                                              criterion=criterion, progress=progress)
            update = {k: record.gap[k] for k in ("delta_st_loss", "delta_st_elbo")}
            update.update(delta_st=record.gap["delta_st"], delta_st_criterion=criterion, delta_st_settings=settings)
        else:
            record.validation = model.label_validation_score()
            update = {"label_validation_mig": record.validation}
    except Exception as exc:  # noqa: BLE001 - one bad run must not stop the selection over the others
        record.error = one_line(exc)
        return record
    record.metrics.update(update)
    _write_json_atomic(metrics_path, record.metrics)
    return record


# -- the selection ---------------------------------------------------------------------------------------------
def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN when fewer than 3 pairs or a constant side)."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, float), np.asarray(b, float)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3 or np.ptp(a[keep]) == 0 or np.ptp(b[keep]) == 0:
        return math.nan
    return float(spearmanr(a[keep], b[keep]).statistic)


def select(records: Sequence[RunRecord], metrics: Sequence[str] = METRIC_KEYS, rule: str = "delta_st") -> list[dict]:
    """Per dataset, over the pool of measured runs: the run with the smallest Δ_ST (``rule="delta_st"``) or the
    highest held-out-label MIG (``"labels"``), its metrics, the pool's median of each metric and the Spearman
    correlation of the selection key with each metric (Friede et al. §3.4, §6.3, Table 1 "Selection", Fig. 4
    left).
    Metrics no run of a pool reports are left out of that pool's row."""
    check_rule(rule)
    pools: dict[str, list[RunRecord]] = {}
    for r in records:
        if r.error is None and r.score(rule) is not None:
            pools.setdefault(r.data, []).append(r)
    rows = []
    sign = 1.0 if rule == "delta_st" else -1.0
    for data, pool in sorted(pools.items()):
        best = min(pool, key=lambda r: sign * r.score(rule) if math.isfinite(r.score(rule)) else math.inf)
        present = [m for m in metrics if any(m in r.metrics for r in pool)]
        gaps = [r.score(rule) for r in pool]
        values = {m: [float(r.metrics.get(m, math.nan)) for r in pool] for m in present}
        rows.append({
            "data": data, "n": len(pool), "selected": str(best.path), "model": best.model,
            "rule": rule, "key": best.score(rule), "pool_median_key": float(np.nanmedian(gaps)),
            "selected_metrics": {m: float(best.metrics.get(m, math.nan)) for m in present},
            "pool_median": {m: float(np.nanmedian(v)) for m, v in values.items()},
            "spearman": {m: spearman(gaps, v) for m, v in values.items()},
        })
    return rows


KEY_LABELS = {"delta_st": "Δ_ST", "labels": "held-out-label MIG"}


def selection_markdown(rows: Sequence[dict], failed: Sequence[RunRecord] = (), rule: str = "delta_st") -> str:
    """The selection table (selected value with the pool median in brackets) and the correlation table."""
    lines = []
    key = KEY_LABELS[rule]
    metrics = list(dict.fromkeys(m for row in rows for m in row["selected_metrics"]))
    head = ["dataset", "runs", "selected run", f"{key} (pool median)", *metrics]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["data"], str(row["n"]), f"`{row['selected']}` ({row['model']})",
                 f"{row['key']:.4g} ({row['pool_median_key']:.4g})"]
        cells += [f"{row['selected_metrics'][m]:.3f} ({row['pool_median'][m]:.3f})" if m in row["selected_metrics"]
                  else "–" for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Spearman rank correlation of the {key} with each metric over the pool"
              + (" (negative: a smaller gap goes with a higher score):" if rule == "delta_st" else ":"), ""]
    head = ["dataset", *metrics]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["data"]] + [f"{row['spearman'][m]:+.2f}" if m in row["spearman"] else "–" for m in metrics]
        lines.append("| " + " | ".join(cells).replace("+nan", "n/a") + " |")
    if failed:
        lines += ["", "Runs left out:"] + [f"- `{r.path}`: {r.error}" for r in failed]
    return "\n".join(lines) + "\n"


def selection_figure(records: Sequence[RunRecord], rows: Sequence[dict], path: Path, metric: str = "mig",
                     rule: str = "delta_st") -> Path:
    """The selection key against ``metric`` for every measured run, one panel per dataset, the selected run
    marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(len(rows), 1), figsize=(4 * max(len(rows), 1), 3.4), squeeze=False)
    for ax, row in zip(axes[0], rows):
        pool = [r for r in records if r.error is None and r.score(rule) is not None and r.data == row["data"]]
        xs = [r.score(rule) for r in pool]
        ys = [float(r.metrics.get(metric, math.nan)) for r in pool]
        ax.scatter(xs, ys, s=18, alpha=0.7, label="runs")
        ax.scatter([row["key"]], [row["selected_metrics"].get(metric, math.nan)], s=80, marker="*",
                   color="crimson", label="selected")
        rho = row["spearman"].get(metric, math.nan)
        ax.set_title(f"{row['data']} (n={row['n']}, ρ={rho:+.2f})".replace("+nan", "n/a"), fontsize=9)
        ax.set_xlabel(KEY_LABELS[rule])
        ax.set_ylabel(metric)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
