"""Where the configs are: ``conf/`` (the Hydra config groups) and ``sweeps/`` (the papers' sweep files).

The repository keeps both at its top level; the wheel carries them inside the package (``disentangle/conf``,
``disentangle/sweeps``, mapped there at build time). A checkout or an editable install reads the checkout's
copies, so an edit there takes effect without reinstalling; an installed wheel reads its own.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # disentangle/
SWEEPS_ALIAS = "sweeps"  # `-cd sweeps` as the sweep files' headers write it, from any directory


def checkout_root() -> Path | None:
    """The repository this package runs from (a checkout, an editable install); None for a wheel."""
    root = PACKAGE.parent
    if (root / "pyproject.toml").is_file() and (root / "conf" / "train.yaml").is_file():
        return root
    return None


def config_dir() -> Path:
    """The primary Hydra config directory: ``train.yaml``, ``evaluate.yaml``, ``prepare.yaml``, the groups."""
    return (checkout_root() or PACKAGE) / "conf"


def sweeps_dir() -> Path:
    """The directory of the papers' sweep files (``python -m disentangle.train -m -cd sweeps -cn NAME``)."""
    return (checkout_root() or PACKAGE) / "sweeps"


def sweep_arguments(args: list[str]) -> list[str]:
    """Hydra's arguments with the sweep directory made findable from any directory and from a wheel.

    ``-cd sweeps`` (``--config-dir sweeps``, ``--config-dir=sweeps``) names :func:`sweeps_dir` when
    ``sweeps`` is not a directory here, and ``-cn NAME`` naming a sweep file with no ``-cd`` gets
    ``-cd <sweeps_dir>``: Hydra would otherwise look for it only in ``conf/``. The rest stays as it is."""
    out = list(args)
    has_dir = False
    name = None
    i = 0
    while i < len(out):
        arg = out[i]
        flag, eq, value = arg.partition("=")
        if flag in ("-cd", "--config-dir"):
            has_dir = True
            if eq:
                out[i] = f"{flag}={_sweeps_alias(value)}"
            elif i + 1 < len(out):
                out[i + 1] = _sweeps_alias(out[i + 1])
                i += 1
        elif flag in ("-cn", "--config-name"):
            name = value if eq else (out[i + 1] if i + 1 < len(out) else None)
            i += 0 if eq else 1
        i += 1
    if not has_dir and name and _is_sweep(name):
        out[:0] = ["-cd", str(sweeps_dir())]
    return out


def shadowed_sweep(args: list[str]) -> str | None:
    """The one-line problem when ``-cd sweeps -cn NAME`` would read a ``sweeps`` folder of the current directory
    that has no ``NAME.yaml`` while the project's sweeps (:func:`sweeps_dir`) have it: the local folder shadows
    them, and Hydra's own error would only say the config does not exist. None otherwise."""
    config_dirs, name = [], None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in ("-cd", "--config-dir"):
            config_dirs.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
        elif flag in ("-cn", "--config-name"):
            name = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    if not name or len(config_dirs) != 1:
        return None
    local, stem = Path(config_dirs[0]).expanduser(), name.removesuffix(".yaml")
    if local.parts != (SWEEPS_ALIAS,) or not local.is_dir() or (local / f"{stem}.yaml").is_file():
        return None
    installed = sweeps_dir()
    if not (installed / f"{stem}.yaml").is_file() or local.resolve() == installed.resolve():
        return None
    return (f"-cd sweeps: the folder {local.resolve()} here has no {stem}.yaml and hides the project's sweeps "
            f"({installed}, which has it); run from another directory or pass -cd {installed}")


def _sweeps_alias(value: str) -> str:
    path = Path(value).expanduser()
    if path.parts == (SWEEPS_ALIAS,) and not path.is_dir():
        return str(sweeps_dir())
    return value


def _is_sweep(name: str) -> bool:
    stem = name.removesuffix(".yaml")
    return not (config_dir() / f"{stem}.yaml").is_file() and (sweeps_dir() / f"{stem}.yaml").is_file()
