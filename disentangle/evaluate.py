"""Entry point: ``python -m disentangle.evaluate ckpt=PATH [data=...] [metrics=[infomec,dci,mig,...]|all]``.

Loads a checkpoint written by ``disentangle.train`` (it stores its composed config), runs the chosen
metrics on the evaluation subset, writes ``metrics.json`` and the figures next to the checkpoint (or to
``output_dir``) and prints the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError, DatasetNotFoundError, EvaluationError
from .runtime import config
from .runtime.paths import config_dir

__all__ = ["checkpoint_path", "cli", "evaluate_checkpoint", "evaluation_settings", "load_checkpoint", "main"]  # noqa: F822 (load_checkpoint: module __getattr__)


def evaluate_checkpoint(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """Evaluate ``cfg.ckpt`` with the run's own evaluation settings (``eval_settings=run``, the default) or the
    defaults of conf/callbacks (``eval_settings=default``); ``overrides``, the command line's (Hydra's task
    overrides when None), go on top either way."""
    path = checkpoint_path(cfg)  # before the heavy imports: a missing ckpt= costs a second, not ten
    import torch
    from hydra.utils import instantiate

    from .metrics.suite import check_metric_names
    from .runtime.checkpointing import load_checkpoint
    from .runtime.run import print_summary

    chosen = cfg.metrics if cfg.metrics is None or isinstance(cfg.metrics, str) else list(cfg.metrics)
    try:
        metrics = None if chosen is None else check_metric_names(chosen)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    model, run, datamodule, ckpt = load_checkpoint(path, cfg.data if cfg.get("data") is not None else None)
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    out = Path(cfg.output_dir).expanduser() if cfg.output_dir else path.parent
    settings, source = evaluation_settings(cfg, run, _task_overrides() if overrides is None else overrides)
    print(f"evaluation settings: {source}")
    try:  # progress: auto means a bar only in a terminal
        evaluator = instantiate(settings, output_dir=out, **config.progress_setting(settings))
    except Exception as exc:
        raise ConfigError(config.one_line(exc)) from exc
    result = evaluator.run(model, datamodule, step=int(ckpt.get("global_step", 0)), metrics=metrics)
    title = f"{run.model.name} ({path.name}, step {ckpt.get('global_step', '?')}) on {datamodule.name}"
    print_summary(title, result, evaluator.artifacts)
    return result


EVALUATION = "callbacks.evaluation"
EVAL_SETTINGS = ("run", "default")


def evaluation_settings(cfg: DictConfig, run: DictConfig, overrides: list[str]) -> tuple[DictConfig, str]:
    """The evaluation callback's settings for a re-evaluation, and a line saying where they came from.

    ``eval_settings=run``: the run's own ``callbacks.evaluation``, stored resolved in the checkpoint (its estimators'
    options, ``n_samples``, ...), so re-evaluating a checkpoint repeats what training computed; ``default``: this
    command's composed ``callbacks`` (conf/callbacks/default.yaml). ``callbacks.evaluation.*`` overrides on the
    command line apply on top of either."""
    mode = str(cfg.get("eval_settings", "run"))
    if mode not in EVAL_SETTINGS:
        raise ConfigError(f"eval_settings={mode}: choose run (the checkpoint's own) or default (conf/callbacks)")
    stored = OmegaConf.select(run, EVALUATION) if mode == "run" else None
    if mode == "run" and stored is None:
        source = "conf/callbacks/default.yaml (the checkpoint stores no evaluation settings)"
    else:
        source = "the run's own, stored in the checkpoint" if mode == "run" else "conf/callbacks/default.yaml"
    if stored is None:
        return cfg.callbacks.evaluation, _with_overrides(source, [])
    settings = OmegaConf.create(OmegaConf.to_container(stored, resolve=True))
    applied = []
    for item in overrides:
        key = config.override_key(item)
        if not key.startswith(EVALUATION + "."):
            continue
        sub = key[len(EVALUATION) + 1:]
        if item.startswith("~"):
            parent, _, leaf = sub.rpartition(".")
            node = OmegaConf.select(settings, parent) if parent else settings
            if node is not None and leaf in node:
                node.pop(leaf)
        else:
            OmegaConf.update(settings, sub, OmegaConf.select(cfg, key), force_add=True)
        applied.append(item)
    return settings, _with_overrides(source, applied)


def _with_overrides(source: str, applied: list[str]) -> str:
    return f"{source}; from the command line: {' '.join(applied)}" if applied else source


def _task_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return [str(o) for o in HydraConfig.get().overrides.task] if HydraConfig.initialized() else []


def checkpoint_path(cfg: DictConfig) -> Path:
    """``ckpt``, which has no default, as a file; for a run directory the message names its ``last.ckpt``."""
    if OmegaConf.is_missing(cfg, "ckpt") or not cfg.ckpt:
        raise ConfigError("ckpt=PATH is required: the checkpoint to evaluate, e.g. "
                          "ckpt=outputs/<model>/<data>/<date>/checkpoints/last.ckpt")
    path = Path(str(cfg.ckpt)).expanduser()
    if path.is_dir():
        last = next((p for p in (path / "checkpoints" / "last.ckpt", path / "last.ckpt") if p.is_file()), None)
        hint = f"; its last checkpoint: ckpt={last}" if last else " (no checkpoints/last.ckpt in it)"
        raise ConfigError(f"ckpt={path} is a directory: give a checkpoint file{hint}")
    if not path.is_file():  # the loader's words, said before its imports
        raise ConfigError(f"ckpt={path}: no such checkpoint file")
    mode = str(cfg.get("eval_settings", "run"))
    if mode not in EVAL_SETTINGS:
        raise ConfigError(f"eval_settings={mode}: choose run (the checkpoint's own) or default (conf/callbacks)")
    return path


@hydra.main(config_path=str(config_dir()), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        evaluate_checkpoint(cfg)
    except (ConfigError, DatasetNotFoundError) as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    except EvaluationError as exc:  # a metric failed on this model or data (e.g. too few samples)
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(1)


def __getattr__(name: str):
    """``load_checkpoint``, part of this module's interface, imported on first use (it needs torch)."""
    if name == "load_checkpoint":
        from .runtime.checkpointing import load_checkpoint

        return load_checkpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cli() -> None:
    """``python -m disentangle.evaluate``: a mistake in the command line gets one line and exit status 2."""
    config.run_app(main)


if __name__ == "__main__":
    cli()
