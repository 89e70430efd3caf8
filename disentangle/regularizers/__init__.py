"""Regularizers: each sees what it needs from a training step and returns named loss terms.

Weight decay is not a loss term; it lives in the optimizer's parameter groups (``decay_groups``).
"""
from .annealed import AnnealedCapacity, annealed_capacity
from .base import Regularizer, StepContext, batch_std
from .bio import BiologicalConstraints, biological_constraints
from .cliff import Cliff, cliff_terms
from .dip_vae import DIPVAE, dip_vae_penalty
from .hfs import HausdorffFactorizedSupport, hausdorff_factorized_support
from .ioss import IOSS, ioss
from .klm import KernelMultiInformation, kernel_multi_information
from .nhp import NormalizedHessianPenalty, normalized_hessian_penalty
from .supervision import LabelSupervision, binned_cross_entropy, supervised_bce, supervised_l2
from .tc_discriminator import AdversarialTotalCorrelation, discriminator_loss, permute_latents, tc_estimate
from .tcvae import DecomposedKL, LocatelloTotalCorrelation, dlib_total_correlation, tcvae_decomposition
from .weight_decay import decay_groups

__all__ = [
    "DIPVAE",
    "IOSS",
    "AdversarialTotalCorrelation",
    "AnnealedCapacity",
    "BiologicalConstraints",
    "Cliff",
    "DecomposedKL",
    "HausdorffFactorizedSupport",
    "KernelMultiInformation",
    "LabelSupervision",
    "LocatelloTotalCorrelation",
    "NormalizedHessianPenalty",
    "Regularizer",
    "StepContext",
    "annealed_capacity",
    "batch_std",
    "binned_cross_entropy",
    "biological_constraints",
    "cliff_terms",
    "decay_groups",
    "dip_vae_penalty",
    "discriminator_loss",
    "dlib_total_correlation",
    "hausdorff_factorized_support",
    "ioss",
    "kernel_multi_information",
    "normalized_hessian_penalty",
    "permute_latents",
    "supervised_bce",
    "supervised_l2",
    "tc_estimate",
    "tcvae_decomposition",
]
