"""Gymnasium envs through TorchRL: each backend gives a [num_envs] batch that resets finished rows, seeded
reproducibly, rows different from each other."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.envs import EnvBase, GymWrapper, RewardSum, TransformedEnv, check_env_specs

from envs import has, make_env, unwrap
from envs.gym import GymConfig


def rollout(backend: str, seed: int, steps: int = 300, num_envs: int = 4) -> torch.Tensor:
    env = make_env(GymConfig("CartPole-v1", backend=backend), num_envs, seed)
    td = env.reset()
    generator = torch.Generator().manual_seed(0)
    seen, dones = [], 0
    for _ in range(steps):
        td["action"] = torch.randint(0, 2, (num_envs,), generator=generator)
        out, td = env.step_and_maybe_reset(td)
        seen.append(out["next", "observation"].clone())
        dones += int(out["next", "done"].sum())
    env.close()
    assert dones > num_envs  # random play ends CartPole episodes often: rows were reset
    return torch.stack(seen, 1)  # [num_envs, steps, 4]


@pytest.mark.parametrize("backend", ["vector", "serial"])
def test_backend_is_reproducible_and_rows_differ(backend):
    first, again, other = rollout(backend, 0), rollout(backend, 0), rollout(backend, 1)
    assert first.shape == (4, 300, 4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])  # each row its own seed
    assert (first[..., 0].abs() <= 2.4 + 0.2).all()  # a reset row starts again near the centre


CUSTOM_ENV = """
import gymnasium as gym
import numpy as np


class NoArguments(gym.Env):  # a constructor that takes no arguments at all
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(3, 0.1, np.float32), float(action), self.t >= 5, False, {}


gym.register("NoArguments-v0", entry_point=NoArguments)
"""


def test_a_users_module_env_id_is_imported_as_gym_make_does(tmp_path, monkeypatch):
    """``my_envs:NoArguments-v0``: the module is imported (it registers the id), as ``gym.make`` does; the registry
    check refused it before (``gym.spec`` does not import). A module that is not there is one error naming it."""
    (tmp_path / "my_envs_for_test.py").write_text(CUSTOM_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = make_env(GymConfig("my_envs_for_test:NoArguments-v0"), 2, 0)
    assert env.reset()["observation"].shape == (2, 3)
    env.close()
    with pytest.raises(ValueError, match=r"env\.env_id='no_such_module:X-v0': cannot import 'no_such_module'"):
        GymConfig("no_such_module:X-v0")


def test_parallel_backend_answers_attribute_queries_in_this_process():
    """TorchRL's ``ParallelEnv`` forwards an attribute it lacks to its workers, whose envs raise and end: asking
    whether it has one (``envs.has``) stays in this process, and the workers go on stepping."""
    env = make_env(GymConfig("CartPole-v1", backend="parallel"), 2, 0)
    try:
        base = unwrap(env)
        assert not has(base, "resume_state") and not has(base, "render_routes") and has(base, "rollout")
        td = env.reset()
        td["action"] = torch.zeros(2, dtype=torch.int64)
        assert env.step(td)["next", "observation"].shape == (2, 4)
    finally:
        env.close()


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match=r"env\.backend='threads'.*vector, serial, parallel"):
        GymConfig("CartPole-v1", backend="threads")


def test_vector_backend_truncates_continuous_control_episodes():
    env = make_env(GymConfig("Pendulum-v1"), 4, 0)  # the default backend: vector
    assert env.batch_size == (4,) and env.action_spec.shape == (4, 1)
    td, ended = env.reset(), []
    for step in range(450):
        td["action"] = env.action_spec.rand()
        out, td = env.step_and_maybe_reset(td)
        ended += [step + 1] * int(out["next", "truncated"].sum())
    assert ended == [200] * 4 + [400] * 4  # Pendulum's 200-step limit, every row, then again after the reset


def wrapper_reference(env_id: str, num_envs: int, seed: int) -> EnvBase:
    """TorchRL's own wrapping of the same vector env: ``GymWrapper`` + ``RewardSum``."""
    vector = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                          vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    env = TransformedEnv(GymWrapper(vector, categorical_action_encoding=True), RewardSum())
    env.set_seed(seed)
    return env


class DictCartPole(gym.ObservationWrapper):
    """CartPole with a ``Dict`` observation (position and velocity entries), for the vector env's dict path."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(position=box, velocity=box)

    def observation(self, observation):
        return {"position": observation[[0, 2]], "velocity": observation[[1, 3]]}


gym.register("DictCartPole-v0", entry_point=DictCartPole, max_episode_steps=500)


def lockstep(env: EnvBase, td, other: EnvBase, other_td, steps: int = 300):
    """Step two envs from their given starts with the same random actions (of ``env``'s spec, torch seed 0)
    through ``step_and_maybe_reset``; yields ``(step, next start)`` of each after every step."""
    torch.manual_seed(0)
    for _ in range(steps):
        td["action"] = other_td["action"] = env.action_spec.rand()
        out, td = env.step_and_maybe_reset(td)
        other_out, other_td = other.step_and_maybe_reset(other_td)
        yield out, td, other_out, other_td


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_vector_env_gives_torchrl_wrappers_data(env_id):
    """Step for step, the same entries and values as TorchRL's GymWrapper + RewardSum over the same vector env,
    through episode ends (CartPole: random play ends rows' episodes at different steps; Pendulum: every row's
    200-step truncation). Compared up to the first step that ends every row at once: there TorchRL asks for a
    reset without ``_reset`` and its wrapper resets the vector env again, while ours starts the episodes the
    vector env began in that step (both fresh episodes; from there the RNG streams part)."""
    check_env_specs(make_env(GymConfig(env_id), 4, 7))
    checked = make_env(GymConfig(env_id), 4, 7)
    checked.run_type_checks = True  # TorchRL's pass over each step's output, with its type checks (skipped otherwise)
    assert checked.rollout(250, break_when_any_done=False)["next", "done"].any()
    ours, reference = make_env(GymConfig(env_id), 4, 7), wrapper_reference(env_id, 4, 7)
    assert set(ours.observation_spec.keys()) == set(reference.observation_spec.keys())
    assert ours.full_done_spec == reference.full_done_spec and ours.action_spec == reference.action_spec
    ours.reset()  # GymWrapper.set_seed resets its vector env with the seed: its next reset is the second one
    start, reference_start = ours.reset(), reference.reset()
    ends = 0
    for out, td, ref, expected in lockstep(ours, start, reference, reference_start):
        for key in ref.keys(True, True):
            assert torch.equal(out[key], ref[key]), key
        if out["next", "done"].all():
            break
        ends += int(out["next", "done"].sum())  # rows reset while others play on
        for key in ours.observation_spec.keys():
            assert torch.equal(td[key], expected[key]), key
    assert ends >= (4 if env_id == "CartPole-v1" else 0)


def test_vector_env_reads_dict_observations():
    """A Dict observation space gives one entry per key, final observations included (TorchRL's GymWrapper
    writes zeros there for a Dict space): the same values as the array env it is built from."""
    flat, nested = make_env(GymConfig("CartPole-v1"), 4, 3), make_env(GymConfig("DictCartPole-v0"), 4, 3)
    assert set(nested.observation_spec.keys()) == {"position", "velocity", "episode_reward"}
    start, nested_start = flat.reset(), nested.reset()
    ends = 0
    for out, td, got, other in lockstep(flat, start, nested, nested_start):
        for root, mine in ((out["next"], got["next"]), (td, other)):
            assert torch.equal(mine["position"], root["observation"][:, [0, 2]])
            assert torch.equal(mine["velocity"], root["observation"][:, [1, 3]])
            assert torch.equal(mine["episode_reward"], root["episode_reward"])
        ends += int(out["next", "done"].sum())
    assert ends >= 8


def test_vector_env_resets_rows_on_request():
    """A partial reset of rows that have not finished restarts them (gymnasium's reset_mask); the others play on."""
    env = make_env(GymConfig("CartPole-v1"), 3, 0)
    td = env.reset()
    td["action"] = torch.zeros(3, dtype=torch.long)
    _, td = env.step_and_maybe_reset(td)
    before = td["observation"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    after = env.reset(td)
    assert torch.equal(after["observation"][[0, 2]], before[[0, 2]])
    assert not torch.equal(after["observation"][1], before[1]) and after["episode_reward"][1] == 0
    assert after["episode_reward"][0] == 1.0  # the others keep their returns
