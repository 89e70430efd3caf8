"""Entry point: ``python -m disentangle.train model=tripod data=isaac3d`` (a Hydra app).

Thin on purpose: composition is Hydra's, the work is :func:`disentangle.run.train`. The heavy imports
happen inside ``main`` so that ``--cfg job`` and ``--help`` answer quickly.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from . import config
from .errors import ConfigError, DatasetNotFoundError, NonFiniteLossError


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .callbacks import EvaluationError
    from .run import train

    try:
        train(cfg)
    except (ConfigError, DatasetNotFoundError, NonFiniteLossError) as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(3 if isinstance(exc, NonFiniteLossError) else 2)
    except EvaluationError as exc:  # a metric failed; checkpoints are kept: `python -m disentangle.evaluate`
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(1)


def cli() -> None:
    # `--cfg job` shows resolved values (per-dataset lambdas, n_latents) rather than interpolations
    args = sys.argv[1:]
    shows_job = any(a in ("--cfg", "-c") and args[i + 1 : i + 2] == ["job"] for i, a in enumerate(args))
    if shows_job and "--resolve" not in args:
        sys.argv.append("--resolve")
    main()


if __name__ == "__main__":
    cli()
