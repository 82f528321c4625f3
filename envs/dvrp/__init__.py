"""Dynamic VRP with time windows and window offers (the headline problem)."""

from envs.dvrp.config import DVRPConfig
from envs.dvrp.customers import CustomerModel
from envs.dvrp.env import DVRPEnv

__all__ = ["CustomerModel", "DVRPConfig", "DVRPEnv"]
