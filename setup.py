"""Packages of the distribution and its long description (the rest of the metadata is in pyproject.toml).

The repository keeps ``conf/`` and ``sweeps/`` at its top level; the wheel carries them inside the package as
``disentangle.conf`` and ``disentangle.sweeps`` (found by ``disentangle.runtime.paths``). pyproject.toml cannot
express this mapping together with package discovery, hence this file.

The long description is README.md with its relative links made absolute, so that they work on a package index: a
``docs/<page>.md`` link goes to that page of the docs site (pyproject's ``Documentation`` URL, the one setting),
any other file to the repository (``Repository``).
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

MAPPED = {"disentangle.conf": "conf", "disentangle.sweeps": "sweeps"}
HERE = Path(__file__).resolve().parent
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def project_url(name: str) -> str:
    """A ``[project.urls]`` entry of pyproject.toml (read as text: no TOML parser before Python 3.11)."""
    found = re.search(rf'^{name}\s*=\s*"([^"]+)"', (HERE / "pyproject.toml").read_text(), re.MULTILINE)
    return found.group(1).rstrip("/") + "/"


def absolute(link: str, docs: str, repository: str) -> str:
    """``link`` of README.md as an absolute URL (an absolute link or an anchor stays as it is)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#", link, re.IGNORECASE):
        return link
    path, _, anchor = link.partition("#")
    anchor = f"#{anchor}" if anchor else ""
    if path.startswith("docs/") and path.endswith(".md"):
        page = path.removeprefix("docs/").removesuffix(".md")
        page = "" if page == "index" else page.removesuffix("/index") + "/"
        return f"{docs}{page}{anchor}"
    if path.startswith("docs/"):  # an image or a file the site serves as it is
        return f"{docs}{path.removeprefix('docs/')}{anchor}"
    return f"{repository}blob/main/{path}{anchor}"


def long_description() -> str:
    docs, repository = project_url("Documentation"), project_url("Repository")
    text = (HERE / "README.md").read_text(encoding="utf-8")
    return LINK.sub(lambda m: m.group(1) + absolute(m.group(2), docs, repository) + m.group(3), text)


setup(packages=[*find_packages(include=["disentangle", "disentangle.*"]), *MAPPED], package_dir=MAPPED,
      long_description=long_description(), long_description_content_type="text/markdown")
