"""Static VRPTW route construction as a batched TorchRL env (:mod:`~envs.vrptw.env`, on the rules of
:mod:`envs.routing`), with an instance source drawn from DVRP episodes (:mod:`~envs.vrptw.source`): the
training ground of the DVRP env's neural oracle."""

from envs.vrptw.config import VRPTWConfig
from envs.vrptw.env import VRPTWEnv
from envs.vrptw.source import ServedSetInstances

__all__ = ["ServedSetInstances", "VRPTWConfig", "VRPTWEnv"]
