"""Lightning callbacks, one behaviour each."""

from callbacks.evaluation import PolicyEvaluation
from callbacks.progress import FrameProgressBar

__all__ = ["FrameProgressBar", "PolicyEvaluation"]
