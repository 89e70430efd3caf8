"""Lightning callbacks: the evaluation (InfoMEC, DCI and the other registered metrics during training, figures at
the end), split into gathering (:mod:`.gather`), the metric worker (:mod:`.worker`) and outputs (:mod:`.outputs`,
which draws the figures of :mod:`.figures`)."""
from .evaluation import SUMMARY_KEYS, DisentanglementEvaluation, EvaluationError, shard_positions

__all__ = ["SUMMARY_KEYS", "DisentanglementEvaluation", "EvaluationError", "shard_positions"]
