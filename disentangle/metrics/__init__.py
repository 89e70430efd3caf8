"""Disentanglement and reconstruction metrics: pure functions of arrays (numpy in, floats/arrays out).

Torch tensors are accepted and converted; this package imports neither models nor data code.
"""

from disentangle.metrics.dci import DEFAULT_DEPTH_GRID, dci, dci_from_importance, entropy_base
from disentangle.metrics.infomec import (
    ACTIVE_RULES,
    INFOE_FEATURES,
    active_latents,
    as_numpy,
    entropy_discrete,
    infoe,
    infom_infoc,
    infomec,
    label_encode,
    label_encode_columns,
    nmi_matrix,
)
from disentangle.metrics.reconstruction import PSNR_CAP_DB, psnr, psnr_per_image

__all__ = [
    "ACTIVE_RULES",
    "DEFAULT_DEPTH_GRID",
    "INFOE_FEATURES",
    "PSNR_CAP_DB",
    "active_latents",
    "as_numpy",
    "dci",
    "dci_from_importance",
    "entropy_base",
    "entropy_discrete",
    "infoe",
    "infom_infoc",
    "infomec",
    "label_encode",
    "label_encode_columns",
    "nmi_matrix",
    "psnr",
    "psnr_per_image",
]
