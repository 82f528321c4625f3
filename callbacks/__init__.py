"""Lightning callbacks, one behaviour each."""

from callbacks.base import RLCallback
from callbacks.checkpoint import ModelCheckpoint
from callbacks.curriculum import CurriculumPhases
from callbacks.early_stopping import EarlyStopping
from callbacks.epsilon import EpsilonDecay
from callbacks.evaluation import PolicyEvaluation
from callbacks.flexibility import FlexibilityUpdate
from callbacks.nonfinite import NonFiniteGuard
from callbacks.progress import FrameProgressBar
from callbacks.selfplay import SelfPlay

__all__ = ["CurriculumPhases", "EarlyStopping", "EpsilonDecay", "FlexibilityUpdate", "FrameProgressBar",
           "ModelCheckpoint", "NonFiniteGuard", "PolicyEvaluation", "RLCallback", "SelfPlay"]
