"""Regularizers: each sees what it needs from a training step and returns named loss terms.

Weight decay is not a loss term; it lives in the optimizer's parameter groups (``decay_groups``).
"""
from .base import Regularizer, StepContext, batch_std
from .klm import KernelMultiInformation, kernel_multi_information
from .nhp import NormalizedHessianPenalty, normalized_hessian_penalty
from .weight_decay import decay_groups

__all__ = [
    "KernelMultiInformation",
    "NormalizedHessianPenalty",
    "Regularizer",
    "StepContext",
    "batch_std",
    "decay_groups",
    "kernel_multi_information",
    "normalized_hessian_penalty",
]
