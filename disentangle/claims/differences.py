"""What a claim's two sides differ in (``python -m disentangle.claims --diff NAME``): a comparison stands for what its
paper compares only when its sides differ in that alone (one method against another on one protocol, or one
ablated part), so each claim declares it (``differs_in`` in claims.yaml) and a test holds every claim to it.

``differs_in`` lists config keys (a key covers everything below it) and may name ``family``: every key under
``model`` that makes a method what it is (its latent, regularizers, loss weights, weight decay, name), that is, all
of ``model`` but the protocol a paper runs every method on (:data:`PROTOCOL`).
"""
from __future__ import annotations

from functools import cache

from .catalog import Claim, RunSpec

__all__ = ["ABSENT", "FAMILY", "PROTOCOL", "declared", "differences", "resolved_config"]

FAMILY = "family"
# the keys a paper holds equal across the methods it compares (batch, networks, optimizer but weight decay, data)
PROTOCOL = ("model.batch_size", "model.arch", "model.optimizer.lr", "model.optimizer.betas", "model.optimizer.eps",
            "model.optimizer.clip_value", "model.optimizer.clip_undecayed", "model.optimizer.schedule")
ABSENT = "(absent)"  # a key one side's config does not have (null is a value)


def _covers(prefix: str, key: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def declared(key: str, differs_in: tuple[str, ...]) -> bool:
    """Whether ``key`` lies in what the claim declares its sides may differ in."""
    if FAMILY in differs_in and key.startswith("model.") and not any(_covers(p, key) for p in PROTOCOL):
        return True
    return any(_covers(d, key) for d in differs_in if d != FAMILY)


@cache
def resolved_config(overrides: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    """The training config a run's overrides compose to (seed 0, the run directory a placeholder), fully resolved
    and flattened to (dotted key, value) pairs; the launcher's ``hydra`` section is not part of a run's config."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ..runtime import config as _config  # noqa: F401  (registers the resolvers conf/ uses)
    from ..runtime.paths import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "seed=0", "paths.output_dir=RUN_DIR"])
    return tuple(_flatten(OmegaConf.to_container(cfg, resolve=True)).items())


def _flatten(node, prefix: str = "") -> dict:
    """Leaves by dotted key; an empty mapping has none (``regularizers: {}`` is as good as no regularizers)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def _diff(a: RunSpec, b: RunSpec) -> dict[str, list]:
    left, right = dict(resolved_config(a.overrides)), dict(resolved_config(b.overrides))
    return {k: [left.get(k, ABSENT), right.get(k, ABSENT)] for k in sorted(set(left) | set(right))
            if left.get(k, ABSENT) != right.get(k, ABSENT)}


def differences(claim: Claim) -> dict[str, dict[str, list]]:
    """``{"declared": {key: [better, worse]}, "undeclared": {key: [better, worse]}}`` over the resolved configs of
    the claim's two sides. A selection claim's sides are its pool: each member against the first (a key shows the
    first member that differs); a threshold claim has one side, so nothing differs."""
    runs = claim.runs()
    found: dict[str, list] = {}
    for other in runs[1:]:
        for key, pair in _diff(runs[0], other).items():
            found.setdefault(key, pair)
    out: dict[str, dict[str, list]] = {"declared": {}, "undeclared": {}}
    for key, pair in found.items():
        out["declared" if declared(key, claim.differs_in) else "undeclared"][key] = pair
    return out
