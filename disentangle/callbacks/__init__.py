"""Evaluation and visualisation callbacks: gather latents, call metrics, draw figures, log."""
from .evaluation import SUMMARY_KEYS, DisentanglementEvaluation, EvaluationError, shard_positions
from .figures import dci_importance_heatmap, intervention_grid, nmi_heatmap, reconstruction_grid

__all__ = [
    "SUMMARY_KEYS",
    "DisentanglementEvaluation",
    "EvaluationError",
    "dci_importance_heatmap",
    "intervention_grid",
    "nmi_heatmap",
    "reconstruction_grid",
    "shard_positions",
]
