"""Checkpoints are data, not code (issue 30 item 9): every entry point that opens a checkpoint reads it with
``torch.load(weights_only=True)`` (disentangle.runtime.checkpointing.read_checkpoint), so a shared file whose unpickling
would run a command is refused in one line naming what it needs, and the command never runs."""
import os

import forked_cli
import pytest
import torch
from conftest import run_cli

from disentangle.errors import ConfigError
from disentangle.runtime.checkpointing import (
    UnsafeCheckpointError,
    check_checkpoint,
    load_checkpoint,
    read_checkpoint,
)


class _RunsACommand:
    """Unpickling this calls os.system(command): what a malicious checkpoint would carry."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.fixture
def malicious(tmp_path):
    """(a checkpoint that would create ``marker`` when unpickled, marker); shaped like a training checkpoint."""
    marker = tmp_path / "the_command_ran"
    path = tmp_path / "shared.ckpt"
    torch.save({"state_dict": {}, "optimizer_states": [], "loops": {}, "global_step": 3,
                "disentangle_config": {"payload": _RunsACommand(f"touch {marker}")}}, path)
    return path, marker


def test_read_checkpoint_refuses_a_pickled_command_naming_it_and_runs_nothing(malicious):
    path, marker = malicious
    for opener in (lambda: read_checkpoint(path, f"ckpt={path}"), lambda: load_checkpoint(path),
                   lambda: check_checkpoint(path)):
        with pytest.raises(UnsafeCheckpointError, match=r"refused: the file needs posix\.system") as exc:
            opener()
        assert len(str(exc.value).splitlines()) == 1
    assert not marker.exists()


def test_a_file_that_is_no_checkpoint_is_unreadable_not_unsafe(tmp_path):
    path = tmp_path / "truncated.ckpt"
    path.write_bytes(b"PK\x03\x04 not a whole zip")
    with pytest.raises(ConfigError, match="truncated or damaged") as exc:
        read_checkpoint(path, "resume: checkpoint")
    assert not isinstance(exc.value, UnsafeCheckpointError)


def test_no_entry_point_runs_a_malicious_checkpoint(malicious, tmp_path):
    path, marker = malicious
    evaluate = forked_cli.run("disentangle.evaluate", f"ckpt={path}", timeout=300)
    resume = run_cli("model=ae", "model/arch=small", "data=sprites", f"resume={path}",
                     f"hydra.run.dir={tmp_path / 'resumed'}")
    auto = tmp_path / "auto"
    (auto / "checkpoints").mkdir(parents=True)
    (auto / "checkpoints" / "last.ckpt").write_bytes(path.read_bytes())
    auto_resume = run_cli("model=ae", "model/arch=small", "data=sprites", "auto_resume=true",
                          f"hydra.run.dir={auto}")
    for name, res in (("evaluate", evaluate), ("resume", resume), ("auto_resume", auto_resume)):
        assert res.returncode != 0, name
        assert "refused: the file needs posix.system" in res.stderr, (name, res.stderr[-1500:])
    assert not marker.exists()
