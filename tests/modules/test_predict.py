"""A checkpoint loaded in Python acts: ``RLModule.predict`` (numpy or torch, one observation or a batch, dict
observations), ``module(obs)``, and ``torchrl_policy`` in ``env.rollout``, on tiny trained runs of CartPole DQN,
Pendulum SAC and DVRP PPO (and an untrained multi-agent vacuum DQN for its per-robot entries)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from envs import EnvSpecs, make_env
from envs.episodes import play_episodes
from envs.gym import GymConfig
from modules.base import RLModule
from pipelines.fit import main as fit
from tests.pipelines.conftest import REPO

DVRP_KEYS = ["customers", "request", "vehicles", "depot", "offers", "action_mask"]


def _fit(tmp_path, config: str, *extra: str):
    """A tiny run of ``configs/<config>`` with only a checkpoint callback; returns the fitted CLI and the path of its
    ``last.ckpt``."""
    run = fit(["--config", str(REPO / "configs" / config), "--trainer.enable_progress_bar=false",
               "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.ModelCheckpoint",
               "--trainer.callbacks.save_last=true", f"--trainer.logger.init_args.save_dir={tmp_path}", *extra])
    name = config.removesuffix(".yaml")
    return run, str(tmp_path / name / "version_0" / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    run, ckpt = _fit(tmp_path_factory.mktemp("cartpole"), "cartpole_dqn.yaml", "--data.init_args.total_frames=128",
                     "--data.init_args.replay_buffer.init_random_frames=64",
                     "--data.init_args.collector.frames_per_batch=64",
                     "--data.init_args.replay_buffer.batch_size=32", "--data.init_args.replay_buffer.utd_ratio=1",
                     "--model.init_args.network.init_args.hidden_dims=[16]")
    return ckpt, run.datamodule


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    run, ckpt = _fit(tmp_path_factory.mktemp("pendulum"), "pendulum_sac.yaml", "--data.init_args.total_frames=112",
                     "--data.init_args.replay_buffer.init_random_frames=104",
                     "--model.init_args.network.init_args.actor_hidden_dims=[16]",
                     "--model.init_args.network.init_args.critic_hidden_dims=[16]")
    return ckpt, run.datamodule


@pytest.fixture(scope="module")
def dvrp(tmp_path_factory):
    run, ckpt = _fit(tmp_path_factory.mktemp("dvrp"), "dvrp_smoke.yaml", "--data.init_args.total_frames=480")
    return ckpt, run.datamodule


def _played(module: RLModule, env, max_steps: int, episodes_per_row: int = 1) -> list[tuple[TensorDict, torch.Tensor]]:
    """The observations ``[B]`` and actions of the module's deterministic evaluation policy (its collector policy
    under ``envs.episodes.play_episodes``, as ``callbacks.PolicyEvaluation`` and ``pipelines.evaluate`` play it)."""
    seen = []

    def policy(td):
        observation = td.clone()
        td = module.collector_policy(td)
        seen.append((observation, td["action"].clone()))
        return td

    play_episodes(env, policy, episodes_per_row, max_steps=max_steps)
    env.close()
    return seen


def _numpy(td: TensorDict, keys: list[str], row: int | None = None) -> dict[str, np.ndarray]:
    return {k: (td[k] if row is None else td[k][row]).numpy() for k in keys}


def _both_episodes(ckpt, env_id: str, seed: int) -> tuple[tuple[int, float], tuple[int, float]]:
    """One episode of gymnasium's own ``env_id`` (reset with ``seed``) played with ``predict``, and the same episode
    (row 0 of a run's env seeded ``seed`` is gymnasium's env reset with that seed) played by ``env.rollout`` with
    ``torchrl_policy``: ``(steps, return)`` of each."""
    module = RLModule.load_from_checkpoint(ckpt)
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    total, done, steps = 0.0, False, 0
    while not done:
        obs, reward, terminated, truncated, _ = env.step(module.predict(obs))
        total, done, steps = total + reward, terminated or truncated, steps + 1
    env.close()
    torchrl_env = make_env(GymConfig(env_id), 1, seed=seed)
    with torch.no_grad():
        rollout = torchrl_env.rollout(1000, module.torchrl_policy())
    torchrl_env.close()
    return (steps, total), (rollout.shape[-1], rollout["next", "reward"].sum().item())


# ------------------------------------------------------------------ CartPole DQN
def test_cartpole_dqn_predict_shapes_and_types(cartpole):
    module = RLModule.load_from_checkpoint(cartpole[0])
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    action = module.predict(obs)
    assert isinstance(action, np.ndarray) and action.shape == () and action.dtype == np.int64
    assert int(action) in (0, 1)
    assert np.array_equal(module(obs), action)  # forward is predict
    batch = np.stack([obs, -obs, 2 * obs])
    actions = module.predict(batch)
    assert isinstance(actions, np.ndarray) and actions.shape == (3,) and actions.dtype == np.int64
    assert actions[0] == action
    tensor = module.predict(torch.as_tensor(batch))
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3,) and torch.equal(tensor, torch.as_tensor(actions))
    one = module.predict(torch.as_tensor(obs))
    assert isinstance(one, torch.Tensor) and one.shape == () and int(one) == int(action)
    # an integer or float64 array is cast to the recorded float32; a dict / TensorDict holding the entry works too
    assert module.predict(obs.astype(np.float64)) == action
    assert module.predict({"observation": obs}) == action
    assert module.predict(TensorDict({"observation": torch.as_tensor(batch)}, [3]))[0] == action


def test_cartpole_dqn_deterministic_predict_is_the_evaluation_policy(cartpole):
    ckpt, data = cartpole
    module = RLModule.load_from_checkpoint(ckpt)
    # after one update the greedy action is the same everywhere; weights drawn with a fixed seed make it depend on
    # the observation, so that a predict that ignored it would fail here
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.network.parameters():
            p.normal_()
    seen = _played(module, data.make_eval_env(4, seed=3), max_steps=40, episodes_per_row=10)
    assert len(seen) == 40 and set(torch.cat([a for _, a in seen]).tolist()) == {0, 1}
    for td, action in seen:
        assert np.array_equal(module.predict(td["observation"].numpy()), action.numpy())
        rows = [module.predict(td["observation"][b].numpy()) for b in range(4)]
        assert np.array_equal(np.stack(rows), action.numpy())
        assert torch.equal(module.predict(td), action)  # the env's TensorDict as it is (episode_reward, done ignored)


def test_cartpole_dqn_exploration(cartpole):
    module = RLModule.load_from_checkpoint(cartpole[0])
    assert module.epsilon() == 1.0  # the checkpoint's (no EpsilonDecay in this run)
    batch = np.zeros((200, 4), np.float32)
    greedy = module.predict(batch)
    assert len(set(greedy.tolist())) == 1
    torch.manual_seed(0)
    sampled = module.predict(batch, deterministic=False)
    assert set(sampled.tolist()) == {0, 1}  # epsilon 1: uniform
    torch.manual_seed(0)
    assert np.array_equal(module.predict(batch, deterministic=False), sampled)  # the global torch RNG
    module.set_epsilon(0.0)
    assert np.array_equal(module.predict(batch, deterministic=False), greedy)


def test_cartpole_dqn_plays_gymnasium_as_the_torchrl_env(cartpole):
    """An episode of gymnasium's own CartPole with predict gets the return of the same episode (row 0 of a run's
    env seeded 7 is gymnasium's env reset with seed 7) played by ``env.rollout`` with ``torchrl_policy``."""
    (steps, total), (torchrl_steps, torchrl_total) = _both_episodes(cartpole[0], "CartPole-v1", seed=7)
    assert (torchrl_steps, torchrl_total) == (steps, total)


def test_cartpole_dqn_bad_input_names_the_entry(cartpole):
    module = RLModule.load_from_checkpoint(cartpole[0])
    for bad in (np.zeros(5, np.float32), np.zeros((2, 3, 4), np.float32), np.zeros(()), {"obs": np.zeros(4)},
                np.array(["a", "b", "c", "d"], dtype=object)):
        with pytest.raises(ValueError, match=r"expected observation \[4\] float32") as err:
            module.predict(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="this policy carries no state"):  # (sb3-contrib's arguments, a recurrent's)
        module.predict(np.zeros(4, np.float32), episode_start=True)


# ------------------------------------------------------------------ Pendulum SAC
def test_pendulum_sac_predict(pendulum):
    ckpt, data = pendulum
    module = RLModule.load_from_checkpoint(ckpt)
    obs, _ = gym.make("Pendulum-v1").reset(seed=0)
    action = module.predict(obs)
    assert isinstance(action, np.ndarray) and action.shape == (1,) and action.dtype == np.float32
    assert -2.0 <= action[0] <= 2.0
    batch = np.stack([obs] * 64)
    assert module.predict(batch).shape == (64, 1)
    assert np.allclose(module.predict(batch), action)
    torch.manual_seed(0)
    sampled = module.predict(batch, deterministic=False)
    assert sampled.shape == (64, 1) and sampled.dtype == np.float32
    assert (np.abs(sampled) <= 2.0).all() and sampled.std() > 1e-3  # draws of the tanh-normal, within the bounds
    seen = _played(module, data.make_eval_env(3, seed=3), max_steps=20)
    for td, expected in seen:
        assert np.array_equal(module.predict(td["observation"].numpy()), expected.numpy())
        for b in range(3):
            assert np.allclose(module.predict(td["observation"][b].numpy()), expected[b].numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=r"expected observation \[3\] float32"):
        module.predict(np.zeros((3, 4), np.float32))


def test_pendulum_sac_plays_gymnasium_as_the_torchrl_env(pendulum):
    (steps, total), (torchrl_steps, torchrl_total) = _both_episodes(pendulum[0], "Pendulum-v1", seed=5)
    assert steps == torchrl_steps == 200 and torchrl_total == pytest.approx(total, rel=1e-5)


# ------------------------------------------------------------------ DVRP PPO
def test_dvrp_ppo_predict(dvrp):
    ckpt, data = dvrp
    module = RLModule.load_from_checkpoint(ckpt)
    assert module.torchrl_policy().in_keys == DVRP_KEYS
    seen = _played(module, data.make_eval_env(4, seed=11), max_steps=12)
    torch.manual_seed(0)
    for td, expected in seen:
        mask = td["action_mask"]
        batch = module.predict(_numpy(td, DVRP_KEYS))
        assert batch.shape == (4,) and batch.dtype == np.int64 and np.array_equal(batch, expected.numpy())
        for b in range(4):
            one = module.predict(_numpy(td, DVRP_KEYS, b))
            assert one.shape == () and one == expected[b].item() and mask[b, int(one)]
            sampled = module.predict(_numpy(td, DVRP_KEYS, b), deterministic=False)
            assert mask[b, int(sampled)]
        assert torch.equal(module.predict(td), expected)  # the env's TensorDict, with its other entries
        assert torch.equal(module(td[:2]), expected[:2])
    # sampling differs from the mode somewhere on a state with several allowed offers
    td = next(td for td, _ in seen if int(td["action_mask"][0].sum()) > 1)
    one = _numpy(td, DVRP_KEYS, 0)
    assert len({int(module.predict(one, deterministic=False)) for _ in range(60)}) > 1


def test_dvrp_ppo_bad_input_names_the_keys(dvrp):
    ckpt, data = dvrp
    module = RLModule.load_from_checkpoint(ckpt)
    env = data.make_eval_env(1, seed=0)
    td = env.reset()[0]
    env.close()
    good = _numpy(td, DVRP_KEYS)
    names = r"customers \[30, \d+\] float32, request \[\d+\] float32, .*action_mask \[\d+\] bool"
    cases = [{k: v for k, v in good.items() if k != "action_mask"},  # a missing entry
             {**good, "customers": good["customers"][:-1]},  # a wrong shape
             {**good, "depot": np.stack([good["depot"]] * 2)},  # batched beside unbatched entries
             {**good, "action_mask": good["action_mask"].astype(np.float32)},  # a float mask
             {**good, "action_mask": np.zeros_like(good["action_mask"])},  # no allowed action
             good["customers"]]  # one array for six entries
    messages = ["no entry 'action_mask'", "got customers", "disagree on the batch", "got action_mask",
                "allows no action", "reads 6 entries"]
    for bad, message in zip(cases, messages, strict=True):
        with pytest.raises(ValueError, match=names) as err:
            module.predict(bad)
        assert message in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ multi-agent, unshaped module
def test_multi_agent_vacuum_predicts_per_robot():
    """An untrained vacuum DQN (4 robots): one env's observation ``[R, F]`` with ``agent_id`` and the per-robot mask
    gives one allowed action per robot, ``[R]``; a batch of envs ``[N, R]``."""
    from envs.vacuum import VacuumConfig
    from modules.dqn import DQNModule
    from modules.q_networks import MultiAgentQNetwork

    config = VacuumConfig()
    env = make_env(config, 3, seed=0)
    module = DQNModule(MultiAgentQNetwork(config.num_agents, 5, hidden_dims=(16,)), in_keys=("observation", "agent_id"),
                       action_mask_key="action_mask")
    with pytest.raises(RuntimeError, match="records no env specs"):
        module.predict(np.zeros(1))
    module.build_on(EnvSpecs.of(env, config.num_agents))
    td = env.reset()
    env.close()
    keys = ["observation", "agent_id", "action_mask"]
    one = module.predict(_numpy(td, keys, 0))
    assert one.shape == (4,) and one.dtype == np.int64
    assert bool(td["action_mask"][0].gather(-1, torch.as_tensor(one)[:, None]).all())  # allowed for every robot
    with torch.no_grad():
        expected = module.torchrl_policy()(td.clone())["action"]
    assert np.array_equal(module.predict(_numpy(td, keys)), expected.numpy())
    with pytest.raises(ValueError, match=r"expected observation \[4, \d+\] float32, agent_id \[4, 4\] float32"):
        module.predict({k: v[0] for k, v in _numpy(td, keys).items() if k != "agent_id"} | {"agent_id": np.eye(3)})


def test_a_checkpoint_saved_before_a_rename_loads_with_its_value(cartpole, tmp_path):
    """A DQN checkpoint whose hyper-parameters still say ``n_step`` (saved before it was renamed ``n_steps``) loads
    with that value, not the default."""
    checkpoint = torch.load(cartpole[0], weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    hparams["n_step"] = 3
    del hparams["n_steps"]
    torch.save(checkpoint, tmp_path / "old.ckpt")
    module = RLModule.load_from_checkpoint(tmp_path / "old.ckpt")
    assert module.hparams.n_steps == 3 and "n_step" not in module.hparams
    assert module.replay_transform().n_steps == 3
