"""The lock file: every dependency pinned, and the environment `make install` built is the locked one.

`make test-latest` runs the suite on the newest releases instead and deselects the last test, which by design
fails there.
"""
from __future__ import annotations

import re
import sys
from importlib import metadata

import pytest
from conftest import ROOT

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

LOCK = ROOT / "requirements.lock"
NOT_LOCKED = {"torch"}  # installed per machine by the Makefile (CPU build without a GPU driver)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            pins[normalize(name)] = version.strip()
    return pins


def header(key: str) -> str:
    match = re.search(rf"^# {key}: *(\S+)", LOCK.read_text(), re.MULTILINE)
    assert match, f"{LOCK.name} has no '# {key}:' line"
    return match.group(1)


def requirement_names(extras=("dev",)) -> set[str]:
    """The distributions pyproject requires, core and the given extras (following self-referencing extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = normalize(project["name"])
    names, todo, seen = set(), list(project["dependencies"]), set()
    todo += [r for e in extras for r in project["optional-dependencies"][e]]
    while todo:
        req = todo.pop()
        name = normalize(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
        if name == own:
            for extra in re.search(r"\[([^\]]*)\]", req).group(1).split(","):
                if extra.strip() not in seen:
                    seen.add(extra.strip())
                    todo += project["optional-dependencies"][extra.strip()]
        else:
            names.add(name)
    return names


def test_the_lock_pins_every_requirement_for_one_python_and_platform():
    pins = locked()
    assert re.fullmatch(r"3\.\d+", header("python")) and header("platform")
    missing = requirement_names() - NOT_LOCKED - set(pins)
    assert not missing, f"{LOCK.name} lacks {sorted(missing)}: run `make lock`"
    assert not {n for n in pins if n == "torch" or n.startswith("nvidia-")}, "the lock must not carry torch or CUDA"


def test_the_environment_is_the_locked_one():
    """`make install` installed exactly the locked versions (where this Python is the lock's)."""
    if "{}.{}".format(*sys.version_info[:2]) != header("python"):
        pytest.skip(f"Python {sys.version_info[0]}.{sys.version_info[1]}: the lock is for {header('python')}")
    differ = {}
    for name, version in locked().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            differ[name] = ("missing", version)
            continue
        if installed != version:
            differ[name] = (installed, version)
    assert not differ, f"installed vs locked: {differ} (run `make install` after `make lock`)"
