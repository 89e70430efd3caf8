"""A callback for multi-process tests: every rank saves its parameters and optimizer states at the end of training
(``rank<r>.pt`` in ``path``), so a test can check that data-parallel training kept the processes identical."""
from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch


class RankStateDump(pl.Callback):
    def __init__(self, path: str):
        self.path = Path(path)

    def on_train_end(self, trainer, pl_module) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        optimizers = [opt.optimizer.state_dict() if hasattr(opt, "optimizer") else opt.state_dict()
                      for opt in trainer.optimizers]
        torch.save({"state_dict": {k: v.detach().clone() for k, v in pl_module.state_dict().items()},
                    "optimizers": optimizers, "global_step": trainer.global_step},
                   self.path / f"rank{trainer.global_rank}.pt")
