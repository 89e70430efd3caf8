"""Weight decay on network weights only, as AdamW parameter groups (QLAE paper §3, Alg. 2;
the exempt parameters follow the authors' code)."""
from __future__ import annotations

from collections.abc import Iterable

from torch import nn


def decay_groups(modules: dict[str, nn.Module], weight_decay: float, exempt: Iterable[nn.Module] = ()):
    """Split parameters into a decayed group (kernels, weight matrices, norm scales, learned constants)
    and an undecayed one (every ``bias`` -- including norm shifts -- and every parameter of ``exempt``
    modules, e.g. codebooks). Returns AdamW param-group dicts; the decayed group is first.
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0 (got {weight_decay})")
    exempt_ids = {id(p) for m in exempt for p in m.parameters()}
    decay, no_decay = [], []
    for prefix, module in modules.items():
        for name, p in module.named_parameters(prefix=prefix):
            if not p.requires_grad:
                continue
            (no_decay if name.endswith("bias") or id(p) in exempt_ids else decay).append(p)
    return [
        {"params": decay, "weight_decay": float(weight_decay), "name": "decayed"},
        {"params": no_decay, "weight_decay": 0.0, "name": "undecayed"},
    ]
