"""Entry point: ``python -m disentangle.prepare data=isaac3d [data.root=DIR]`` (a Hydra app).

Uses the official raw files when they are in ``data.root``, otherwise downloads them (progress bar,
checksum), then converts once into ``<root>/<name>.h5``. Re-running is a no-op.
"""
from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig

from .errors import DatasetNotFoundError
from .runtime import config
from .runtime.paths import config_dir


@hydra.main(config_path=str(config_dir()), config_name="prepare", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .data.preparation import prepare

    data = cfg.data
    if "PreparedDataModule" not in str(data.get("_target_", "")):
        print(f"{data.name} is procedural: nothing to prepare (it is rendered on the fly)")
        return
    start = time.perf_counter()
    try:
        path = prepare(  # cache_name: a dataset drawn from another's cache (colour_dsprites reads dsprites)
            data.get("cache_name") or data.name, data.root, variant=data.get("variant"),
            factor_sizes=data.get("factor_sizes"),
            download=bool(cfg.download), progress=config.progress_enabled(cfg.progress, "progress"),
        )
    except (DatasetNotFoundError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    size = path.stat().st_size / 2**30
    print(f"{data.name}: {path} ({size:.2f} GiB) ready in {time.perf_counter() - start:.1f} s")


def cli() -> None:
    """``python -m disentangle.prepare``: a mistake in the command line gets one line and exit status 2."""
    config.run_app(main)


if __name__ == "__main__":
    cli()
