"""Evaluation and visualisation callbacks: gather latents, call metrics, draw figures, log."""
from .evaluation import SUMMARY_KEYS, DisentanglementEvaluation
from .figures import intervention_grid, nmi_heatmap

__all__ = ["SUMMARY_KEYS", "DisentanglementEvaluation", "intervention_grid", "nmi_heatmap"]
