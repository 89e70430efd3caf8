"""Entry point: ``python -m disentangle.prepare data=isaac3d [data.root=DIR] [--check] [--from-file PATH]``.

Uses the official raw files when they are in ``data.root``; otherwise fetches them from the sources of
``disentangle/data/sources.yaml`` in order (progress bar, resume, size and SHA-256 verified), then converts once
into ``<root>/<name>.h5`` and seals it. Re-running is a no-op. ``--check`` re-verifies what is on disk;
``--from-file PATH`` (repeatable) takes files downloaded by hand, verified the same way. Both are spelled as Hydra
keys too (``check=true``, ``from_file=[PATH, ...]``).
"""
from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig, ListConfig

from .errors import DatasetNotFoundError
from .runtime import config
from .runtime.paths import config_dir


def _registry(cfg: DictConfig):
    from .data.sources import load_sources_file

    return load_sources_file(cfg.sources) if cfg.get("sources") else None


@hydra.main(config_path=str(config_dir()), config_name="prepare", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .data import preparation

    data = cfg.data
    if "PreparedDataModule" not in str(data.get("_target_", "")):
        print(f"{data.name} is procedural: nothing to prepare (it is rendered on the fly)")
        return
    name = data.get("cache_name") or data.name  # colour_dsprites reads the dsprites cache
    variant = data.get("variant")
    start = time.perf_counter()
    try:
        registry = _registry(cfg)
        if cfg.check:
            lines, problems = preparation.check(name, data.root, variant=variant, registry=registry)
            print("\n".join(lines))
            if problems:
                print(f"error: {len(problems)} file(s) of {data.name} differ from what is known about them",
                      file=sys.stderr)
                sys.exit(1)
            return
        if cfg.from_file:
            paths = list(cfg.from_file) if isinstance(cfg.from_file, ListConfig) else [cfg.from_file]
            preparation.take(name, paths, data.root, variant=variant, registry=registry)
        path = preparation.prepare(
            name, data.root, variant=variant, factor_sizes=data.get("factor_sizes"),
            download=bool(cfg.download), progress=config.progress_enabled(cfg.progress, "progress"),
            timeout=float(cfg.timeout), registry=registry)
    except (DatasetNotFoundError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    size = path.stat().st_size / 2**30
    print(f"{data.name}: {path} ({size:.2f} GiB) ready in {time.perf_counter() - start:.1f} s")


def hydra_args(args: list[str]) -> list[str]:
    """The command line with ``--check`` and ``--from-file PATH`` (or ``--from-file=PATH``, repeatable) spelled as
    the Hydra keys they mean."""
    out, files, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--check":
            out.append("check=true")
        elif arg == "--from-file":
            if i + 1 >= len(args):
                print("error: --from-file needs a PATH", file=sys.stderr)
                sys.exit(2)
            files.append(args[i + 1])
            i += 1
        elif arg.startswith("--from-file="):
            files.append(arg.split("=", 1)[1])
        else:
            out.append(arg)
        i += 1
    if files:
        quoted = ",".join("'" + f.replace("\\", "\\\\").replace("'", "\\'") + "'" for f in files)
        out.append(f"from_file=[{quoted}]")
    return out


def cli() -> None:
    """``python -m disentangle.prepare``: a mistake in the command line gets one line and exit status 2."""
    sys.argv[1:] = hydra_args(sys.argv[1:])
    config.run_app(main)


if __name__ == "__main__":
    cli()
