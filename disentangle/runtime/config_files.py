"""Each config file parsed once per process.

Hydra reads and parses every YAML file of a composition anew each time it composes (PyYAML in pure Python), and a
sweep, ``claims --diff``, the doctor's families or the test suite compose hundreds of times: loading the files was
about 40% of a composition's time (the config repository's ``load_config``, profiled over the 82 compositions of one
family enumeration). :func:`cache_parsed_configs` puts config sources in place for Hydra's ``file://`` and ``pkg://``
schemes that keep each parse, keyed by the file's *text* (an edited file is parsed again, whatever its time stamp),
and hand each composition its own deep copy (Hydra edits what it loads; a copy costs about a quarter of a parse).
"""
from __future__ import annotations

import copy
import io
import os
import zipfile

from hydra._internal.core_plugins.file_config_source import FileConfigSource as _HydraFileSource
from hydra._internal.core_plugins.importlib_resources_config_source import (
    ImportlibResourcesConfigSource as _HydraPackageSource,
)
from hydra._internal.sources_registry import SourcesRegistry
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import OmegaConf

_PARSED: dict[str, tuple[dict, object]] = {}   # a file's text -> (its header, its config), never handed out


def _result(source: ConfigSource, text: str) -> ConfigResult:
    """What Hydra's sources return for a file holding ``text``: the header read from its first 512 characters, the
    config parsed from all of it (a copy of the kept parse)."""
    parsed = _PARSED.get(text)
    if parsed is None:
        parsed = _PARSED[text] = (ConfigSource._get_header_dict(text[:512]), OmegaConf.load(io.StringIO(text)))
    header, config = parsed
    return ConfigResult(config=copy.deepcopy(config), path=f"{source.scheme()}://{source.path}",
                        provider=source.provider, header=dict(header))


# named as Hydra's own classes: Hydra's plugin discovery registers its sources by scheme and leaves a scheme alone
# when the class registered for it has the same name (it refuses another name)
class FileConfigSource(_HydraFileSource):
    """``file://`` config directories, each file's parse kept."""

    def load_config(self, config_path: str) -> ConfigResult:
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        if not os.path.exists(full_path):
            raise ConfigLoadError(f"Config not found : {full_path}")
        with open(full_path, encoding="utf-8") as f:
            return _result(self, f.read())


class ImportlibResourcesConfigSource(_HydraPackageSource):
    """``pkg://`` config packages (Hydra's own configs among them), each file's parse kept."""

    def _read_config(self, res) -> ConfigResult:
        if isinstance(res, zipfile.Path):  # zipfile's paths take no encoding
            return _result(self, res.read_bytes().decode("utf-8"))
        return _result(self, res.read_text(encoding="utf-8"))


_SCHEMES = {"file": (_HydraFileSource, FileConfigSource), "pkg": (_HydraPackageSource, ImportlibResourcesConfigSource)}


def cache_parsed_configs(enabled: bool = True) -> None:
    """Use the caching sources for new compositions (``enabled=False``: Hydra's own again, the kept parses dropped)."""
    registry = SourcesRegistry.instance()
    for scheme, (hydra_source, cached) in _SCHEMES.items():
        registry.types[scheme] = cached if enabled else hydra_source
    if not enabled:
        _PARSED.clear()
