"""runtime.config_files: each config file parsed once per process, compositions unchanged by it."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from disentangle.runtime import config  # noqa: F401  (puts the caching sources in place)
from disentangle.runtime.config_files import _PARSED, cache_parsed_configs
from disentangle.runtime.paths import config_dir


def _compose(directory: Path, overrides: list[str], name: str = "train") -> str:
    with initialize_config_dir(config_dir=str(directory), version_base="1.3"):
        return OmegaConf.to_yaml(compose(name, overrides=overrides))


@pytest.mark.parametrize("overrides", [["model=tripod", "data=shapes3d"], ["model=qlae"], ["model=cliff_balls"]])
def test_a_cached_composition_equals_hydras_own(overrides):
    try:
        cache_parsed_configs(False)
        hydras = _compose(config_dir(), overrides)
        cache_parsed_configs(True)
        first, second = _compose(config_dir(), overrides), _compose(config_dir(), overrides)
    finally:
        cache_parsed_configs(True)
    assert first == hydras and second == hydras


def test_an_edited_file_is_parsed_again_and_a_handed_out_config_is_a_copy(tmp_path):
    (tmp_path / "main.yaml").write_text("defaults:\n  - part: a\n  - _self_\nvalue: 1\n")
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "a.yaml").write_text("size: 3\n")
    assert "size: 3" in _compose(tmp_path, [], "main")
    assert any("size: 3" in text for text in _PARSED)  # the parse was kept

    (tmp_path / "part" / "a.yaml").write_text("size: 4\n")  # same file, new text
    assert "size: 4" in _compose(tmp_path, [], "main")

    # an override edits what Hydra loaded; the kept parse must not see it
    assert "size: 9" in _compose(tmp_path, ["part.size=9"], "main")
    assert "size: 4" in _compose(tmp_path, [], "main")
