"""A sweep file's report rule: the ``# Report: FLAGS`` line of its header comment.

A file in ``sweeps/`` carries the rule its paper reports by, as the report's own flags, e.g. Tripod Table 1's
``# Report: --select-checkpoint best-infom --psnr-min tripod``. ``python -m disentangle.report DIR`` finds the sweep
a directory came from and applies its rule; a flag given on the command line wins over the same flag of the rule,
``--no-sweep-rule`` ignores it.

Which sweep: the ``multirun.yaml`` Hydra writes in the sweep directory (looked for in DIR, two levels above it,
and below it down to the run directories), else the run's own ``.hydra/hydra.yaml`` when DIR is a run: its
``hydra.job.config_name`` (the ``-cn`` name) in the config directory it was read from (the ``-cd`` path in
``hydra.runtime.config_sources``), else in the project's ``sweeps/``. A plain multirun (config ``train``) has no
rule. When the directories' rules disagree on a flag the command line does not give, the report stops and asks for
it.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.paths import sweeps_dir

RULE_PREFIX = "# Report:"
# the flags a rule may carry -> the option they set; --pool takes one or more values, the others one
RULE_FLAGS = {"--select-checkpoint": "select_checkpoint", "--psnr-min": "psnr_min", "--select": "select",
              "--select-by": "select_by", "--stat": "stat", "--pool": "pool", "--ddof": "ddof"}
OPTION_FLAGS = {v: k for k, v in RULE_FLAGS.items()}
SWEEP_DIR = sweeps_dir()  # the checkout's sweep files, or the installed package's
_ANCESTORS = 2


@dataclass
class SweepRule:
    path: Path                                         # the sweep file
    options: dict[str, Any] = field(default_factory=dict)
    line: str = ""                                     # the flags as written

    def text(self) -> str:
        return f"{self.path.name} (`{self.line}`)"


def parse_rule(text: str) -> dict[str, Any]:
    """The options of a rule's flags (``--stat se --select dci_d ...``); ValueError for an unknown flag or value."""
    from . import STAT_MODES
    from .checkpoints import CheckpointRule
    from .rules import PsnrFilter

    tokens = shlex.split(text)
    options: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        name = RULE_FLAGS.get(flag)
        if name is None:
            raise ValueError(f"{flag!r} is not a rule flag ({', '.join(RULE_FLAGS)})")
        values = []
        i += 1
        while i < len(tokens) and not tokens[i].startswith("--") and (name == "pool" or not values):
            values.append(tokens[i])
            i += 1
        if not values:
            raise ValueError(f"{flag} needs a value")
        if name in options:
            raise ValueError(f"{flag} given twice")
        if name == "pool":
            options[name] = [v for item in values for v in item.split(",") if v]
            continue
        value = values[0]
        if name == "select_checkpoint":
            CheckpointRule.parse(value)
        elif name == "psnr_min":
            PsnrFilter.parse(value)
        elif name == "stat" and value not in STAT_MODES:
            raise ValueError(f"--stat {value}: choose from {', '.join(STAT_MODES)}")
        elif name == "select_by" and value not in ("mean", "best-seed"):
            raise ValueError(f"--select-by {value}: choose from mean, best-seed")
        elif name == "ddof":
            if value not in ("0", "1"):
                raise ValueError(f"--ddof {value}: choose 0 or 1")
            value = int(value)
        options[name] = value
    return options


def read_rule(path: Path) -> SweepRule | None:
    """The rule of a sweep file's header (its leading comment lines; several ``# Report:`` lines are read as one),
    None when it has none; ValueError for a rule that does not parse."""
    path = Path(path)
    parts = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(RULE_PREFIX):
            parts.append(line[len(RULE_PREFIX):].strip())
    if not parts:
        return None
    line = " ".join(parts)
    try:
        return SweepRule(path, parse_rule(line), line)
    except ValueError as exc:
        raise ValueError(f"{path}: {RULE_PREFIX} {line}: {exc}") from None


def sweep_file(hydra_yaml: Path) -> Path | None:
    """The sweep file a ``multirun.yaml`` or ``.hydra/hydra.yaml`` was composed from, None for the plain ``train``
    config or one that cannot be found."""
    import yaml

    try:
        cfg = yaml.safe_load(Path(hydra_yaml).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    hydra = cfg.get("hydra", cfg) if isinstance(cfg, dict) else {}
    name = ((hydra.get("job") or {}).get("config_name")) if isinstance(hydra, dict) else None
    if not name or name == "train":
        return None
    sources = (hydra.get("runtime") or {}).get("config_sources") or []
    order = {"command-line": 0, "main": 1}
    dirs = [Path(s["path"]) for s in sorted((s for s in sources if isinstance(s, dict) and s.get("schema") == "file"
                                             and s.get("path")), key=lambda s: order.get(s.get("provider"), 2))]
    for d in [*dirs, SWEEP_DIR]:
        candidate = d / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def _is_run_dir(path: Path) -> bool:
    return (path / ".hydra" / "config.yaml").is_file() or (path / "metrics.json").is_file()


def hydra_files(directory: Path) -> list[Path]:
    """The ``multirun.yaml`` files that say which sweep the runs under ``directory`` came from (or the run's own
    ``.hydra/hydra.yaml``); empty when there is none."""
    directory = Path(directory)
    for up in [directory, *list(directory.resolve().parents)[:_ANCESTORS]]:
        if (up / "multirun.yaml").is_file():
            return [up / "multirun.yaml"]
    if _is_run_dir(directory):
        own = directory / ".hydra" / "hydra.yaml"
        return [own] if own.is_file() else []
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        here = Path(dirpath)
        if "multirun.yaml" in filenames:
            found.append(here / "multirun.yaml")
            dirnames[:] = []
        elif here != directory and _is_run_dir(here):
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("wandb", "checkpoints"))
    return found


def find_rules(dirs: Iterable[Path | str]) -> tuple[list[SweepRule], list[str]]:
    """The rules of the sweeps under ``dirs`` (one per sweep file) and warnings about rules that do not parse."""
    rules: dict[Path, SweepRule] = {}
    warnings = []
    seen: set[Path] = set()
    for d in dirs:
        if not Path(d).is_dir():
            continue
        for hydra_yaml in hydra_files(Path(d)):
            path = sweep_file(hydra_yaml)
            if path is None or path in seen:
                continue
            seen.add(path)
            try:
                rule = read_rule(path)
            except (OSError, ValueError) as exc:
                warnings.append(f"warning: sweep rule ignored: {' '.join(str(exc).split())}")
                continue
            if rule is not None:
                rules[path] = rule
    return list(rules.values()), warnings


def merge_rules(rules: Sequence[SweepRule], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The options the sweeps' rules set that ``given`` (the options on the command line) does not, and a line
    saying where they come from; ValueError when two rules disagree on an option not given."""
    merged: dict[str, Any] = {}
    origin: dict[str, SweepRule] = {}
    for rule in rules:
        for name, value in rule.options.items():
            if name in given:
                continue
            if name in merged and merged[name] != value:
                raise ValueError(
                    f"the sweeps' report rules disagree on {OPTION_FLAGS[name]}: {_show(merged[name])} "
                    f"({origin[name].path.name}) vs {_show(value)} ({rule.path.name}); give {OPTION_FLAGS[name]} "
                    f"on the command line (or --no-sweep-rule)")
            merged[name] = value
            origin.setdefault(name, rule)
    lines = []
    if rules:
        overridden = sorted({OPTION_FLAGS[n] for r in rules for n in r.options if n in given})
        lines.append("rule from " + "; ".join(r.text() for r in rules)
                     + (f"; overridden on the command line: {', '.join(overridden)}" if overridden else ""))
    return merged, lines


def _show(value) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)
