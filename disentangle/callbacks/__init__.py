"""Evaluation and visualisation callbacks: gather latents, call metrics, draw figures, log."""
from .evaluation import SUMMARY_KEYS, DisentanglementEvaluation
from .figures import intervention_grid, nmi_heatmap

__all__ = ["DisentanglementEvaluation", "SUMMARY_KEYS", "nmi_heatmap", "intervention_grid"]
