"""Lightning callbacks, one behaviour each."""

from callbacks.embedding import EmbeddingUpdate
from callbacks.evaluation import PolicyEvaluation
from callbacks.progress import FrameProgressBar

__all__ = ["EmbeddingUpdate", "FrameProgressBar", "PolicyEvaluation"]
