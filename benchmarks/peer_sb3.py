"""Peer benchmark: the same DQN, SAC, TD3 or PPO run here and in Stable-Baselines3, in one command.

    python benchmarks/peer_sb3.py [--config configs/cartpole_dqn.yaml] [--total_frames N] [--episodes 32]
        [--seed S] [--eval_seed S] [--quick] [--device cpu|cuda] [--compile_mode MODE] [--sb3_flush_denormal]
        [--repeats R] [--ours_async_worker] [--sb3_threads N]
    python benchmarks/peer_sb3.py --config configs/pendulum_sac.yaml    # SAC on Pendulum-v1
    python benchmarks/peer_sb3.py --config configs/pendulum_td3.yaml    # TD3 on Pendulum-v1
    python benchmarks/peer_sb3.py --config configs/cartpole_ppo.yaml    # PPO on CartPole-v1 (8 envs)
    python benchmarks/peer_sb3.py --config configs/pendulum_ppo.yaml    # PPO on Pendulum-v1 (continuous)

Needs the ``bench`` extra (``pip install -e .[bench]``: stable-baselines3). Each trainer runs in its own
spawned process with ``torch.set_num_threads(1)`` (SB3: ``--sb3_threads``), so peak memory (``ru_maxrss`` of that
process) and thread settings are per trainer. ``--ours_async_worker`` gives ours one rollout worker that collects
while the learner trains (a second process, whose memory the peak leaves out):

* ours: ``pipelines.fit.main`` on a temporary copy of the config without logger, checkpoints,
  progress bar and evaluation callbacks (only ``callbacks.EpsilonDecay`` is kept);
* SB3: ``stable_baselines3.DQN``, ``SAC``, ``TD3`` or ``PPO`` (by the config's model) with hyper-parameters read from
  the same YAML (:func:`dqn_hyperparameters`, :func:`sac_hyperparameters`, :func:`td3_hyperparameters` and
  :func:`ppo_hyperparameters` document the mappings; settings SB3 cannot mirror stop the script).

``steps_per_s`` is collected env frames over the wall time of building the trainer plus the whole
training (imports and evaluation excluded); ``ratio`` is ours / SB3. With ``--repeats R`` the two trainers run R
times in turn (ours, SB3, ours, ...; the same seeds every round): ``ours`` and ``sb3`` are each side's median
run (by ``steps_per_s``, the lower middle one for an even R; with every run's ``rounds_steps_per_s``), ``ratio``
the ratio of the medians and ``round_ratios`` each round's; on a host whose speed drifts, read the median. Both
trained policies are then played greedily by ``pipelines.evaluate.play`` on the same env and seeds
(``--episodes`` episodes, one per env row), so both see the same initial states. ``--quick`` is a smoke run (a few
training phases, 8 episodes). Prints one JSON object (last stdout line):
``{"ours": {...}, "sb3": {...}, "ratio": ..., "hyperparameters": {...}, "caveats": [...], ...}``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from multiprocessing import get_context

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Only what the config's hyper-parameters need is imported here; the trainers import their stacks in
# their own processes, so each one's peak memory holds its own stack only.
CONFIG = os.path.join(ROOT, "configs", "cartpole_dqn.yaml")
MISSING_SB3 = ("stable-baselines3 is not installed: it is the benchmark-only extra 'bench'. "
               "Install it with `pip install -e .[bench]` (or `pip install \"stable-baselines3>=2.3,<3\"`).")


def resolve(spec: dict) -> dict:
    """``init_args`` of a ``{class_path, init_args}`` entry, completed with the class's defaults."""
    module, name = spec["class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**defaults, **(spec.get("init_args") or {})}


def data_settings(config: dict) -> dict:
    """A run config's data-path settings by their short names, with the defaults filled in: the data module's own
    keys (``total_frames``, ``env``...), its ``collector`` section's (``num_envs``, ``frames_per_batch``...), for
    replay its ``replay_buffer`` section's (``buffer_size``, ``utd_ratio``...) and PPO's ``ppo_epochs`` and
    ``mini_batch_size`` (from ``model``)."""
    from pipelines.data import CollectorOptions, ReplayOptions

    data, model, given = resolve(config["data"]), resolve(config["model"]), config["data"].get("init_args") or {}
    flat = {k: v for k, v in data.items() if k not in ("collector", "replay_buffer")}
    flat.update({**asdict(CollectorOptions()), **(given.get("collector") or {})})
    if "replay_buffer" in data:
        flat.update({**asdict(ReplayOptions()), **(given.get("replay_buffer") or {})})
    flat.update({k: model[k] for k in ("ppo_epochs", "mini_batch_size") if k in model})
    return flat


def setting_override(key: str, value) -> str:
    """The command-line override of a setting named as in :func:`data_settings` (e.g. ``num_envs`` ->
    ``--data.init_args.collector.num_envs=...``)."""
    from pipelines.renamed import RENAMED_KEYS, new_place

    where = {**RENAMED_KEYS["OnPolicyDataModule"], **RENAMED_KEYS["OffPolicyDataModule"]}.get(key, key)
    return f"--{new_place(['data', 'init_args'], where)}={value}"


def sb3_hyperparameters(config: dict, total_frames: int, seed: int) -> tuple[dict, list[str]]:
    """SB3 keyword arguments (with ``algorithm``, ``env_id``, ``n_envs``, ``total_timesteps``, ``seed``) and the
    known differences, for a DQN, SAC, TD3 or PPO config of this framework.

    Raises:
        ValueError: another model, or a setting SB3 cannot mirror (the message names it).
    """
    model_class = config["model"]["class_path"]
    if model_class.endswith("SACModule"):
        return sac_hyperparameters(config, total_frames, seed)
    if model_class.endswith("TD3Module"):
        return td3_hyperparameters(config, total_frames, seed)
    if model_class.endswith("DQNModule"):
        return dqn_hyperparameters(config, total_frames, seed)
    if model_class.endswith("PPOModule"):
        return ppo_hyperparameters(config, total_frames, seed)
    raise ValueError(f"model {model_class} has no SB3 peer here: modules.dqn.DQNModule, modules.sac.SACModule, "
                     f"modules.td3.TD3Module or modules.ppo.PPOModule")


def actor_critic_hyperparameters(config: dict, algorithm: str, total_frames: int, seed: int,
                                 problems: Callable[[dict], list[str]]) -> tuple[dict, dict, dict]:
    """The SB3 keyword arguments its SAC and TD3 share, for an off-policy actor-critic config of this framework (B =
    ``num_envs``, F = ``frames_per_batch``, U = ``utd_ratio``): F / B -> ``train_freq``, U -> ``gradient_steps`` (U
    updates after every F frames in both); ``init_random_frames`` -> ``learning_starts``; ``actor_lr`` ->
    ``learning_rate``; ``tau``, ``gamma``, ``batch_size``, ``buffer_size``, ``num_qvalue_nets`` -> ``n_critics``,
    ``actor_hidden_dims`` / ``critic_hidden_dims`` -> ``policy_kwargs.net_arch`` (``pi`` / ``qf``); seed. Returns
    them with the model's and the data module's resolved settings.

    Raises:
        ValueError: what ``problems(model settings)`` finds, or an env other than a gymnasium id (one message).
    """
    model, data = resolve(config["model"]), data_settings(config)
    network, env = resolve(model["network"]), resolve(data["env"])
    found = problems(model)
    if not data["env"]["class_path"].endswith("GymConfig"):
        found.append(f"env {data['env']['class_path']} (needs envs.gym.GymConfig: a gymnasium id)")
    if found:
        raise ValueError(f"the config has settings SB3's {algorithm} cannot mirror: " + "; ".join(found))
    hp = {
        "algorithm": algorithm, "env_id": env["env_id"], "n_envs": data["num_envs"], "total_timesteps": total_frames,
        "seed": seed, "learning_rate": model["actor_lr"], "buffer_size": data["buffer_size"],
        "learning_starts": data["init_random_frames"], "batch_size": data["batch_size"], "tau": model["tau"],
        "gamma": model["gamma"], "train_freq": data["frames_per_batch"] // data["num_envs"],
        "gradient_steps": data["utd_ratio"],
        "policy_kwargs": {"net_arch": {"pi": list(network["actor_hidden_dims"]),
                                       "qf": list(network["critic_hidden_dims"])},
                          "n_critics": model["num_qvalue_nets"]},
    }
    return hp, model, data


def sac_hyperparameters(config: dict, total_frames: int, seed: int) -> tuple[dict, list[str]]:
    """SB3 ``SAC`` keyword arguments for a SAC config of this framework, and the known differences.

    Mapping (ours -> SB3; B = ``num_envs``, F = ``frames_per_batch``, U = ``utd_ratio``): F / B ->
    ``train_freq``, U -> ``gradient_steps`` (U updates after every F frames in both); ``init_random_frames``
    -> ``learning_starts``; ``actor_lr`` = ``critic_lr`` = ``alpha_lr`` -> ``learning_rate``; ``alpha_init`` ->
    ``ent_coef="auto_<alpha_init>"`` (learned; target entropy -dim(A) in both) or, with ``fixed_alpha``, the
    number; ``tau``, ``gamma``, ``batch_size``, ``buffer_size``, ``num_qvalue_nets`` -> ``n_critics``,
    ``actor_hidden_dims`` / ``critic_hidden_dims`` -> ``policy_kwargs.net_arch`` (``pi`` / ``qf``, ReLU MLPs),
    seed.

    Raises:
        ValueError: a setting SB3's SAC cannot mirror (the message names it).
    """
    hp, model, data = actor_critic_hyperparameters(config, "SAC", total_frames, seed, lambda model: [
        "model.actor_lr, critic_lr and alpha_lr must be equal (SB3's SAC has one learning_rate)"
    ] if not model["actor_lr"] == model["critic_lr"] == model["alpha_lr"] else [])
    hp["ent_coef"] = model["alpha_init"] if model["fixed_alpha"] else f"auto_{model['alpha_init']}"
    frames = data["frames_per_batch"]
    random_frames = -(-data["init_random_frames"] // frames) * frames
    caveats = [
        f"ours acts randomly for whole collected batches: {random_frames} frames vs SB3's {data['init_random_frames']}",
        f"ours clips the gradient norm at {model['max_grad_norm']}; SB3's SAC does not clip",
        "ours takes one Adam step on the summed actor, critic and temperature losses (per-part learning rates); "
        "SB3 steps them one after the other, the actor seeing the updated critic",
        "both evaluate the final policy (the config's PolicyEvaluation / best.ckpt is left out)",
    ]
    return hp, caveats


def dqn_hyperparameters(config: dict, total_frames: int, seed: int) -> tuple[dict, list[str]]:
    """SB3 ``DQN`` keyword arguments for a DQN config of this framework, and the known differences.

    Mapping (ours -> SB3; B = ``num_envs``, F = ``frames_per_batch``, U = ``utd_ratio``):

    * ``frames_per_batch`` / B -> ``train_freq`` (SB3 counts steps of the vectorised env);
      ``utd_ratio`` -> ``gradient_steps``: U updates after every F frames in both.
    * ``target_update_interval`` K (optimiser steps, hard copy) -> ``target_update_interval`` = K * F / U
      env frames, ``tau`` 1. SB3 copies inside the collection loop, where the online net is frozen,
      so with K = U (RL Zoo: 128 updates per 256 frames) both copy once per training phase, between
      phases: SB3's 256 here is equivalent to RL Zoo's 10 (any value <= 256 copies the same weights).
    * ``EpsilonDecay`` (linear): ``annealing_frames / total_frames`` -> ``exploration_fraction`` (SB3's
      schedule is a fraction of ``learn``'s budget), ``eps_init`` / ``eps_end`` ->
      ``exploration_initial_eps`` / ``exploration_final_eps``.
    * ``init_random_frames`` -> ``learning_starts``; ``lr``, ``batch_size``, ``buffer_size``, ``gamma``,
      ``n_steps``, ``max_grad_norm``, ``hidden_dims`` -> ``policy_kwargs.net_arch``
      (ReLU MLP, default ``nn.Linear`` init in both), seed. SB3's loss is always Huber (ours:
      ``smooth_l1``) and its DQN is neither double nor dueling.

    Raises:
        ValueError: a setting SB3's DQN cannot mirror (the message names it).
    """
    model, data = resolve(config["model"]), data_settings(config)
    network, env = resolve(model["network"]), resolve(data["env"])
    decays = [c for c in config.get("trainer", {}).get("callbacks") or []
              if isinstance(c, dict) and c.get("class_path", "").endswith("EpsilonDecay")]
    problems = []
    if not config["model"]["class_path"].endswith("DQNModule"):
        problems.append(f"model {config['model']['class_path']} (needs modules.dqn.DQNModule)")
    if not model["network"]["class_path"].endswith(".QNetwork") or network.get("dueling"):
        problems.append("network must be a QNetwork without dueling head")
    if model["double_dqn"]:
        problems.append("model.double_dqn=true (SB3's DQN has no double-DQN target)")
    if model["target_update"] != "hard":
        problems.append("model.target_update must be hard (SB3 updates the target during collection only)")
    if model["loss_function"] != "smooth_l1":
        problems.append(f"model.loss_function={model['loss_function']} (SB3's DQN uses Huber = smooth_l1)")
    if model["action_mask_key"] is not None:
        problems.append("model.action_mask_key (SB3's DQN has no action masks)")
    if not data["env"]["class_path"].endswith("GymConfig"):
        problems.append(f"env {data['env']['class_path']} (needs envs.gym.GymConfig: a gymnasium id)")
    if len(decays) != 1 or resolve(decays[0])["schedule"] != "linear":
        problems.append("exactly one callbacks.EpsilonDecay with schedule linear is needed")
    if problems:
        raise ValueError("the config has settings SB3's DQN cannot mirror: " + "; ".join(problems))
    eps = resolve(decays[0])
    num_envs, frames, utd = data["num_envs"], data["frames_per_batch"], data["utd_ratio"]
    k = model["target_update_interval"]
    hp = {
        "algorithm": "DQN", "env_id": env["env_id"], "n_envs": num_envs, "total_timesteps": total_frames, "seed": seed,
        "learning_rate": model["lr"], "buffer_size": data["buffer_size"], "learning_starts": data["init_random_frames"],
        "batch_size": data["batch_size"], "tau": 1.0, "gamma": model["gamma"], "train_freq": frames // num_envs,
        "gradient_steps": utd, "n_steps": model["n_steps"], "target_update_interval": max(1, round(k * frames / utd)),
        "exploration_fraction": eps["annealing_frames"] / total_frames, "exploration_initial_eps": eps["eps_init"],
        "exploration_final_eps": eps["eps_end"], "max_grad_norm": model["max_grad_norm"],
        "policy_kwargs": {"net_arch": list(network["hidden_dims"])},
    }
    random_frames = -(-data["init_random_frames"] // frames) * frames
    caveats = [
        f"ours acts randomly for whole collected batches: {random_frames} frames "
        f"vs SB3's {data['init_random_frames']}; "
        "both first train once more than init_random_frames frames are collected",
        f"ours sets epsilon once per collected batch ({frames} frames), SB3 after every env step",
        "both evaluate the final policy (the config's PolicyEvaluation / best.ckpt is left out)",
    ]
    if k % utd or (k // utd > 1 and (data["init_random_frames"] // frames) % (k // utd)):
        caveats.append(f"target copy every {k} updates with {utd} per batch is not phase-aligned with SB3's "
                       f"copy every {hp['target_update_interval']} env frames")
    return hp, caveats


def ppo_hyperparameters(config: dict, total_frames: int, seed: int) -> tuple[dict, list[str]]:
    """SB3 ``PPO`` keyword arguments for a PPO config of this framework, and the known differences.

    Mapping (ours -> SB3): ``num_envs`` -> ``n_envs``, ``frames_per_batch / num_envs`` -> ``n_steps``,
    ``mini_batch_size`` -> ``batch_size``, ``ppo_epochs`` -> ``n_epochs``, ``gamma``, ``gae_lambda``,
    ``clip_epsilon`` (``clip_schedule: linear`` -> ``lin_<clip>``) -> ``clip_range``, ``lr`` (``lr_schedule:
    linear`` -> ``lin_<lr>``) -> ``learning_rate``, ``entropy_coeff`` -> ``ent_coef``, ``critic_coeff`` ->
    ``vf_coef``, ``max_grad_norm``, ``normalize_advantage``; ``MLPActorCritic``'s ``hidden_dims``,
    ``activation`` and ``orthogonal_init`` -> ``policy_kwargs`` (``net_arch`` pi / vf, ``activation_fn``,
    ``ortho_init``). Both schedules decay with the frames collected so far, read once per collected batch. On
    continuous actions: ``log_std_init`` -> ``policy_kwargs.log_std_init`` (``squash: clip``, SB3's, without gSDE);
    ``normalize_observation`` / ``normalize_reward`` / ``normalize_clip`` -> ``normalize`` (SB3's ``VecNormalize``
    with ``norm_obs``, ``norm_reward``, ``clip_obs`` = ``clip_reward`` and the algorithm's gamma, RL Zoo's
    ``normalize: true``).

    Raises:
        ValueError: a setting SB3's PPO cannot mirror (the message names it).
    """
    model, data = resolve(config["model"]), data_settings(config)
    network, env = resolve(model["network"]), resolve(data["env"])
    problems = []
    recurrent = model["network"]["class_path"].endswith(".LSTMActorCritic")
    if not recurrent and not model["network"]["class_path"].endswith(".MLPActorCritic"):
        problems.append("network must be modules.actor_critic.MLPActorCritic (SB3's MlpPolicy) or "
                        "modules.recurrent.LSTMActorCritic (sb3-contrib's MlpLstmPolicy)")
    if model["action_mask_key"] is not None:
        problems.append("model.action_mask_key (SB3's PPO has no action masks)")
    if model["loss_critic_type"] != "l2" or model["reward_scale"] != 1.0:
        problems.append("model.loss_critic_type must be l2 and model.reward_scale 1 (SB3: MSE value loss, raw rewards)")
    if not data["env"]["class_path"].endswith("GymConfig"):
        problems.append(f"env {data['env']['class_path']} (needs envs.gym.GymConfig: a gymnasium id)")
    if model.get("squash", "clip") != "clip":
        problems.append("model.squash must be clip (SB3's PPO squashes only with gSDE)")
    if problems:
        raise ValueError("the config has settings SB3's PPO cannot mirror: " + "; ".join(problems))

    def schedule(value: float, kind: str) -> float | str:
        return f"lin_{value}" if kind == "linear" else value

    hp = {
        "algorithm": "PPO", "env_id": env["env_id"], "n_envs": data["num_envs"], "total_timesteps": total_frames,
        "seed": seed, "n_steps": data["frames_per_batch"] // data["num_envs"], "batch_size": data["mini_batch_size"],
        "n_epochs": data["ppo_epochs"], "gamma": model["gamma"], "gae_lambda": model["gae_lambda"],
        "clip_range": schedule(model["clip_epsilon"], model["clip_schedule"]),
        "learning_rate": schedule(model["lr"], model["lr_schedule"]), "ent_coef": model["entropy_coeff"],
        "vf_coef": model["critic_coeff"], "max_grad_norm": model["max_grad_norm"],
        "normalize_advantage": model["normalize_advantage"],
        "policy_kwargs": {"net_arch": {"pi": list(network["hidden_dims"]), "vf": list(network["hidden_dims"])},
                          "activation_fn": network["activation"], "log_std_init": model.get("log_std_init", 0.0),
                          "ortho_init": network.get("orthogonal_init", False)},
    }
    if recurrent:  # sb3-contrib's RecurrentPPO with an actor LSTM and a critic LSTM, as LSTMActorCritic
        hp["algorithm"] = "RecurrentPPO"
        hp["policy_kwargs"].update(lstm_hidden_size=network["lstm_hidden_size"], n_lstm_layers=1,
                                   enable_critic_lstm=True, shared_lstm=False)
    caveats = [
        "SB3's PPO builds Adam with eps 1e-5, ours with torch's default 1e-8",
        *(["sb3-contrib's RecurrentPPO splits a rollout into per-episode sequences padded within a minibatch, ours "
           "into whole env rows; its greedy returns come from SB3's evaluate_policy on episodes of SB3's seeding "
           "(its LSTM states), ours from pipelines.evaluate.play"] if recurrent else []),
        "both evaluate the final policy (the config's PolicyEvaluation / best.ckpt is left out)",
    ]
    if model.get("normalize_observation") or model.get("normalize_reward"):
        hp["normalize"] = {"norm_obs": bool(model.get("normalize_observation")),
                           "norm_reward": bool(model.get("normalize_reward")), "clip_obs": model["normalize_clip"],
                           "clip_reward": model["normalize_clip"], "gamma": model["gamma"]}
        caveats.append("ours merges a collected batch into the normalisation's statistics after it (the batch "
                       "played with the statistics of the batches before), SB3's VecNormalize at every step")
    return hp, caveats


def training_seed(config: dict, seed: int | None = None) -> int:
    """The seed both trainers get: ``seed`` when given, else the config's data seed, else its ``seed_everything``,
    else 0 (SB3 given None would train unseeded while ours takes ``seed_everything``)."""
    if seed is not None:
        return seed
    data_seed = resolve(config["data"]).get("seed")
    if data_seed is not None:
        return data_seed
    return config.get("seed_everything") or 0


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (``ru_maxrss``, KiB on Linux), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def summarise(returns: torch.Tensor) -> dict[str, float]:
    return {"eval_mean_return": returns.mean().item(),
            "eval_return_se": (returns.std() / math.sqrt(returns.numel())).item() if returns.numel() > 1 else 0.0}


def train_ours(config: dict, total_frames: int, seed: int, episodes: int, eval_seed: int, device: str = "cpu",
               compile_mode: str | None = None, async_worker: bool = False) -> dict:
    """Fit the config (in this process) and play the greedy policy; runs in its own process. ``device`` ``cuda``
    trains with ``--trainer.accelerator=gpu``; ``compile_mode`` sets ``model.compile`` with that mode (``default``,
    ``reduce-overhead``, ...); ``async_worker`` collects in one rollout worker while the learner trains
    (``data.collector.workers: 1``, ``data.collector.mode: async``; a second process, with one torch thread too)."""
    torch.set_num_threads(1)
    from pipelines.evaluate import play  # in the trainer's process only (see the module note)
    from pipelines.fit import main

    config = json.loads(json.dumps(config))  # a copy
    trainer = config.setdefault("trainer", {})
    trainer["callbacks"] = [c for c in trainer.get("callbacks") or []
                            if isinstance(c, dict) and c.get("class_path", "").endswith("EpsilonDecay")]
    trainer.update(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer["accelerator"] = "gpu" if device == "cuda" else "cpu"
    if compile_mode is not None:
        config["model"].setdefault("init_args", {}).update(compile=True, compile_mode=compile_mode)
    config["num_threads"] = 1
    config["seed_everything"] = seed
    config["data"].setdefault("init_args", {}).update(total_frames=total_frames, seed=seed)
    if async_worker:
        config["data"]["init_args"].setdefault("collector", {}).update(workers=1, mode="async")
    with tempfile.TemporaryDirectory(prefix="peer_sb3_") as tmp:
        trainer["default_root_dir"] = tmp  # the resolved config (SaveConfigCallback) lands here, not in the repo
        path = os.path.join(tmp, "peer_config.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        sys.argv = sys.argv[:1]  # LightningCLI warns when it gets args and a command line
        start = time.perf_counter()
        cli = main(["--config", path])
        wall = time.perf_counter() - start
    peak = peak_rss_mb()
    model, data = cli.model, cli.datamodule
    model.eval()
    start = time.perf_counter()
    returns = play(data.env_config, lambda env: model.collector_policy, episodes, min(episodes, 32),
                   eval_seed)["episode_return"]
    frames = model.collected_frames
    return {"frames": frames, "updates": cli.trainer.global_step, "wall_s": wall, "steps_per_s": frames / wall,
            "peak_rss_mb": peak, **summarise(returns), "eval_episodes": returns.numel(),
            "eval_s": time.perf_counter() - start,
            **({"final_epsilon": model.epsilon()} if hasattr(model, "epsilon") else {})}


class SB3Policy:
    """An SB3 model as a TensorDict policy for ``pipelines.evaluate.play``: greedy ``action`` from ``observation``
    (int64 ``[B]`` for a discrete action space, float32 ``[B, A]`` for a box)."""

    def __init__(self, model, normalize=None) -> None:
        self.model, self.normalize = model, normalize

    def __call__(self, td):
        observation = td["observation"].cpu().numpy()
        if self.normalize is not None:  # VecNormalize's observation statistics, frozen
            observation = self.normalize.normalize_obs(observation)
        action, _ = self.model.predict(observation, deterministic=True)
        action = torch.as_tensor(action)
        action = action.long() if not action.is_floating_point() else action.float()
        td["action"] = action.reshape(*td.batch_size, *action.shape[1:])
        return td


def td3_hyperparameters(config: dict, total_frames: int, seed: int) -> tuple[dict, list[str]]:
    """SB3 ``TD3`` keyword arguments for a TD3 config of this framework, and the known differences.

    Mapping (ours -> SB3; B, F, U as :func:`sac_hyperparameters`): F / B -> ``train_freq``, U -> ``gradient_steps``;
    ``init_random_frames`` -> ``learning_starts``; ``actor_lr`` = ``critic_lr`` -> ``learning_rate``;
    ``exploration_noise`` -> ``action_noise`` (``NormalActionNoise`` of that sigma, added in SB3's [-1, 1] action
    space as ours is in units of the half range); ``policy_delay``, ``policy_noise`` -> ``target_policy_noise``,
    ``noise_clip`` -> ``target_noise_clip``; ``tau``, ``gamma``, ``batch_size``, ``buffer_size``, ``num_qvalue_nets``
    -> ``n_critics``, the hidden widths -> ``policy_kwargs.net_arch``, seed.

    Raises:
        ValueError: a setting SB3's TD3 cannot mirror (the message names it).
    """

    def problems(model: dict) -> list[str]:
        found = ["model.actor_lr and critic_lr must be equal (SB3's TD3 has one learning_rate)"] \
            if model["actor_lr"] != model["critic_lr"] else []
        if model.get("loss_function", "l2") != "l2" or model.get("max_grad_norm") is not None:
            found.append("model.loss_function must be l2 and max_grad_norm null (SB3's TD3: squared error, no clip)")
        return found

    hp, model, _ = actor_critic_hyperparameters(config, "TD3", total_frames, seed, problems)
    hp.update({"action_noise": f"normal_{model['exploration_noise']}", "policy_delay": model["policy_delay"],
               "target_policy_noise": model["policy_noise"], "target_noise_clip": model["noise_clip"]})
    caveats = [
        "ours takes one Adam step on the summed critic and (every policy_delay-th update) actor losses, the actor "
        "on the critics before that step (as TorchRL's TD3 script); SB3 steps the critic first",
        "both evaluate the final policy (the config's PolicyEvaluation / best.ckpt is left out)",
    ]
    return hp, caveats


def train_sb3(hp: dict, env_spec: dict, episodes: int, eval_seed: int, device: str = "cpu",
              flush_denormal: bool = False, threads: int = 1) -> dict:
    """Train SB3's DQN, SAC, TD3 or PPO (``hp["algorithm"]``) with ``hp`` and play its greedy policy on
    ``env_spec``; runs in its own process. ``flush_denormal``: with ``torch.set_flush_denormal(True)``, as this
    framework's fits run (SB3 does not set it). ``threads``: SB3's torch threads."""
    torch.set_num_threads(threads)
    torch.set_flush_denormal(flush_denormal)
    import stable_baselines3  # optional dependency (the bench extra)
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    hp = dict(hp)
    for key in ("learning_rate", "clip_range"):  # "lin_<x>": RL Zoo's linear decay to 0 (SB3 passes 1 -> 0)
        if isinstance(hp.get(key), str) and hp[key].startswith("lin_"):
            start_value = float(hp[key][4:])
            hp[key] = lambda progress_remaining, v=start_value: progress_remaining * v
    if isinstance(hp.get("action_noise"), str):  # "normal_<sigma>": SB3's NormalActionNoise on every action dim
        import gymnasium as gym
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        sigma, dims = float(hp["action_noise"][7:]), gym.spec(hp["env_id"]).make().action_space.shape
        hp["action_noise"] = NormalActionNoise(np.zeros(dims), sigma * np.ones(dims))
    kwargs = hp.get("policy_kwargs") or {}
    if isinstance(kwargs.get("activation_fn"), str):
        activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[kwargs["activation_fn"]]
        hp["policy_kwargs"] = {**kwargs, "activation_fn": activation}
    name = hp.pop("algorithm")
    recurrent = name == "RecurrentPPO"
    if recurrent:
        import sb3_contrib
    algorithm = getattr(sb3_contrib if recurrent else stable_baselines3, name)
    env_id, n_envs, total, seed = hp.pop("env_id"), hp.pop("n_envs"), hp.pop("total_timesteps"), hp.pop("seed")
    importlib.import_module("envs.partially_observed").register()  # (CartPoleNoVel-v1, for gymnasium.make)
    start = time.perf_counter()
    normalize = hp.pop("normalize", None)
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize is not None:
        from stable_baselines3.common.vec_env import VecNormalize

        env = VecNormalize(env, **normalize)
    model = algorithm("MlpLstmPolicy" if recurrent else "MlpPolicy", env, seed=seed, device=device, verbose=0, **hp)
    model.set_logger(Logger(folder=None, output_formats=[]))  # (SB3's default makes an empty folder in /tmp per run)
    model.learn(total_timesteps=total)
    wall = time.perf_counter() - start
    peak = peak_rss_mb()  # before the evaluation imports this framework's stack

    from pipelines.evaluate import play  # the shared evaluation, after the peak was read

    module, name = env_spec["class_path"].rsplit(".", 1)
    env_config = getattr(importlib.import_module(module), name)(**(env_spec.get("init_args") or {}))
    start = time.perf_counter()
    if normalize is not None:
        env.training = False
    if recurrent:  # its LSTM states and episode starts: SB3's own evaluation loop, on episodes of its own seeding
        returns = _sb3_episodes(model, env_id, env if normalize is not None else None, episodes, eval_seed)
    else:
        policy = SB3Policy(model, env if normalize is not None else None)
        returns = play(env_config, lambda _: policy, episodes, min(episodes, 32), eval_seed)["episode_return"]
    frames = model.num_timesteps
    return {"frames": frames, "updates": model._n_updates, "wall_s": wall, "steps_per_s": frames / wall,
            "peak_rss_mb": peak, **summarise(returns), "eval_episodes": returns.numel(),
            "eval_s": time.perf_counter() - start, "version": stable_baselines3.__version__,
            **({"final_epsilon": model.exploration_rate} if hasattr(model, "exploration_rate") else {})}


def _sb3_episodes(model, env_id: str, normalize, episodes: int, seed: int) -> torch.Tensor:
    """The greedy returns of ``episodes`` episodes of a recurrent SB3 model by SB3's ``evaluate_policy`` (which
    carries the LSTM states and resets them at episode starts) on one env seeded ``seed``, observations normalised
    with ``normalize``'s frozen statistics where given."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    if normalize is not None:
        env = VecNormalize(env, training=False, norm_reward=False)
        env.obs_rms = normalize.obs_rms
    returns, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True)
    return torch.tensor(returns, dtype=torch.float64)


def summarise_rounds(runs: dict[str, list[dict]]) -> dict:
    """Each side's median run by ``steps_per_s`` (the lower middle one for an even count) with every run's
    ``rounds_steps_per_s``, and, with both sides, ``ratio`` (ours / SB3 of the medians) and ``round_ratios``."""
    result: dict = {}
    for side, done in runs.items():
        if done:
            median = sorted(done, key=lambda run: run["steps_per_s"])[(len(done) - 1) // 2]
            result[side] = {**median, "rounds_steps_per_s": [run["steps_per_s"] for run in done]}
    if runs.get("ours") and runs.get("sb3"):
        result["ratio"] = result["ours"]["steps_per_s"] / result["sb3"]["steps_per_s"]
        result["round_ratios"] = [o["steps_per_s"] / b["steps_per_s"]
                                  for o, b in zip(runs["ours"], runs["sb3"], strict=True)]
    return result


def isolated(fn, *args):
    """``fn(*args)`` in a fresh spawned process (its own memory peak and thread settings)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=CONFIG, help="a DQN, SAC, TD3 or PPO fit config on a gymnasium env")
    parser.add_argument("--total_frames", type=int, default=None, help="budget in env frames (default: the config's)")
    parser.add_argument("--episodes", type=int, default=None, help="greedy evaluation episodes (default 32, quick 8)")
    parser.add_argument("--seed", type=int, default=None,
                        help="training seed of both "
                             "(default: the config's data seed, else its seed_everything, else 0)")
    parser.add_argument("--eval_seed", type=int, default=10_000_000, help="seed of the evaluation episodes")
    parser.add_argument("--quick", action="store_true", help="smoke run: the warm-up plus 4 training phases")
    parser.add_argument("--only", choices=["ours", "sb3"], default=None, help="run one trainer only")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where both learners train (ours: --trainer.accelerator=gpu; SB3: device=cuda)")
    parser.add_argument("--compile_mode", default=None,
                        help="ours with model.compile=true and this torch.compile mode (default, reduce-overhead, ...)")
    parser.add_argument("--sb3_flush_denormal", action="store_true",
                        help="SB3 with torch.set_flush_denormal(True), as this framework's fits run (default: as SB3 "
                             "runs, denormal floats computed)")
    parser.add_argument("--ours_async_worker", action="store_true",
                        help="ours with data.collector.workers=1 and data.collector.mode=async: one rollout worker "
                             "process collects the next batch while the learner trains (off-policy configs; two "
                             "processes of one torch thread each; SB3 takes --sb3_threads)")
    parser.add_argument("--sb3_threads", type=int, default=1,
                        help="SB3's torch threads (default 1; 2 lets it use a second core as --ours_async_worker does)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of both trainers in turn; the median run of each side is reported (default 1)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.sb3_threads < 1:
        parser.error(f"--sb3_threads must be >= 1, got {args.sb3_threads}")
    if args.only != "ours" and importlib.util.find_spec("stable_baselines3") is None:
        sys.exit(MISSING_SB3)
    from pipelines.search_space import merged_config

    config = merged_config([args.config], [], {})  # (with configs/defaults.yaml and callbacks+ appended)
    data = data_settings(config)
    total = args.total_frames or data["total_frames"]
    if args.quick and args.total_frames is None:
        total = (-(-data.get("init_random_frames", 0) // data["frames_per_batch"]) + 4) * data["frames_per_batch"]
    episodes = args.episodes or (8 if args.quick else 32)
    seed = training_seed(config, args.seed)
    hp, caveats = sb3_hyperparameters(config, total, seed)
    result: dict = {"config": os.path.relpath(os.path.abspath(args.config), ROOT), "env": hp["env_id"],
                    "total_frames": total, "seed": seed, "eval_seed": args.eval_seed, "episodes": episodes,
                    "threads": 1, "device": args.device, "compile_mode": args.compile_mode,
                    "ours_async_worker": args.ours_async_worker,
                    "sb3_threads": args.sb3_threads, "machine": {"cpu": platform.processor() or platform.machine(),
                                              "cores": os.cpu_count(), "torch": torch.__version__,
                                              "gpu": torch.cuda.get_device_name() if args.device == "cuda"
                                              else None}}
    runs: dict[str, list[dict]] = {"ours": [], "sb3": []}
    for round_ in range(args.repeats):
        if args.only != "sb3":
            print(f"ours (round {round_ + 1}): fitting {args.config} for {total} frames ...", file=sys.stderr,
                  flush=True)
            runs["ours"].append(isolated(train_ours, config, total, seed, episodes, args.eval_seed, args.device,
                                         args.compile_mode, args.ours_async_worker))
            print(f"ours: {runs['ours'][-1]}", file=sys.stderr, flush=True)
        if args.only != "ours":
            print(f"sb3 (round {round_ + 1}): {hp['algorithm']} {hp} ...", file=sys.stderr, flush=True)
            runs["sb3"].append(isolated(train_sb3, hp, config["data"]["init_args"]["env"], episodes, args.eval_seed,
                                        args.device, args.sb3_flush_denormal, args.sb3_threads))
            runs["sb3"][-1].update(flush_denormal=args.sb3_flush_denormal, threads=args.sb3_threads)
            print(f"sb3: {runs['sb3'][-1]}", file=sys.stderr, flush=True)
    result.update(summarise_rounds(runs), repeats=args.repeats)
    result["hyperparameters"] = hp
    result["caveats"] = caveats
    result["load_average_1min"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
