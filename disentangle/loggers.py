"""Logger factories for configs that need a little logic."""
from __future__ import annotations

import os


def wandb_logger(save_dir: str, project: str = "disentangle", offline: bool | None = None, **kwargs):
    """The real W&B logger; offline unless an API key is configured, and ``WANDB_MODE`` always wins."""
    from pytorch_lightning.loggers import WandbLogger

    if offline is None:
        mode = os.environ.get("WANDB_MODE")
        if mode:
            offline = mode in ("offline", "dryrun", "disabled")
        else:
            offline = not (os.environ.get("WANDB_API_KEY") or _has_netrc_key())
    return WandbLogger(save_dir=save_dir, project=project, offline=offline, **kwargs)


def _has_netrc_key() -> bool:
    path = os.path.expanduser("~/.netrc")
    try:
        with open(path) as f:
            return "api.wandb.ai" in f.read()
    except OSError:
        return False
