"""The doctor's second check: every model family (:data:`disentangle.runtime.families.FAMILIES`) trains a few
steps through the real config path on an accelerator in a precision, every logged loss term finite; on a GPU, its
checkpoint evaluated there and on the CPU gives the same metrics within :data:`TOLERANCES`."""
from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .common import quiet, read_losses

# GPU and CPU evaluations of the same weights: |difference| allowed per metric (scores in [0, 1]; PSNR in dB). Not
# zero: float sums run in another order on the GPU, and a quantized latent on a code boundary may flip
TOLERANCES = {"infom": 0.02, "infoe": 0.02, "infoc": 0.02, "dci_d": 0.02, "dci_i": 0.02, "dci_c": 0.02,
              "psnr": 0.05, "mcc": 0.02}


def family_name(choice: Sequence[str]) -> str:
    """A family's name on the command line and in the tables: its representative's model (or experiment) name."""
    return str(choice[-1]).split("=", 1)[1]


def run_overrides(family, steps: int) -> list[str]:
    """A few steps on small networks, a small final evaluation, a checkpoint at the last step."""
    common = [
        f"trainer.max_steps={steps}", "trainer.enable_model_summary=false", "trainer.enable_progress_bar=false",
        "~callbacks.progress", "trainer.log_every_n_steps=1", "callbacks.evaluation.n_samples=256",
        "callbacks.evaluation.every_n_steps=0", "callbacks.evaluation.dci.max_depth=4",
        "callbacks.evaluation.dci.n_estimators=10", "callbacks.evaluation.dci.predictor=forest",
        "callbacks.evaluation.progress=false", "callbacks.evaluation.figures=false",
        f"callbacks.checkpoint.every_n_train_steps={steps}", "print_summary=false", "seed=0",
    ]
    if family.encoder_only:  # Cliff's 2-D points and an MLP encoder: no image options, MCC is its metric
        return [*common, "data.num_samples=256", "data.eval_size=128", "model.batch_size=64",
                "callbacks.evaluation.metrics=[mcc]", "callbacks.evaluation.periodic_metrics=[mcc]"]
    images = [*common, "data=shapes2d", "model/arch=small", "data.resolution=16", "model.batch_size=16",
              "callbacks.evaluation.metrics=[infomec,dci]", "callbacks.evaluation.periodic_metrics=[infomec]"]
    if family.labelled_stream:  # a small labelled set, so drawing it costs nothing
        images += ["model.regularizers.supervision.n_labels=40", "model.regularizers.supervision.batch_size=8"]
    return images


def compose_run(overrides: Sequence[str], output_dir: Path):
    """The training config ``python -m disentangle.train`` would compose from ``overrides``, writing to
    ``output_dir``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..runtime.paths import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose("train", overrides=[*overrides, f"paths.output_dir={output_dir}"])


def run_family(family, choice: Sequence[str], accelerator: str, precision: str, steps: int, workdir: Path,
               compare_on: str | None = None) -> dict:
    """Train ``family``'s representative ``steps`` steps on ``accelerator`` (``cpu``/``cuda``) in ``precision``
    through :func:`disentangle.runtime.run.train`; ``ok`` when it finished and every logged loss term is finite. With
    ``compare_on`` (``"cpu"`` after a GPU run) the checkpoint is also evaluated on the accelerator and on that
    device (:func:`compare_evaluations`)."""
    from ..runtime.config import one_line
    from ..runtime.families import family_label
    from ..runtime.run import train

    name = family_name(choice)
    out = Path(workdir) / accelerator / precision / name
    record: dict = {"family": name, "kind": family_label(family), "family_fields": family._asdict(),
                    "config": list(choice),
                    "accelerator": accelerator, "precision": precision, "steps": steps, "run_dir": str(out)}
    overrides = [*run_overrides(family, steps), *choice, f"trainer.accelerator={accelerator}",
                 f"trainer.precision={precision}"]
    start = time.perf_counter()
    with quiet() as caught:
        try:
            result = train(compose_run(overrides, out))
            record["error"] = None
        except Exception as exc:  # noqa: BLE001 - a family that fails is the finding: report it, check the rest
            result, record["error"] = {}, f"{type(exc).__name__}: {one_line(exc)}"
    record["seconds"] = time.perf_counter() - start
    record["warnings"] = sorted({" ".join(str(w.message).split())[:200] for w in caught})
    losses = read_losses(out)
    record["losses"] = {key: values[-1] for key, values in losses.items()}
    bad = sorted(key for key, values in losses.items() if not all(math.isfinite(v) for v in values))
    record["non_finite_terms"] = bad
    record["metrics"] = {key: value for key, value in result.items() if key in TOLERANCES}
    if record["error"] is None and not losses:
        record["error"] = "no training loss was logged (csv/metrics.csv)"
    elif record["error"] is None and bad:
        record["error"] = f"non-finite logged loss terms: {', '.join(bad)}"
    record["status"] = "ok" if record["error"] is None else "fail"
    if compare_on is not None:
        if record["status"] != "ok":
            record["cpu_check"] = {"status": "skipped", "reason": "training failed"}
        else:
            with quiet():
                record["cpu_check"] = compare_evaluations(out / "checkpoints" / "last.ckpt",
                                                          (_torch_device(accelerator), compare_on))
            if record["cpu_check"]["status"] != "ok":
                record["status"] = "fail"
    return record


def _torch_device(accelerator: str) -> str:
    return "cuda" if accelerator in ("cuda", "gpu") else accelerator


def compare_evaluations(ckpt: Path, devices: tuple[str, str] = ("cuda", "cpu")) -> dict:
    """Evaluate the weights of ``ckpt`` with the run's own evaluation settings on each of the two ``devices`` and
    compare the metrics of :data:`TOLERANCES` (``ok`` when every difference is within its tolerance)."""
    import torch
    from hydra.utils import instantiate

    from ..foundation.precision import tf32_flags
    from ..runtime.checkpointing import load_checkpoint
    from ..runtime.config import one_line

    first, second = devices
    names = (first, second if second != first else f"{second} (again)")
    record: dict = {"devices": list(devices)}
    if "cuda" in devices:  # the runs' TF32 setting, which the comparison itself turns off (below)
        record["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
                          "in_comparison": False}
    try:
        model, run, datamodule, raw = load_checkpoint(ckpt)
        results = []
        # Full float32 on the GPU: TF32's 1e-3 rounding of the latents moves a barely trained model's tree-ensemble
        # DCI-I by up to 0.05 (a CPU evaluation with weights perturbed by 1e-3 does the same, by 1e-5 not at all),
        # which is TF32's doing, not a device bug; the comparison is of the devices, so it runs without TF32
        with tempfile.TemporaryDirectory() as tmp, tf32_flags(False, False):
            for device in devices:
                model.to(device)
                evaluator = instantiate(run.callbacks.evaluation, output_dir=tmp, progress=False, figures=False)
                results.append(evaluator.run(model, datamodule, step=int(raw.get("global_step", 0)), write=False))
    except Exception as exc:  # noqa: BLE001 - an evaluation that fails on one device is the finding
        return {**record, "status": "fail", "error": f"{type(exc).__name__}: {one_line(exc)}"}
    keys = [k for k in TOLERANCES if k in results[0] and k in results[1]]
    metrics = {k: {names[0]: results[0][k], names[1]: results[1][k], "diff": abs(results[0][k] - results[1][k])}
               for k in keys}
    failed = [k for k, m in metrics.items() if not (m["diff"] <= TOLERANCES[k])]  # a NaN difference fails too
    error = f"beyond tolerance: {', '.join(failed)}" if failed else None if keys else "no metric to compare"
    return {**record, "status": "ok" if error is None else "fail", "metrics": metrics,
            "max_diff": max((m["diff"] for m in metrics.values()), default=None), "error": error}
