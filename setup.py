"""Packages of the distribution (the rest of the metadata is in pyproject.toml).

The repository keeps ``conf/`` and ``sweeps/`` at its top level; the wheel carries them inside the package as
``disentangle.conf`` and ``disentangle.sweeps`` (found by ``disentangle.runtime.paths``). pyproject.toml cannot
express this mapping together with package discovery, hence this file.
"""
from setuptools import find_packages, setup

MAPPED = {"disentangle.conf": "conf", "disentangle.sweeps": "sweeps"}

setup(packages=[*find_packages(include=["disentangle", "disentangle.*"]), *MAPPED], package_dir=MAPPED)
