"""What the fork server that starts the rollout workers imports
(:func:`pipelines.data.collectors.start_workers_from_forkserver`).

The server imports this module once, before it forks any worker: torch, tensordict, TorchRL's collectors and envs,
and this project's envs, modules and worker-side data path. Then it moves every object made so far into the garbage
collector's permanent generation (``gc.freeze``), so that a worker's collections never write into the pages it
shares with the server and the other workers: with 8 game workers (``benchmarks/games_throughput.py``), about 175 MB
per worker (PSS) instead of 229. The learner never imports this module.
"""

import gc
import importlib
import sys

# The workers collect locally and never use Ray, which TorchRL imports whenever it is installed (the ``ray`` extra):
# a None entry makes ``importlib.util.find_spec("ray")`` answer None, so TorchRL takes Ray as absent here (in this
# server and its workers only; the learner and Ray's own actors are other interpreters).
sys.modules["ray"] = None

# what a worker needs (its env builder is pipelines.data.collectors): imported here once, not by each worker
WORKER_IMPORTS = ("torch", "tensordict", "torchrl.collectors", "torchrl.envs", "envs", "modules",
                  "pipelines.data.collectors")

for name in WORKER_IMPORTS:
    importlib.import_module(name)
gc.collect()
gc.freeze()
