"""Dynamic VRP with time windows and window offers (the headline problem)."""

from envs.dvrp.config import DVRPConfig, FlexibilityConfig
from envs.dvrp.env import DVRPEnv

__all__ = ["DVRPConfig", "DVRPEnv", "FlexibilityConfig"]
