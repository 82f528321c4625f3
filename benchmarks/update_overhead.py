"""Update overhead: one DQN update through our module (``DQNModule.training_step`` under a Lightning ``Trainer``)
against the same update written in plain torch, in one run.

    python benchmarks/update_overhead.py [--config configs/cartpole_dqn.yaml] [--updates 3072] [--repeats 3]

Both sides train the config's network on the same sampled batch (``batch_size`` random CartPole-like
transitions) with the same arithmetic: Huber or L2 TD(0) loss against a target network, global gradient-norm
clip, fused Adam, the hard or soft target update. Ours runs as ``pipelines.fit`` runs it: Lightning's loop,
manual optimisation, metrics recorded, ``utd_ratio`` updates per training step (``K`` in the output; also
measured with K = 1, Lightning's loop once per update). The plain loop is a bare ``for`` loop over the
update. Each side is timed ``--repeats`` times, alternating; the best time of each counts. One torch thread.
Prints one JSON object (last line): ``{"dqn": {"ours_us", "ours_k1_us", "plain_us", "ratio", "ratio_k1", "K"},
"peak_rss_mb", ...}``; ratio = ours / plain (goal <= 1.3).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import sys
import time

import torch
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def dqn_settings(config_path: str) -> dict:
    """The DQN hyper-parameters of a config, with the defaults of ``DQNModule`` and ``OffPolicyDataModule``."""
    from benchmarks.peer_sb3 import resolve

    with open(config_path) as f:
        config = yaml.safe_load(f)
    model, data = resolve(config["model"]), resolve(config["data"])
    return {"model": model, "network": resolve(model["network"]), "batch_size": data["batch_size"],
            "utd_ratio": data["utd_ratio"]}


def sample_batch(n: int, features: int, actions: int, k: int):
    """K stacked sampled batches ``[K, n]`` of random transitions (one batch repeated K times)."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    done = torch.rand(n, 1, generator=g) < 0.05
    one = TensorDict(observation=torch.randn(n, features, generator=g), action=torch.randint(actions, (n,), generator=g),
                     next=TensorDict(observation=torch.randn(n, features, generator=g),
                                     reward=torch.ones(n, 1), done=done, terminated=done.clone(), batch_size=[n]),
                     batch_size=[n])
    return one.unsqueeze(0).expand(k, n).clone()


def time_ours(settings: dict, updates: int, k: int, features: int = 4, actions: int = 2) -> float:
    """Seconds per update of ``DQNModule.training_step`` fed ``[k, batch_size]`` stacks by a Lightning Trainer."""
    import lightning as L
    from tensordict import TensorDict
    from torch.utils.data import DataLoader, IterableDataset
    from torchrl.data import Categorical

    from modules.dqn import DQNModule, QNetwork

    network = QNetwork(**{key: settings["network"][key] for key in ("num_actions", "hidden_dims", "dueling")})
    model = DQNModule(network, **{key: value for key, value in settings["model"].items() if key != "network"})
    model.build(Categorical(actions), TensorDict(observation=torch.zeros(1, features), batch_size=[1]))
    batch = sample_batch(settings["batch_size"], features, actions, k)
    steps = updates // k

    class Stream(IterableDataset):
        def __iter__(self):
            for _ in range(steps):
                yield batch

        def __len__(self):
            return steps

    class Clock(L.Callback):  # the first training step (Lightning's and torch's warm-up) is not timed
        start = None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 0:
                self.start = time.perf_counter()

    clock = Clock()
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[clock], accelerator="cpu", devices=1)
    trainer.fit(model, DataLoader(Stream(), batch_size=None, collate_fn=lambda x: x))
    return (time.perf_counter() - clock.start) / ((steps - 1) * k)


def time_plain(settings: dict, updates: int, features: int = 4, actions: int = 2) -> float:
    """Seconds per update of the same DQN update written as a plain torch loop."""
    import torch.nn.functional as F
    from torch import nn

    h, net = settings["model"], settings["network"]
    if net.get("dueling"):
        raise ValueError("the plain DQN update here has no dueling head: use a config with dueling: false")
    layers, width = [], features
    for hidden in net["hidden_dims"]:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    q = nn.Sequential(*layers, nn.Linear(width, actions))
    target = copy.deepcopy(q).requires_grad_(False)
    params = list(q.parameters())
    optimizer = torch.optim.Adam(params, lr=h["lr"], fused=True)
    one = sample_batch(settings["batch_size"], features, actions, 1)[0]
    obs, action, next_obs = one["observation"], one["action"], one["next", "observation"]
    reward, terminated = one["next", "reward"].squeeze(-1), one["next", "terminated"].squeeze(-1)
    loss_fn = F.smooth_l1_loss if h["loss_function"] == "smooth_l1" else F.mse_loss

    def update(i: int) -> None:
        with torch.no_grad():
            if h["double_dqn"]:
                next_value = target(next_obs).gather(-1, q(next_obs).argmax(-1, keepdim=True)).squeeze(-1)
            else:
                next_value = target(next_obs).max(-1).values
            y = reward + h["gamma"] * (~terminated) * next_value
        loss = loss_fn(q(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, h["max_grad_norm"])
        optimizer.step()
        with torch.no_grad():
            if h["target_update"] == "soft":
                for t, s in zip(target.parameters(), params):
                    t.lerp_(s, h["tau"])
            elif (i + 1) % h["target_update_interval"] == 0:
                for t, s in zip(target.parameters(), params):
                    t.copy_(s)

    update(0)
    start = time.perf_counter()
    for i in range(1, updates):
        update(i)
    return (time.perf_counter() - start) / (updates - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "cartpole_dqn.yaml"))
    parser.add_argument("--updates", type=int, default=3072, help="updates per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = dqn_settings(args.config)
    k = settings["utd_ratio"]
    updates = max(args.updates // k, 2) * k
    times: dict[str, list[float]] = {"ours": [], "ours_k1": [], "plain": []}
    for _ in range(args.repeats):
        times["plain"].append(time_plain(settings, updates))
        times["ours"].append(time_ours(settings, updates, k))
        times["ours_k1"].append(time_ours(settings, updates, 1))
    best = {name: min(values) * 1e6 for name, values in times.items()}
    result = {"dqn": {"ours_us": best["ours"], "ours_k1_us": best["ours_k1"], "plain_us": best["plain"],
                      "ratio": best["ours"] / best["plain"], "ratio_k1": best["ours_k1"] / best["plain"], "K": k,
                      "batch_size": settings["batch_size"], "hidden_dims": settings["network"]["hidden_dims"],
                      "all_us": {name: [t * 1e6 for t in values] for name, values in times.items()}},
              "config": os.path.relpath(args.config, ROOT), "updates_per_run": updates,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_1min": os.getloadavg()[0]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
