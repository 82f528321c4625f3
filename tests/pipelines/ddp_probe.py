"""A test callback: each rank writes what the DDP test compares (env seeds, first instance, weights)."""

from __future__ import annotations

import json
import os

import lightning as L
import torch


class DDPProbe(L.Callback):
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.first_xy: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        base = getattr(trainer.datamodule.env, "base_env", trainer.datamodule.env)
        if self.first_xy is None and hasattr(base, "instances"):  # (a DVRP env's first day)
            self.first_xy = float(base.instances["xy"].sum())

    @staticmethod
    def _row_seeds(trainer) -> list[int]:
        """The row seeds of the envs that collected: the rollout workers' or Ray actors' (through the collector's
        ``map_fn``), else the in-process env's."""
        data = trainer.datamodule
        collector = data._collector
        if data.workers:
            n = data.workers
            states = collector.map_fn("env.base_env.resume_state", [()] * n, [{}] * n)
            return [seed for state in states for seed in state["row_seed"].tolist()]
        base = getattr(data.env, "base_env", data.env)
        state = base.resume_state() if hasattr(base, "resume_state") else {}
        return state["row_seed"].tolist() if "row_seed" in state else []  # (a gymnasium env has none)

    def on_train_end(self, trainer, pl_module) -> None:
        params = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
        model = trainer.datamodule.env_models.get("flexibility")
        embedding = [] if model is None else torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump({"rank": trainer.global_rank, "world": trainer.world_size,
                       "row_seed": self._row_seeds(trainer), "first_xy": self.first_xy,
                       "params": params.tolist(), "embedding": embedding, "frames": pl_module.collected_frames,
                       "steps": trainer.global_step}, f)
