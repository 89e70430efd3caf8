"""Evaluation callback: every N steps and at the end of training, encode the fixed evaluation subset and
compute InfoMEC, DCI and reconstruction PSNR; at the end write ``metrics.json`` and figures.

Metric definitions live in :mod:`disentangle.metrics`; this callback only gathers latents, calls them,
draws figures and logs.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from tqdm.auto import tqdm

from .. import metrics as M
from .figures import intervention_grid, nmi_heatmap

SUMMARY_KEYS = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


class DisentanglementEvaluation(pl.Callback):
    """Args:
        output_dir: where ``metrics.json`` and the PNGs go (the Hydra run directory).
        every_n_steps: periodic evaluation cadence (0 = only at the end).
        n_samples: evaluation subset size (None = the data module's ``eval_size``).
        batch_size: encoding batch size.
        periodic_dci: also run DCI at periodic evaluations (it is the slow part).
        infomec / dci: keyword options passed to :func:`disentangle.metrics.infomec` / ``dci``.
        figures: write the NMI heatmap and intervention grid at the end.
        n_interventions: interpolation points per latent in the intervention grid.
    """

    def __init__(
        self,
        output_dir: str | Path = ".",
        every_n_steps: int = 5000,
        n_samples: int | None = None,
        batch_size: int = 256,
        periodic_dci: bool = False,
        infomec: dict | None = None,
        dci: dict | None = None,
        figures: bool = True,
        n_interventions: int = 10,
        progress: bool = True,
    ):
        super().__init__()
        if int(every_n_steps) < 0:
            raise ValueError(f"callbacks.evaluation.every_n_steps must be >= 0 (got {every_n_steps})")
        if n_samples is not None and int(n_samples) < 2:
            raise ValueError(f"callbacks.evaluation.n_samples must be >= 2 (got {n_samples})")
        self.output_dir = Path(output_dir)
        self.every_n_steps = int(every_n_steps)
        self.n_samples = None if n_samples is None else int(n_samples)
        self.batch_size = int(batch_size)
        self.periodic_dci = bool(periodic_dci)
        self.infomec_kwargs = dict(infomec or {})
        self.dci_kwargs = dict(dci or {})
        self.figures = bool(figures)
        self.n_interventions = int(n_interventions)
        self.progress = bool(progress)
        self.last: dict | None = None
        self.artifacts: dict[str, Path] = {}

    # -- Lightning hooks ---------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0 and step < trainer.max_steps:
            self.evaluate(trainer, pl_module, final=False)

    def on_train_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, final=True)

    # -- the work ----------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_subset(self, pl_module, datamodule) -> tuple[np.ndarray, np.ndarray, float]:
        """Latents, factors and mean PSNR over the evaluation subset."""
        was_training = pl_module.training
        pl_module.eval()
        n = self.n_samples or datamodule.eval_size
        latents, factors, psnr_sum = [], [], 0.0
        batches = datamodule.eval_batches(self.batch_size, pl_module.device, limit=n)
        total = -(-min(n, datamodule.eval_size) // self.batch_size)
        for images, f in tqdm(batches, total=total, desc="evaluate: encode", leave=False, disable=not self.progress):
            z, recon = pl_module.embed(images)
            latents.append(z.float().cpu())
            factors.append(f.cpu())
            psnr_sum += M.psnr(recon, images) * len(images)
        pl_module.train(was_training)
        z = torch.cat(latents).numpy()
        s = torch.cat(factors).numpy()
        return z, s, psnr_sum / len(z)

    def evaluate(self, trainer, pl_module, final: bool) -> dict:
        return self.run(pl_module, trainer.datamodule, step=trainer.global_step, logger=trainer.logger,
                        final=final, write=final and trainer.is_global_zero)

    def run(self, pl_module, datamodule, *, step: int = 0, logger=None, final: bool = True,
            write: bool = True, metrics=("infomec", "dci")) -> dict:
        """Evaluate ``pl_module`` on ``datamodule``'s evaluation subset; with ``write``, also write
        ``metrics.json`` and the figures to ``output_dir``. Used by the callback and by
        ``python -m disentangle.evaluate``."""
        start = time.perf_counter()
        z, s, psnr = self.encode_subset(pl_module, datamodule)
        discrete = pl_module.discrete_latents
        info = M.infomec(s, z, discrete_latents=discrete, **self.infomec_kwargs)
        result = {"infom": info["infom"], "infoe": info["infoe"], "infoc": info["infoc"], "psnr": psnr}
        dci = None
        if "dci" in metrics and (final or self.periodic_dci):
            dci = M.dci(s, z, **self.dci_kwargs)
            result.update(dci_d=dci["d"], dci_i=dci["i"], dci_c=dci["c"])
        result = {k: float(v) for k, v in result.items()}
        result["eval_seconds"] = time.perf_counter() - start
        if logger is not None:
            logger.log_metrics({f"eval/{k}": v for k, v in result.items()}, step=step)
        if write:
            self._write_final(logger, pl_module, datamodule, z, result, info, dci, step)
        self.last = result
        return result

    def _write_final(self, logger, pl_module, datamodule, z, result, info, dci, step) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        record = dict(result)
        record.update(
            step=step,
            method=getattr(pl_module, "method", type(pl_module).__name__),
            data=datamodule.name,
            n_samples=len(z),
            discrete_latents=bool(pl_module.discrete_latents),
            factor_names=list(datamodule.factor_names),
            nmi=np.asarray(info["nmi"]).round(4).tolist(),
            active=np.asarray(info["active"]).astype(bool).tolist(),
        )
        if dci is not None:
            record["dci_importance"] = np.asarray(dci["importance"]).round(4).tolist()
        path = self.output_dir / "metrics.json"
        path.write_text(json.dumps(record, indent=2))
        self.artifacts = {"metrics": path}
        if self.figures:
            self.artifacts["nmi_heatmap"] = nmi_heatmap(
                np.asarray(info["nmi"]), np.asarray(info["active"]), datamodule.factor_names,
                self.output_dir / "nmi_heatmap.png",
            )
            self.artifacts["interventions"] = self._interventions(pl_module, datamodule, z, info)
            _log_images(logger, {k: v for k, v in self.artifacts.items() if k != "metrics"}, step)

    @torch.no_grad()
    def _interventions(self, pl_module, datamodule, z: np.ndarray, info: dict) -> Path:
        """Sweep each latent over [min, max] on the evaluation set from one encoded image."""
        was_training = pl_module.training
        pl_module.eval()
        images, _ = next(datamodule.eval_batches(1, pl_module.device))
        base, _ = pl_module.embed(images)
        lo, hi = z.min(0), z.max(0)
        steps = np.linspace(0.0, 1.0, self.n_interventions)
        n_z = z.shape[1]
        grid = base.repeat(self.n_interventions * n_z, 1).reshape(self.n_interventions, n_z, n_z).clone()
        for j in range(n_z):
            values = torch.as_tensor(lo[j] + steps * (hi[j] - lo[j]), dtype=grid.dtype, device=grid.device)
            grid[:, j, j] = values
        decoded = torch.sigmoid(pl_module.decode(grid.reshape(-1, n_z))).float().cpu().numpy()
        pl_module.train(was_training)
        decoded = decoded.reshape(self.n_interventions, n_z, *decoded.shape[1:])
        labels = _latent_labels(np.asarray(info["nmi"]), np.asarray(info["active"]), datamodule.factor_names)
        return intervention_grid(decoded, labels, self.output_dir / "interventions.png")


def _latent_labels(nmi: np.ndarray, active: np.ndarray, factor_names: Sequence[str]) -> list[str]:
    """'z3: object_hue' for active latents (the factor it shares most information with), 'z3 (off)' else."""
    labels = []
    for j in range(nmi.shape[1]):
        if active[j]:
            labels.append(f"z{j}: {factor_names[int(nmi[:, j].argmax())]}")
        else:
            labels.append(f"z{j} (inactive)")
    return labels


def _log_images(logger, images: dict[str, Path], step: int) -> None:
    """Send PNGs to loggers that take images (W&B); file-based loggers already have them on disk."""
    loggers = getattr(logger, "loggers", [logger]) if logger is not None else []
    for lg in loggers:
        if hasattr(lg, "log_image"):
            for key, path in images.items():
                lg.log_image(key=f"eval/{key}", images=[str(path)], step=step)
