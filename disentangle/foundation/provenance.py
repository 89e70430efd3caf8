"""What produced a number: the versions of the software a metric depends on, and the project's commit.

Recorded under ``versions`` in every ``metrics.json`` (training's and ``disentangle.evaluate``'s), because a
dependency's release can change a metric silently (scikit-learn's mutual information has done so before).
Versions come from the installed distributions' metadata, so nothing heavy is imported here; CUDA and cuDNN are
read from torch when it is already loaded (it always is where metrics are written).
"""
from __future__ import annotations

import contextlib
import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# distribution name -> key in the record
DISTRIBUTIONS = {
    "torch": "torch",
    "pytorch-lightning": "pytorch_lightning",
    "lightning": "lightning",
    "hydra-core": "hydra",
    "omegaconf": "omegaconf",
    "numpy": "numpy",
    "scikit-learn": "scikit_learn",
    "scipy": "scipy",
    "torchmetrics": "torchmetrics",
    "h5py": "h5py",
    "wandb": "wandb",
}


def cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name and its feature flags (``/proc/cpuinfo``; elsewhere the platform's name, no flags): what
    every timing names, since machines differ."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):  # no /proc (macOS): the name from platform, no flags
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    return name, flags


# the widest vector instructions a CPU offers, widest first (/proc/cpuinfo flags): float results of one computation
# differ between them (oneDNN picks its kernels by them), so a CPU's name alone ("AMD EPYC") does not say enough
VECTOR_ISAS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "sse4_2")


def machine() -> dict[str, str | int]:
    """``{"cpu": model name, "vector_isa": widest of VECTOR_ISAS offered ("" where unknown), "cpu_count": n}``:
    where a run's numbers came from (training is deterministic on one CPU kind, not across them)."""
    name, flags = cpu_info()
    return {"cpu": name, "vector_isa": next((isa for isa in VECTOR_ISAS if isa in flags), ""),
            "cpu_count": os.cpu_count() or 1}


@functools.cache
def software_versions() -> dict[str, str | bool]:
    """``{"python": ..., "disentangle": ..., "torch": ..., ...}``: only what is installed; ``cuda``/``cudnn``
    where torch has them; ``git_commit`` (and ``git_dirty``) when the package runs from a git checkout."""
    import disentangle

    out = {"python": platform.python_version(), "disentangle": getattr(disentangle, "__version__", "unknown")}
    for dist, key in DISTRIBUTIONS.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        if torch.backends.cudnn.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
    out.update(git_state(Path(__file__).resolve().parents[2]))  # the checkout holding disentangle/foundation/
    return out


def git_state(root: Path) -> dict[str, str | bool]:
    """The commit of the checkout at ``root`` and whether its tracked files differ from it; empty outside one
    (an installed wheel) or without git."""
    if not (root / ".git").exists():
        return {}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": commit, "git_dirty": bool(dirty)}
