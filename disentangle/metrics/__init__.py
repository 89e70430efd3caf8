"""Disentanglement and reconstruction metrics: pure functions of arrays (numpy in, floats/arrays out).

Torch tensors are accepted and converted; this package imports neither models nor data code. The sampled
metrics (FactorVAE and BetaVAE scores, ``sampled.py``) take a data module and an encoder instead of arrays; they
use only the module's duck-typed ``gather`` / ``factor_sizes`` API. ``suite.py`` runs a chosen set by name;
``common.py`` holds the helpers the metric modules share.
"""

from disentangle.metrics.common import as_numpy, entropy_discrete, label_encode, label_encode_columns
from disentangle.metrics.dci import DEFAULT_DEPTH_GRID, dci, dci_from_importance, entropy_base
from disentangle.metrics.infomec import (
    ACTIVE_RULES,
    INFOE_FEATURES,
    active_latents,
    infoe,
    infom_infoc,
    infomec,
    nmi_matrix,
)
from disentangle.metrics.mcc import CORRELATIONS, abs_correlation, mcc
from disentangle.metrics.mig import DISCRETIZATIONS, equal_width_bins, mi_matrix, mig
from disentangle.metrics.modularity import explicitness, modularity, modularity_from_mi
from disentangle.metrics.reconstruction import (
    PSNR_CAP_DB,
    mse,
    mse_per_image,
    psnr,
    psnr_from_mse,
    psnr_per_image,
)
from disentangle.metrics.rotation import rotation
from disentangle.metrics.sampled import betavae_score, factorvae_score
from disentangle.metrics.sap import sap
from disentangle.metrics.suite import (
    ARRAY_METRICS,
    METRICS,
    SAMPLED_METRICS,
    SCALAR_KEYS,
    array_metrics,
    check_metric_names,
    sampled_metrics,
)

__all__ = [
    "ACTIVE_RULES",
    "ARRAY_METRICS",
    "CORRELATIONS",
    "DEFAULT_DEPTH_GRID",
    "DISCRETIZATIONS",
    "INFOE_FEATURES",
    "METRICS",
    "PSNR_CAP_DB",
    "SAMPLED_METRICS",
    "SCALAR_KEYS",
    "abs_correlation",
    "active_latents",
    "array_metrics",
    "as_numpy",
    "betavae_score",
    "check_metric_names",
    "dci",
    "dci_from_importance",
    "entropy_base",
    "entropy_discrete",
    "equal_width_bins",
    "explicitness",
    "factorvae_score",
    "infoe",
    "infom_infoc",
    "infomec",
    "label_encode",
    "label_encode_columns",
    "mcc",
    "mi_matrix",
    "mig",
    "modularity",
    "modularity_from_mi",
    "mse",
    "mse_per_image",
    "nmi_matrix",
    "psnr",
    "psnr_from_mse",
    "psnr_per_image",
    "rotation",
    "sampled_metrics",
    "sap",
]
