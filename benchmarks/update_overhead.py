"""Update overhead: one update through our module (``training_step`` under a Lightning ``Trainer``) against the
same update written in plain torch, per algorithm, in one run.

    python benchmarks/update_overhead.py [--dqn configs/cartpole_dqn.yaml] [--sac configs/pendulum_sac.yaml]
        [--ppo configs/cartpole_ppo.yaml] [--updates 3072] [--repeats 3] [--algorithms dqn sac ppo]

Both sides train the config's networks on one sampled batch (``batch_size`` random transitions, or a PPO
minibatch of ``mini_batch_size`` frames, of the config's env shapes: CartPole for DQN and PPO, Pendulum for SAC)
with the same arithmetic:

* DQN: Huber or L2 TD(0) loss against a target network, global gradient-norm clip, fused Adam, the hard or
  soft target update;
* SAC: twin critics with a clipped double-Q target from the target critics and a tanh-Gaussian next action,
  the reparameterised actor loss against the (frozen) critics, the temperature loss, one fused Adam with a
  learning rate per group, global clip, Polyak update of the target critics;
* PPO: the clipped objective on standardised advantages, the MSE value loss, the entropy bonus, global clip,
  Adam and the learning-rate schedule's step.

Ours runs as ``pipelines.fit`` runs it: Lightning's loop, manual optimisation, metrics recorded, the
updates of one collected batch per training step (``K`` in the output: ``utd_ratio``, or PPO's epochs times
minibatches; also measured with K = 1, Lightning's loop once per update). The plain loop is a bare ``for`` loop
over the update. Both sides flush denormal floats to zero, as ``pipelines.fit`` does by default
(``--flush_denormal 0``: neither). Each side is timed ``--repeats`` times, alternating; the best time of each
counts. One torch thread. Prints one JSON object (last line):
``{"dqn": {"ours_us", "ours_k1_us", "plain_us", "ratio", "ratio_k1", "K", ...}, "sac": {...}, "ppo": {...},
"peak_rss_mb", ...}``; ratio = ours / plain (issue 13's goal: <= 1.3).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import resource
import sys
import time

import torch
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def settings_of(config_path: str) -> dict:
    """A config's model and network arguments (with the classes' defaults), the sampled batch or minibatch size
    and the updates per collected batch."""
    from benchmarks.peer_sb3 import data_settings, resolve

    with open(config_path) as f:
        config = yaml.safe_load(f)
    model, data = resolve(config["model"]), data_settings(config)
    if "mini_batch_size" in data:  # on-policy
        size = data["mini_batch_size"]
        updates = data["ppo_epochs"] * data["frames_per_batch"] // size
    else:
        size, updates = data["batch_size"], data["utd_ratio"]
    return {"model": {k: v for k, v in model.items() if k != "network"}, "network": resolve(model["network"]),
            "batch_size": size, "updates_per_batch": updates}


def sample_batch(n: int, features: int, action, k: int = 1):
    """``[k, n]`` copies of one batch of ``n`` random transitions with ``features`` observation entries and the
    given ``action`` ``[n, ...]``."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    done = torch.rand(n, 1, generator=g) < 0.05
    one = TensorDict(observation=torch.randn(n, features, generator=g), action=action,
                     next=TensorDict(observation=torch.randn(n, features, generator=g),
                                     reward=torch.randn(n, 1, generator=g), done=done, terminated=done.clone(),
                                     batch_size=[n]), batch_size=[n])
    return one.unsqueeze(0).expand(k, n).clone()


def _mlp(inputs: int, hidden: list[int], outputs: int) -> torch.nn.Sequential:
    layers, width = [], inputs
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, outputs))


# ---------------------------------------------------------------------------------------------------- ours
def time_ours(model, batch, updates: int) -> float:
    """Seconds per update of ``model.training_step`` fed ``batch`` ``[K, N]`` by a Lightning Trainer."""
    import lightning as L
    from torch.utils.data import DataLoader, IterableDataset

    k = batch.shape[0]
    steps = max(updates // k, 2)

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

    class Data(L.LightningDataModule):  # what the modules read of a data module (the lr schedule's budget)
        total_frames = 10**12

        def env_specs(self):
            return None  # the module is built already

        def train_dataloader(self):
            return DataLoader(Stream(), batch_size=None, collate_fn=lambda x: x)

    clock = Clock()
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[clock], accelerator="cpu", devices=1)
    trainer.fit(model, datamodule=Data())
    return (time.perf_counter() - clock.start) / ((steps - 1) * k)


def _specs(env_id: str):
    """The specs of a one-row env of ``env_id``, which the module shapes its networks on (``RLModule.build_on``)."""
    from envs import EnvSpecs, make_env
    from envs.gym import GymConfig

    env = make_env(GymConfig(env_id=env_id), 1, 0)
    try:
        return EnvSpecs.of(env)
    finally:
        env.close()


def dqn_module(settings: dict, k: int, features: int = 4, actions: int = 2):
    from modules.dqn import DQNModule
    from modules.q_networks import QNetwork

    network = QNetwork(**{key: settings["network"][key] for key in ("num_actions", "hidden_dims", "dueling")})
    model = DQNModule(network, **settings["model"])
    model.build_on(_specs("CartPole-v1"))
    n = settings["batch_size"]
    return model, sample_batch(n, features, torch.randint(actions, (n,)), k)


def sac_module(settings: dict, k: int, features: int = 3, dim: int = 1):
    from modules.sac import SACModule, SACNetworks

    model = SACModule(SACNetworks(**settings["network"]), **settings["model"])
    model.build_on(_specs("Pendulum-v1"))
    n = settings["batch_size"]
    return model, sample_batch(n, features, torch.rand(n, dim) * 4 - 2, k)


def ppo_module(settings: dict, k: int, features: int = 4, actions: int = 2):
    from modules.actor_critic import MLPActorCritic
    from modules.ppo import PPOModule

    model = PPOModule(MLPActorCritic(**settings["network"]), **settings["model"])
    model.build_on(_specs("CartPole-v1"))
    return model, ppo_minibatch(settings, features, actions, k)


def ppo_minibatch(settings: dict, features: int, actions: int, k: int = 1):
    """``[k, n]`` copies of one PPO minibatch of an env with ``features`` observation entries and ``actions``
    discrete actions (the configs take the number from the env): observations, actions, their log-probabilities,
    GAE outputs."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    n = settings["batch_size"]
    one = TensorDict(observation=torch.randn(n, features, generator=g),
                     action=torch.randint(actions, (n,), generator=g),
                     action_log_prob=torch.full((n,), -math.log(actions)) + 0.1 * torch.randn(n, generator=g),
                     advantage=torch.randn(n, 1, generator=g), value_target=torch.randn(n, 1, generator=g),
                     batch_size=[n])
    return one.unsqueeze(0).expand(k, n).clone()


# ---------------------------------------------------------------------------------------------------- plain
def time_plain(update, updates: int) -> float:
    update(0)
    start = time.perf_counter()
    for i in range(1, updates):
        update(i)
    return (time.perf_counter() - start) / (updates - 1)


def dqn_plain(settings: dict, features: int = 4, actions: int = 2):
    """The DQN update as a plain torch function of the update index."""
    import torch.nn.functional as F

    h, net = settings["model"], settings["network"]
    if net.get("dueling"):
        raise ValueError("the plain DQN update here has no dueling head: use a config with dueling: false")
    q = _mlp(features, net["hidden_dims"], actions)
    target = copy.deepcopy(q).requires_grad_(False)
    params = list(q.parameters())
    optimizer = torch.optim.Adam(params, lr=h["lr"], fused=True)
    n = settings["batch_size"]
    one = sample_batch(n, features, torch.randint(actions, (n,)))[0]
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
        torch.nn.utils.clip_grad_norm_(params, h["max_grad_norm"])
        optimizer.step()
        with torch.no_grad():
            if h["target_update"] == "soft":
                for t, s in zip(target.parameters(), params, strict=True):
                    t.lerp_(s, h["tau"])
            elif (i + 1) % h["target_update_interval"] == 0:
                for t, s in zip(target.parameters(), params, strict=True):
                    t.copy_(s)

    return update


def sac_plain(settings: dict, features: int = 3, dim: int = 1):
    """The continuous SAC update as a plain torch function of the update index (tanh-Gaussian on [-2, 2])."""
    import torch.nn.functional as F

    h, net = settings["model"], settings["network"]
    actor = _mlp(features, net["actor_hidden_dims"], 2 * dim)
    critics = torch.nn.ModuleList(_mlp(features + dim, net["critic_hidden_dims"], 1)
                                  for _ in range(h["num_qvalue_nets"]))
    targets = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = torch.nn.Parameter(torch.tensor(math.log(h["alpha_init"])))
    groups = [(list(actor.parameters()), h["actor_lr"]), (list(critics.parameters()), h["critic_lr"]),
              ([log_alpha], h["alpha_lr"])]
    params = [p for group, _ in groups for p in group]
    optimizer = torch.optim.Adam([{"params": g, "lr": lr} for g, lr in groups], fused=True)
    n = settings["batch_size"]
    one = sample_batch(n, features, torch.rand(n, dim) * 4 - 2)[0]
    obs, action, next_obs = one["observation"], one["action"], one["next", "observation"]
    reward, terminated = one["next", "reward"], one["next", "terminated"]
    scale_bound = 2.0

    def act(o):  # a reparameterised tanh-Gaussian sample on [-2, 2] and its log-probability
        loc, raw = actor(o).chunk(2, -1)
        scale = F.softplus(raw + 0.5413) + 1e-4
        u = loc + scale * torch.randn_like(loc)
        log_prob = (-((u - loc) / scale) ** 2 / 2 - scale.log() - 0.5 * math.log(2 * math.pi)
                    - 2 * (math.log(2) - u - F.softplus(-2 * u)) - math.log(scale_bound)).sum(-1)
        return scale_bound * torch.tanh(u), log_prob

    def q_values(nets, o, a):
        x = torch.cat([o, a], -1)
        return torch.stack([net(x) for net in nets])

    def update(i: int) -> None:
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = act(next_obs)
            next_value = (q_values(targets, next_obs, next_action) - alpha * next_log_prob.unsqueeze(-1)).min(0)[0]
            y = (reward + h["gamma"] * (~terminated) * next_value).squeeze(-1)
        predicted = q_values(critics, obs, action).squeeze(-1)
        loss_q = F.smooth_l1_loss(predicted, y.expand_as(predicted), reduction="none").sum(0).mean()
        new_action, log_prob = act(obs)
        for p in critics.parameters():
            p.requires_grad_(False)
        min_q = q_values(critics, obs, new_action).min(0)[0].squeeze(-1)
        for p in critics.parameters():
            p.requires_grad_(True)
        loss_actor = (alpha * log_prob - min_q).mean()
        loss_alpha = (-log_alpha * (log_prob.detach() - dim)).mean()
        optimizer.zero_grad()
        (loss_q + loss_actor + loss_alpha).backward()
        torch.nn.utils.clip_grad_norm_(params, h["max_grad_norm"])
        optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(targets.parameters()), list(critics.parameters()), h["tau"])

    return update


def ppo_plain(settings: dict, features: int = 4, actions: int = 2):
    """The clipped PPO minibatch update as a plain torch function of the update index."""
    import torch.nn.functional as F

    h, net = settings["model"], settings["network"]
    act = torch.nn.Tanh if net["activation"] == "tanh" else torch.nn.ReLU

    def mlp(out: int) -> torch.nn.Sequential:
        layers, width = [], features
        for hidden in net["hidden_dims"]:
            layers += [torch.nn.Linear(width, hidden), act()]
            width = hidden
        return torch.nn.Sequential(*layers, torch.nn.Linear(width, out))

    actor, critic = mlp(actions), mlp(1)
    params = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=h["lr"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    one = ppo_minibatch(settings, features, actions)[0]
    obs, action, old_log_prob = one["observation"], one["action"], one["action_log_prob"]
    advantage, target = one["advantage"], one["value_target"]
    eps = h["clip_epsilon"]

    def update(i: int) -> None:
        adv = (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)
        dist = torch.distributions.Categorical(logits=actor(obs))
        ratio = (dist.log_prob(action) - old_log_prob).exp().unsqueeze(-1)
        loss_pi = -torch.minimum(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv).mean()
        loss = (loss_pi + h["critic_coeff"] * F.mse_loss(critic(obs), target)
                - h["entropy_coeff"] * dist.entropy().mean())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, h["max_grad_norm"])
        optimizer.step()
        scheduler.step()

    return update


CASES = {"dqn": (dqn_module, dqn_plain), "sac": (sac_module, sac_plain), "ppo": (ppo_module, ppo_plain)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dqn", default=os.path.join(ROOT, "configs", "cartpole_dqn.yaml"))
    parser.add_argument("--sac", default=os.path.join(ROOT, "configs", "pendulum_sac.yaml"))
    parser.add_argument("--ppo", default=os.path.join(ROOT, "configs", "cartpole_ppo.yaml"))
    parser.add_argument("--algorithms", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--updates", type=int, default=3072, help="updates per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flush_denormal", type=int, choices=[0, 1], default=1,
                        help="1: denormal floats flushed to zero on both sides, as pipelines.fit runs (its default)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(bool(args.flush_denormal))
    result = {}
    for name in args.algorithms:
        make_module, make_plain = CASES[name]
        config = getattr(args, name)
        settings = settings_of(config)
        k = settings["updates_per_batch"]
        updates = max(args.updates // k, 2) * k
        times: dict[str, list[float]] = {"ours": [], "ours_k1": [], "plain": []}
        for _ in range(args.repeats):
            times["plain"].append(time_plain(make_plain(settings), updates))
            times["ours"].append(time_ours(*make_module(settings, k), updates))
            times["ours_k1"].append(time_ours(*make_module(settings, 1), updates))
        best = {key: min(values) * 1e6 for key, values in times.items()}
        result[name] = {"ours_us": best["ours"], "ours_k1_us": best["ours_k1"], "plain_us": best["plain"],
                        "ratio": best["ours"] / best["plain"], "ratio_k1": best["ours_k1"] / best["plain"], "K": k,
                        "batch_size": settings["batch_size"], "config": os.path.relpath(config, ROOT),
                        "updates_per_run": updates,
                        "all_us": {key: [t * 1e6 for t in values] for key, values in times.items()}}
    result.update(peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, torch=torch.__version__,
                  threads=torch.get_num_threads(), flush_denormal=bool(args.flush_denormal),
                  load_average_1min=os.getloadavg()[0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
