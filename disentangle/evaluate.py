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

from . import config
from .errors import ConfigError, DatasetNotFoundError
from .metrics.suite import check_metric_names


def load_checkpoint(path: Path | str, data_cfg=None, data_overrides: dict | None = None):
    """(model with the checkpoint's weights, the run's composed config, its data module, the raw checkpoint) from a
    checkpoint written by ``disentangle.train``; ``data_cfg`` replaces the run's data config, ``data_overrides``
    sets keys of it (e.g. ``{"batch_size": 64}``). Every problem is one :class:`ConfigError` line."""
    import torch
    from hydra.utils import instantiate

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"ckpt={path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ConfigError(f"ckpt={path}: unreadable checkpoint ({config.one_line(exc)})") from exc
    if "disentangle_config" not in ckpt:
        raise ConfigError(f"ckpt={path}: not a disentangle checkpoint (no stored config)")
    run = OmegaConf.create(ckpt["disentangle_config"])
    data = OmegaConf.create(OmegaConf.to_container(data_cfg if data_cfg is not None else run.data, resolve=True))
    for key, value in (data_overrides or {}).items():
        data[key] = value
    try:
        datamodule = instantiate(data)
        # older checkpoints did not store the image shape: assume the data's
        shape = ckpt.get("disentangle_shape") or {
            "in_channels": datamodule.num_channels, "resolution": datamodule.resolution}
        model = instantiate(run.model, **shape)
    except DatasetNotFoundError:
        raise
    except Exception as exc:
        raise ConfigError(config.one_line(exc)) from exc
    if (datamodule.num_channels, datamodule.resolution) != (model.in_channels, model.resolution):
        raise ConfigError(
            f"data {datamodule.name} has {datamodule.num_channels}x{datamodule.resolution}px images; the model "
            f"was trained on {model.in_channels}x{model.resolution}px"
        )
    model.load_state_dict(ckpt["state_dict"])
    return model, run, datamodule, ckpt


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
