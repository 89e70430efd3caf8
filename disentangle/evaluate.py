"""Entry point: ``python -m disentangle.evaluate ckpt=PATH [data=...] [metrics=[infomec,dci,mig,...]|all]``.

Loads a checkpoint written by ``disentangle.train`` (it stores its composed config), runs the chosen
metrics on the evaluation subset, writes ``metrics.json`` and the figures next to the checkpoint (or to
``output_dir``) and prints the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from . import config
from .checkpointing import load_checkpoint
from .errors import ConfigError, DatasetNotFoundError
from .metrics.suite import check_metric_names

__all__ = ["evaluate_checkpoint", "load_checkpoint", "main"]


def evaluate_checkpoint(cfg: DictConfig) -> dict:
    import torch
    from hydra.utils import instantiate

    from .run import print_summary

    path = Path(cfg.ckpt).expanduser()
    chosen = cfg.metrics if cfg.metrics is None or isinstance(cfg.metrics, str) else list(cfg.metrics)
    try:
        metrics = None if chosen is None else check_metric_names(chosen)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    model, run, datamodule, ckpt = load_checkpoint(path, cfg.data if cfg.get("data") is not None else None)
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    out = Path(cfg.output_dir).expanduser() if cfg.output_dir else path.parent
    try:
        evaluator = instantiate(cfg.callbacks.evaluation, output_dir=out)
    except Exception as exc:
        raise ConfigError(config.one_line(exc)) from exc
    result = evaluator.run(model, datamodule, step=int(ckpt.get("global_step", 0)), metrics=metrics)
    title = f"{run.model.name} ({path.name}, step {ckpt.get('global_step', '?')}) on {datamodule.name}"
    print_summary(title, result, evaluator.artifacts)
    return result


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .callbacks import EvaluationError

    try:
        evaluate_checkpoint(cfg)
    except (ConfigError, DatasetNotFoundError) as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    except EvaluationError as exc:  # a metric failed on this model or data (e.g. too few samples)
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
