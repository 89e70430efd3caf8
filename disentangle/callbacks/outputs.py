"""The evaluation's output part: turn a job into numbers and files, and hand finished outcomes to the loggers.

:func:`compute_outcome` runs in the metric worker (numpy only): the registered metrics of the job, then for a
writing job ``metrics.json`` (atomically), ``latents.npz`` and the figures of :mod:`disentangle.callbacks.figures`.
:func:`record_outcome` runs on the training thread: it logs the scalars (and, for W&B, the images) at the step
they were taken and appends the evaluation to ``metrics_history.jsonl``.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..foundation.provenance import machine, software_versions
from ..metrics.ood import MIN_READOUT_ROWS, readout_scores
from ..metrics.suite import SCALAR_LABELS, resolve_options
from .figures import (
    dci_importance_heatmap,
    factor_recovery_scatter,
    intervention_grid,
    latent_scatter,
    nmi_heatmap,
    reconstruction_grid,
    samples_grid,
)
from .jobs import EvaluationJob, EvaluationOutcome

HISTORY_FILE = "metrics_history.jsonl"


@dataclass
class OutputSettings:
    """The callback's options that the output part reads."""

    output_dir: Path
    figures: bool = True
    save_latents: bool = False


def compute_outcome(job: EvaluationJob, metric_fn: Callable[..., dict], options: Mapping[str, Mapping],
                    settings: OutputSettings) -> EvaluationOutcome:
    """The worker part (no model, no torch): ``metric_fn`` on the job's arrays with each metric's options (their
    ``auto`` values settled for the job's model), then for a writing job metrics.json and figures."""
    start = time.perf_counter()
    out = metric_fn(
        job.latents, job.factors, discrete_latents=job.model.discrete, metrics=job.metrics,
        options=resolve_options(options, job.model), psnr=job.psnr, mse=job.mse,
    )
    out = {**job.sampled, **out}
    result = {k: float(out[k]) for k in SCALAR_LABELS if k in out}
    ood = None
    if job.heldout is not None:
        ood = heldout_section(job, metric_fn, resolve_options(options, job.model))
        # the in-distribution readouts are in-distribution metrics; the rest is logged as ood_<key>
        result.update({f"r2_{kind}": sides["in"]["mean"] for kind, sides in (ood["readout"] or {}).items()})
        result.update({f"ood_{k}": float(v) for k, v in ood.items() if isinstance(v, float)})
    result["eval_seconds"] = job.encode_seconds + time.perf_counter() - start
    if job.write:
        artifacts = write_outputs(job, result, out, settings, ood)
    elif job.figures_dir is not None:  # a periodic evaluation's figures, for the loggers that take images
        job.figures_dir.mkdir(parents=True, exist_ok=True)
        artifacts = draw_figures(job, out, job.figures_dir)
    else:
        artifacts = {}
    return EvaluationOutcome(job.step, job.final, result, artifacts)


def heldout_section(job: EvaluationJob, metric_fn: Callable[..., dict], options: Mapping[str, Mapping]) -> dict:
    """metrics.json's ``ood`` section for a ``data.split`` run (:mod:`disentangle.metrics.ood`): the held-out set's
    reconstruction (PSNR, MSE) and array metrics (the run's final ones, e.g. InfoMEC and DCI), and the linear and
    MLP readouts' R², fitted on the in-distribution rows of the evaluation subset, in and out of distribution.
    Scalars are floats; the section also says which set it scored (the split, the sizes, a hash of the held-out
    indices)."""
    held = job.heldout
    scores = metric_fn(held["latents"], held["factors"], discrete_latents=job.model.discrete, metrics=job.metrics,
                       options=options, psnr=held["psnr"], mse=held["mse"])
    section: dict = {"split": job.split, "n_samples": len(held["latents"]), "n_heldout": held["n_heldout"],
                     "n_inside": int(held["inside"].sum()),
                     "indices_sha256": hashlib.sha256(np.ascontiguousarray(held["dataset_index"], dtype=np.int64)
                                                      .tobytes()).hexdigest()}
    section.update({k: float(scores[k]) for k in SCALAR_LABELS if k in scores})
    inside = held["inside"]
    if inside.sum() < MIN_READOUT_ROWS:  # too few to fit and score a readout: said, not failed
        section["readout"] = None
        section["readout_skipped"] = (f"only {int(inside.sum())} of the {len(inside)} evaluation rows are "
                                      f"in-distribution (a readout needs {MIN_READOUT_ROWS}); raise "
                                      f"callbacks.evaluation.n_samples")
        return section
    readout = readout_scores(job.latents[inside], job.factors[inside], held["latents"], held["factors"],
                             job.factor_sizes)
    section.update({f"r2_{kind}": float(sides["out"]["mean"]) for kind, sides in readout.items()})
    section["readout"] = readout
    return section


def write_outputs(job: EvaluationJob, result: dict, out: dict, settings: OutputSettings,
                  ood: dict | None = None) -> dict[str, Path]:
    """``metrics.json`` (the scalars, the run's facts, the arrays behind the scalars and, for a ``data.split`` run,
    the ``ood`` section), ``latents.npz`` when asked, and the figures; returns {name: path}."""
    output_dir = settings.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    record = {k: v for k, v in result.items() if not k.startswith("ood_")}  # those live in the ood section
    record.update(
        step=job.step, method=job.method, data=job.data, n_samples=len(job.latents),
        discrete_latents=job.model.discrete, factor_names=list(job.factor_names),
        metrics=[*job.metrics, *job.sampled_metrics],
    )
    runtime = dict(job.runtime)  # what ran: the precision at the top, the rest (device, TF32, sweep job) nested
    if "precision" in runtime:
        record["precision"] = runtime.pop("precision")
    if runtime:
        record["runtime"] = runtime
    record["versions"] = software_versions()  # what produced these numbers
    # and where: training is deterministic on one CPU model, not across them (docs/getting-started.md)
    record["machine"] = machine()
    for key, value in out.items():  # the arrays behind the scalars: NMI, active mask, importances, ...
        if key not in SCALAR_LABELS and isinstance(value, np.ndarray):
            record[key] = value.round(4).tolist() if value.dtype.kind == "f" else value.tolist()
    if ood is not None:
        record["ood"] = ood
    path = output_dir / "metrics.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, path)  # readers never see a half-written file
    artifacts = {"metrics": path}
    if settings.save_latents:
        artifacts["latents"] = output_dir / "latents.npz"
        arrays = {"latents": job.latents, "factors": job.factors}
        arrays.update({k: v for k, v in (("psnr", job.psnr), ("mse", job.mse)) if v is not None})
        if job.heldout is not None:
            arrays.update({f"ood_{k}": job.heldout[k] for k in ("latents", "factors", "psnr", "mse", "dataset_index")
                           if job.heldout.get(k) is not None})
        np.savez(artifacts["latents"], **arrays)
    if settings.figures:
        artifacts.update(draw_figures(job, out, output_dir))
    return artifacts


def draw_figures(job: EvaluationJob, out: Mapping, output_dir: Path) -> dict[str, Path]:
    """Every figure the job's results allow: NMI and DCI-importance heatmaps, interventions, reconstructions, the
    latent scatter (2-D representation or rotation computed), factor recovery (MCC computed), generated samples."""
    artifacts = {}
    nmi = np.asarray(out["nmi"]) if "nmi" in out else None
    active = np.asarray(out["active"]).astype(bool) if "active" in out else None
    if nmi is not None:
        artifacts["nmi_heatmap"] = nmi_heatmap(nmi, active, job.factor_names, output_dir / "nmi_heatmap.png")
    if "dci_importance" in out:
        artifacts["dci_importance"] = dci_importance_heatmap(out["dci_importance"], job.factor_names,
                                                             output_dir / "dci_importance.png")
    if job.interventions is not None:
        labels = latent_labels(nmi, active, job.factor_names, job.latents.shape[1])
        artifacts["interventions"] = intervention_grid(job.interventions, labels, output_dir / "interventions.png",
                                                       start=job.intervention_start)
    if job.reconstructions is not None:
        artifacts["reconstructions"] = reconstruction_grid(*job.reconstructions, output_dir / "reconstructions.png")
    if job.heldout is not None and job.heldout.get("reconstructions") is not None:
        artifacts["reconstructions_heldout"] = reconstruction_grid(
            *job.heldout["reconstructions"], output_dir / "reconstructions_heldout.png",
            title=f"held-out combinations ({job.split} split): reconstructions")
    if job.latents.shape[1] == 2 or "rotation" in out:
        artifacts["latent_scatter"] = _latent_scatter(job, out, output_dir / "latent_scatter.png")
    if "mcc_matching" in out:
        artifacts["factor_recovery"] = factor_recovery_scatter(
            job.latents, job.factors, job.factor_names, output_dir / "factor_recovery.png",
            matching=out["mcc_matching"], title=f"{job.method} on {job.data} (step {job.step}): "
                                                f"MCC {float(out['mcc']):.3f}")
    if job.samples is not None:
        artifacts["samples"] = samples_grid(job.samples, output_dir / "samples.png",
                                            title=f"{job.method}: generated samples (step {job.step})")
    return artifacts


def _latent_scatter(job: EvaluationJob, out: Mapping, path: Path) -> Path:
    """The Circles latent-space figure (Friede et al. Fig. 3): two latent dims coloured by each true factor,
    titled with the model and, when computed, the rotation angle. With more than 2 latents it shows the two with the
    largest regression directions (rotation computed) or the largest variances."""
    directions = out.get("rotation_directions")
    if job.latents.shape[1] == 2:
        dims = (0, 1)
    else:
        weight = np.linalg.norm(directions, axis=1) if directions is not None else job.latents.var(axis=0)
        dims = tuple(sorted(int(j) for j in np.argsort(-weight, kind="stable")[:2]))
    title = f"{job.method} on {job.data} (step {job.step})"
    if "rotation" in out:
        title += f": rotation {float(out['rotation']):.1f} deg"
    if "mig" in out:
        title += f", MIG {float(out['mig']):.3f}"
    return latent_scatter(job.latents, job.factors, job.factor_names, path, dims=dims, title=title,
                          directions=directions)


def latent_labels(nmi: np.ndarray | None, active: np.ndarray | None, factor_names: Sequence[str],
                  n_latents: int) -> list[str]:
    """'z3: object_hue' for an active latent (the factor it shares most information with), 'z3 (inactive)'
    for an inactive one; plain 'z3' when InfoMEC was not computed."""
    if nmi is None:
        return [f"z{j}" for j in range(n_latents)]
    labels = []
    for j in range(nmi.shape[1]):
        if active[j]:
            labels.append(f"z{j}: {factor_names[int(nmi[:, j].argmax())]}")
        else:
            labels.append(f"z{j} (inactive)")
    return labels


def record_outcome(outcome: EvaluationOutcome, loggers: Sequence, history: Path | None) -> dict:
    """Log the scalars as ``eval/<key>`` at the step they were taken (flushing each logger, so they are on disk
    with the history entry a resumed run goes by), send PNGs to loggers that take images (W&B), append the entry to
    ``history``; returns the entry."""
    for lg in loggers:
        lg.log_metrics({f"eval/{k}": v for k, v in outcome.result.items()}, step=outcome.step)
        lg.save()
    images = {k: p for k, p in outcome.artifacts.items() if p.suffix == ".png"}
    if images:
        for lg in loggers:  # file-based loggers already have them on disk
            if hasattr(lg, "log_image"):
                for key, path in images.items():
                    lg.log_image(key=f"eval/{key}", images=[str(path)], step=outcome.step)
    entry = {"step": outcome.step, "final": outcome.final, **outcome.result}
    if history is not None:
        history.parent.mkdir(parents=True, exist_ok=True)
        with history.open("a") as f:
            f.write(json.dumps(entry) + "\n")
    return entry
