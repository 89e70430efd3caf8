"""Where prepared caches live: the default data root and the ``<root>/<name>[_<variant>].h5`` file of a dataset.

Both the reader (``prepared.py``) and the writer (``preparation.py``) need these; they sit here, importing
neither, so that the two do not import each other.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["VARIANT_DEFAULT", "cache_path", "default_root", "is_default_variant", "not_prepared", "resolve_root"]

# the variant whose cache is plain <name>.h5 (other variants get <name>_<variant>.h5)
VARIANT_DEFAULT = {"mpi3d": "complex", "causalchamber_photos": "uniform"}


def default_root() -> Path:
    return Path(os.environ.get("DISENTANGLE_DATA", "~/.cache/disentangle")).expanduser()


def resolve_root(root: str | os.PathLike | None) -> Path:
    """``root`` with ``~`` expanded, or :func:`default_root` when it is empty."""
    return Path(root).expanduser() if root else default_root()


def is_default_variant(name: str, variant: str | None) -> bool:
    """True when ``variant`` (None or empty: the default) is the one whose cache is plain ``<name>.h5``."""
    return not variant or variant == VARIANT_DEFAULT.get(name)


def cache_path(name: str, root: str | os.PathLike | None = None, variant: str | None = None) -> Path:
    """``<root>/<name>.h5``, or ``<root>/<name>_<variant>.h5`` for a non-default variant (e.g. mpi3d_toy)."""
    root = resolve_root(root)
    if not is_default_variant(name, variant):
        return root / f"{name}_{variant}.h5"
    return root / f"{name}.h5"


def not_prepared(name: str, path: Path, variant: str | None = None, raw: str = "") -> str:
    """The one line for a dataset whose cache ``path`` is missing: the file expected and the command that makes it
    (said by the reader, and by ``disentangle.runtime.preflight`` before torch is imported)."""
    hint = f" (made from the official {raw})" if raw else ""
    option = "" if is_default_variant(name, variant) else f" data.variant={variant}"
    return (f"{name} is not prepared: expected {path}{hint}; "
            f"run `python -m disentangle.prepare data={name}{option} data.root={path.parent}`")
