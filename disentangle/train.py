"""Entry point: ``python -m disentangle.train model=tripod data=isaac3d`` (a Hydra app).

Thin on purpose: composition is Hydra's, the work is :func:`disentangle.runtime.run.train`. The heavy imports
happen inside ``main`` so that ``--cfg job`` and ``--help`` answer quickly.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import yaml
from omegaconf import DictConfig

from .errors import ConfigError, DatasetNotFoundError, EvaluationError, NonFiniteLossError
from .runtime import config, dry_run
from .runtime.paths import config_dir, shadowed_sweep, sweep_arguments
from .runtime.preflight import check_training_config

log = logging.getLogger(__name__)


@hydra.main(config_path=str(config_dir()), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .runtime.multirun import clear_failure, in_multirun, record_failure

    multirun = in_multirun()
    try:
        check_training_config(cfg)  # what the config alone can refuse, before the ten seconds of torch's imports
        from .runtime.run import train

        value = objective(cfg, train(cfg))
    except (ConfigError, DatasetNotFoundError, NonFiniteLossError, EvaluationError) as exc:
        # a metric failing (EvaluationError) keeps the checkpoints: `python -m disentangle.evaluate`
        line = f"error: {config.one_line(exc)}"
        print(line, file=sys.stderr)
        record_failure(_output_dir(cfg), line)  # the run directory says why it has no metrics.json
        if multirun:  # the sweep goes on; its summary lists this job
            return None
        sys.exit(1 if isinstance(exc, EvaluationError) else 3 if isinstance(exc, NonFiniteLossError) else 2)
    except Exception as exc:  # an unexpected error: in a sweep, log it and go on with the other jobs
        line = f"error: {type(exc).__name__}: {config.one_line(exc)}"
        record_failure(_output_dir(cfg), line)
        if not multirun:
            raise  # a bug: its traceback is wanted
        log.exception("job failed")
        print(line, file=sys.stderr)
        return None
    clear_failure(_output_dir(cfg))  # a run resumed after a failure has succeeded now
    return value


def _output_dir(cfg: DictConfig) -> str:
    """The job's directory, also where ``paths`` itself is broken (the error being reported may be that)."""
    try:
        return str(cfg.paths.output_dir)
    except Exception:  # noqa: BLE001
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().runtime.output_dir


def objective(cfg: DictConfig, result: dict) -> float | None:
    """What the job returns to a sweeper that optimises (``hydra/sweeper=optuna``): the metric named by
    ``sweep_objective.metric`` (e.g. ``infom``); a run whose PSNR is below ``sweep_objective.psnr_min`` (the
    papers' reconstruction filter) scores ``sweep_objective.infeasible`` instead. None when no objective is set."""
    spec = cfg.get("sweep_objective")
    if not spec or not spec.get("metric"):
        return None
    value = result.get(spec.metric)
    if value is None:
        raise ConfigError(f"sweep_objective.metric={spec.metric!r} is not in the run's final metrics "
                          f"({', '.join(sorted(k for k in result if isinstance(result[k], float)))})")
    floor = spec.get("psnr_min")
    if floor is not None and result.get("psnr", float("inf")) < float(floor):
        return float(spec.get("infeasible", -1.0))
    return float(value)


def resume_arguments(args: list[str]) -> list[str]:
    """``resume=<run dir>`` continues that run in its own directory with its own overrides: the run's
    ``.hydra/overrides.yaml`` goes before the given arguments (a key given again on the command line wins, e.g.
    ``trainer.max_steps=...``) and ``hydra.run.dir`` points at it. Other arguments come back unchanged (a
    ``.ckpt`` file as ``resume`` starts a new directory from that checkpoint)."""
    value = next((a.split("=", 1)[1] for a in args if a.startswith("resume=")), None)
    multirun = "-m" in args or "--multirun" in args
    if not value and not multirun:
        _check_auto_resume(args)
    if not value or multirun or not Path(value).expanduser().is_dir():
        return args
    run_dir = Path(value).expanduser()
    stored = run_dir / ".hydra" / "overrides.yaml"
    if not stored.is_file():
        print(f"error: resume={value}: {stored} not found (not a run directory of python -m disentangle.train; "
              f"give resume=<its checkpoints/last.ckpt> to continue it in a new directory)", file=sys.stderr)
        sys.exit(2)
    from .runtime.checkpointing import check_checkpoint, find_checkpoint

    try:  # before Hydra writes into the directory: a bad checkpoint must leave the run as it was
        check_checkpoint(find_checkpoint(str(run_dir), run_dir))
    except ConfigError as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    given = {config.override_key(a) for a in args}
    previous = [o for o in (yaml.safe_load(stored.read_text()) or [])
                if config.override_key(o) not in given | {"resume", "auto_resume"}]
    extra = [] if "hydra.run.dir" in given else [f"hydra.run.dir={run_dir}"]
    return [*previous, *args, *extra]


def _check_auto_resume(args: list[str]) -> None:
    """``auto_resume=true`` with ``hydra.run.dir=DIR`` whose ``checkpoints/last.ckpt`` is unreadable or partial: stop
    in one line before Hydra writes DIR/.hydra, so the run directory stays as it was."""
    flag = next((a.split("=", 1)[1] for a in args if config.override_key(a) == "auto_resume"), "false")
    run_dir = next((a.split("=", 1)[1] for a in args if config.override_key(a) == "hydra.run.dir"), None)
    if flag.lower() != "true" or not run_dir:
        return
    from .runtime.checkpointing import check_checkpoint, find_checkpoint

    last = find_checkpoint(None, Path(run_dir).expanduser(), auto_resume=True)
    if last is None:
        return
    try:
        check_checkpoint(last)
    except ConfigError as exc:
        print(f"error: {config.one_line(exc)}", file=sys.stderr)
        sys.exit(2)


def cli() -> None:
    shadowed = shadowed_sweep(sys.argv[1:])
    if shadowed:  # a local sweeps/ folder hides the project's: say so, rather than Hydra's "no such config"
        print(f"error: {shadowed}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = sweep_arguments(resume_arguments(sys.argv[1:]))
    # `--cfg job` shows resolved values (per-dataset lambdas, n_latents) rather than interpolations
    args = sys.argv[1:]
    shows_job = any(a in ("--cfg", "-c") and args[i + 1 : i + 2] == ["job"] for i, a in enumerate(args))
    if shows_job and "--resolve" not in args:
        sys.argv.append("--resolve")
    if dry_run.requested(args):  # list the jobs, run nothing (before Hydra could create a directory)
        sys.exit(dry_run.main(args))
    config.run_app(main)  # a mistake in the command line: one line, exit 2


if __name__ == "__main__":
    cli()
