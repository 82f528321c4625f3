"""Gymnasium environments through TorchRL: one gymnasium vector env as a native batched env
(:class:`GymVectorEnv`), or single TorchRL ``GymEnv`` batched by ``SerialEnv`` / ``ParallelEnv``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import TensorSpec, Unbounded
from torchrl.data.utils import torch_to_numpy_dtype_dict
from torchrl.envs import EnvBase, GymEnv, ParallelEnv, SerialEnv

from envs.compat import new_tensordict, wrapped_gym_env
from envs.config import EnvConfig
from envs.gym_state import RESTORABLE_MODULES, restore, snapshot
from envs.partially_observed import register as register_partially_observed
from envs.restored import RestoredStateError, restored_mapping, restored_tensor

BACKENDS = ("vector", "serial", "parallel")


register_partially_observed()  # CartPoleNoVel-v1: gymnasium ids of this project, known wherever envs.gym is imported

@dataclass(eq=False)
class GymConfig(EnvConfig):
    """A gymnasium env id, vectorised ``num_envs`` times.

    Observations are the env's ``observation`` (one entry per key of a ``Dict`` observation space); discrete
    actions are int64 (``categorical_action_encoding``).

    Args:
        env_id: the gymnasium id, e.g. ``CartPole-v1``.
        backend: ``vector`` (:class:`GymVectorEnv`: gymnasium's ``SyncVectorEnv`` of ``num_envs`` envs,
            stepped in one call and reset in the same step when done; the fastest in one process), ``serial``
            (TorchRL's ``SerialEnv`` of single ``GymEnv``) or ``parallel`` (``ParallelEnv``, one worker process
            per env). Each backend seeds its rows its own way: a run is reproducible for a given backend, not
            across them.
        render_mode: ``rgb_array`` builds the vector backend's envs able to draw themselves (the env's
            ``render_frame``: ``pipelines.evaluate --video``, ``PolicyEvaluation(video_frames=...)``); null (the
            default) builds them without (nothing is drawn or imported for it; classic-control drawing needs
            pygame).

    Raises:
        ValueError: an unknown backend, or ``render_mode`` with another backend than ``vector``; an unknown
            ``env_id`` (gymnasium's message, from its registry; checked here, before any training).
    """

    env_id: str = "CartPole-v1"
    backend: Literal["vector", "serial", "parallel"] = "vector"
    render_mode: Literal["rgb_array"] | None = None

    def __post_init__(self) -> None:
        """Check the keys, and the id against gymnasium's registry (no env is built here)."""
        if self.backend not in BACKENDS:
            raise ValueError(f"env.backend={self.backend!r} is not allowed: one of {', '.join(BACKENDS)}")
        if self.render_mode not in (None, "rgb_array") or (self.render_mode is not None and self.backend != "vector"):
            raise ValueError(f"env.render_mode={self.render_mode!r} is not allowed: null, or rgb_array with backend: "
                             f"vector (got backend {self.backend!r})")
        module, _, name = self.env_id.rpartition(":")
        try:
            if module:  # ``my_envs:MyEnv-v0``: gym.make imports the module, whose import registers the id (a
                importlib.import_module(module)  # config's module is allowed by pipelines.fit's import policy first)
            gym.spec(name)  # the registry lookup gym.make does first: an unknown id fails here
        except ImportError as err:
            raise ValueError(f"env.env_id={self.env_id!r}: cannot import {module!r} ({err})") from None
        except gym.error.Error as err:  # NameNotFound, VersionNotFound, ... (with gymnasium's "did you mean")
            raise ValueError(f"env.env_id={self.env_id!r}: {err}") from None

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: dict | None = None) -> EnvBase:
        self.check_models(models)  # none
        if self.backend == "vector":
            env = GymVectorEnv(self.env_id, num_envs, device, self.render_mode)
        else:
            make_one = partial(one_gym_env, self.env_id, device)
            env = (SerialEnv if self.backend == "serial" else ParallelEnv)(num_envs, make_one)
        env.set_seed(seed)
        return env


def one_gym_env(env_id: str, device: torch.device | str) -> GymEnv:
    """TorchRL's ``GymEnv`` of one gymnasium env (int64 discrete actions): a worker of a ``ParallelEnv`` that unpickles
    this imports this module, so the ids it registers are known there too."""
    return GymEnv(env_id, categorical_action_encoding=True, device=device)


def one_env_specs(one: EnvBase, name: str) -> tuple[TensorSpec, TensorSpec, TensorSpec, TensorSpec]:
    """The observation, full action, full reward and full done specs of ``one``, TorchRL's wrapper of one gymnasium
    env (``GymEnv`` / ``GymWrapper``, ``categorical_action_encoding``), for :class:`GymVectorEnv`.

    Raises:
        ValueError: an action space other than ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box`` (the
            message names ``name``).
    """
    space = wrapped_gym_env(one).action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)):
        raise ValueError(f"env.env_id={name!r}: action space {space} is not supported by the vector "
                         f"backend (Discrete, MultiDiscrete, MultiBinary or Box); use backend: serial")
    return one.observation_spec.clone(), one.full_action_spec.clone(), one.full_reward_spec.clone(), \
        one.full_done_spec.clone()


class GymVectorEnv(EnvBase):
    """``num_envs`` copies of a gymnasium env stepped as one gymnasium ``SyncVectorEnv``, as a native batched
    TorchRL env (``batch_size=[num_envs]``) that keeps its rows' episode returns itself.

    The same data as TorchRL's ``GymWrapper`` over that vector env under ``RewardSum``, with the same specs
    (read off TorchRL's ``GymEnv`` of one env and expanded to the batch; ``tests/envs/test_gym.py`` compares
    the two step by step): the vector env resets a finished env within the step that ends it (gymnasium's
    same-step autoreset), the step returns the episode's final observation under ``("next", ...)``, and the
    new episode's first observation is handed out by the partial reset that TorchRL's
    ``step_and_maybe_reset`` makes next, without stepping the env again (for a ``Dict`` observation space the
    wrapper writes zeros as final observations; this env writes them as the vector env returns them; when
    every row finishes in one step the wrapper resets the vector env again, this env starts the episodes the
    vector env began). Built for speed (issue 13): no generic reading of infos and specs and no transform
    layer (``envs.make_env`` adds none, as the env writes ``episode_reward``), the step's arrays converted by
    numpy, and TorchRL's pass over the step's output skipped (:meth:`_step_proc_data`); with the lean collector
    policies, a collected frame at 8 CartPole envs went from 285 to 40-52 us (``benchmarks/gym_collection.py``).
    Row b is seeded ``seed + b`` (gymnasium's vector seeding).

    Entries: ``observation`` ``[B, *obs_shape]`` for an array space (one entry per key for a ``Dict`` space);
    ``action`` ``[B]`` int64 for ``Discrete`` (``categorical_action_encoding``), ``[B, *shape]`` for ``Box``;
    ``reward``, ``done``, ``terminated``, ``truncated`` and ``episode_reward`` (the undiscounted return of the
    running episode, ``RewardSum``'s entry) ``[B, 1]``.

    Args:
        env_id: the gymnasium id. num_envs: B >= 1.
        render_mode: gymnasium's, for every env (``rgb_array``: :meth:`render_frame` works).
        specs: the specs of one env (:func:`one_env_specs`); None: read off TorchRL's ``GymEnv(env_id)``.
        make_vector: builds the gymnasium vector env of ``num_envs`` envs with same-step autoreset, on first use;
            None: ``gym.make_vec(env_id, ...)`` in this process.
        device: where the TensorDicts live (the env steps on CPU). On CPU they carry no device (TorchRL and
            tensordict skip their device checks then: 17% less time per collected CartPole step).

    Raises:
        ValueError: an action space other than ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box``.
    """

    def __init__(self, env_id: str, num_envs: int, device: torch.device | str = "cpu",
                 render_mode: str | None = None, specs: tuple[TensorSpec, ...] | None = None,
                 make_vector: Callable[[], gym.vector.VectorEnv] | None = None) -> None:
        super().__init__(device=None if device is None or torch.device(device).type == "cpu" else device,
                         batch_size=torch.Size([num_envs]))
        if specs is None:
            one = GymEnv(env_id, categorical_action_encoding=True)
            try:
                specs = one_env_specs(one, env_id)
            finally:
                one.close()
        if self.device is not None:
            specs = tuple(spec.to(self.device) for spec in specs)
        observation, self.full_action_spec, self.full_reward_spec, self.full_done_spec = (
            spec.expand(num_envs) for spec in specs)
        self._obs_keys = list(observation.keys())
        self._obs_dtypes = {k: torch_to_numpy_dtype_dict[observation[k].dtype] for k in self._obs_keys}
        self._reward_dtype = self.reward_spec.dtype
        self._np_reward_dtype = torch_to_numpy_dtype_dict[self._reward_dtype]
        observation["episode_reward"] = Unbounded(shape=(num_envs, 1), dtype=self._reward_dtype, device=self.device)
        self.observation_spec = observation
        self.env_id = env_id
        drawing = {"render_mode": render_mode} if render_mode else {}  # (an env may not take the argument at all)
        self._make_vector = make_vector or partial(
            gym.make_vec, env_id, num_envs=num_envs, vectorization_mode="sync", **drawing,
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        self._vector: gym.vector.VectorEnv | None = None
        self.render_mode = render_mode
        self._seed: int | None = None
        self._seeded_with: int | None = None  # the last seed given (what a resume state must match)
        self._restored = False  # a resume state was loaded: the next full reset hands out its step
        # the vector env's observations now (a new episode's first where the row is fresh: reset by the vector env
        # in the step that ended its episode), and each row's return so far
        self._last: dict[str, Tensor] | None = None
        self._fresh = np.zeros(num_envs, dtype=bool)
        self._return = np.zeros((num_envs, 1), dtype=self._np_reward_dtype)

    @property
    def vector(self) -> gym.vector.VectorEnv:
        """The gymnasium vector env, built on first use (an env that is never stepped, such as the learner's copy
        of a run with rollout workers, starts no emulator and no process)."""
        if self._vector is None:
            self._vector = self._make_vector()
        return self._vector

    def _tensor(self, array: np.ndarray, dtype: np.dtype | None = None) -> Tensor:
        """A numpy array as a tensor (of ``dtype``, a numpy dtype, if given) on this env's device. The conversion is
        numpy's, and on CPU the tensor shares the array's memory: arrays handed out are never written again
        (gymnasium's vector env returns new arrays each step, and this env replaces its own)."""
        tensor = torch.from_numpy(np.asarray(array, dtype=dtype))
        return tensor if self.device is None else tensor.to(self.device)

    def _tensors(self, observation: np.ndarray | dict) -> dict[str, Tensor]:
        """A gymnasium batch of observations (an array, or a dict of arrays) as ``{key: [B, ...] tensor}``."""
        if not isinstance(observation, dict):
            observation = {self._obs_keys[0]: observation}
        return {k: self._tensor(observation[k], dtype) for k, dtype in self._obs_dtypes.items()}

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        rows = tensordict.get("_reset", None) if tensordict is not None else None
        rows = np.ones_like(self._fresh) if rows is None else rows.reshape(-1).cpu().numpy()
        # rows the vector env reset in the step that ended them are at their new episode's start already (TorchRL
        # asks for them with or without ``_reset``: without when every row finished); the others are reset now
        if self._restored and rows.all():  # the collector's first reset after a resume: the restored step
            self._restored, self._seed = False, None
            return self._reset_output()
        stale = rows & ~self._fresh
        self._fresh &= ~rows
        if self._last is None or self._seed is not None or stale.all():  # first reset, new seed, or every row
            seed, self._seed = self._seed, None
            observation, info = self.vector.reset(seed=seed)
            self._on_info(info, torch.ones(len(stale), dtype=torch.bool))
            self._fresh[:] = False
            self._return = np.zeros_like(self._return)
            self._last = self._tensors(observation)
        elif stale.any():
            observation, info = self.vector.reset(options={"reset_mask": stale})
            self._on_info(info, torch.from_numpy(stale))
            self._return = np.where(stale[:, None], self._return.dtype.type(0), self._return)
            self._last = self._tensors(observation)
        return self._reset_output()

    def _reset_output(self) -> TensorDictBase:
        out = {**self._last, "episode_reward": self._tensor(self._return)}
        self._extra(out, None)
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _on_info(self, info: dict, rows: Tensor | None) -> None:
        """A subclass's hook: the vector env's ``info`` of a reset of ``rows`` (bool ``[B]``) or of a step (None)."""

    def _extra(self, out: dict, done: Tensor | None) -> None:
        """A subclass's hook: add entries to the output ``out`` of a step (``done`` ``[B, 1]``) or a reset (None)."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        observation, reward, terminated, truncated, info = self.vector.step(
            (action if self.device is None else action.cpu()).numpy())
        self._on_info(info, None)
        self._last = self._tensors(observation)
        done = terminated | truncated
        self._fresh[:] = done
        if done.any():  # the step's own observation of a finished row is its episode's final one
            rows, final = done.nonzero()[0], info["final_obs"]
            if isinstance(observation, dict):
                observation = {k: v.copy() for k, v in observation.items()}
                for row in rows:
                    for k in observation:
                        observation[k][row] = final[row][k]
            else:
                observation = observation.copy()
                observation[rows] = np.stack(final[rows])
            out = self._tensors(observation)
        else:
            out = dict(self._last)
        # the flags and reward as [B, 1], converted by numpy (a torch call per entry costs more than the step of a
        # classic-control env)
        reward = np.asarray(reward, dtype=self._np_reward_dtype)[:, None]
        episode_reward = self._return + reward
        self._return = np.where(done[:, None], episode_reward.dtype.type(0), episode_reward)  # a new episode's is 0
        out["reward"] = self._tensor(reward)
        out["done"] = self._tensor(done[:, None])
        out["terminated"] = self._tensor(terminated[:, None])
        out["truncated"] = self._tensor(truncated[:, None])
        out["episode_reward"] = self._tensor(episode_reward)
        self._extra(out, out["done"])
        # _new_unsafe skips the checks of TensorDict(...): every entry is built here with batch size [B]
        return new_tensordict(out, self.batch_size, self.device)

    def _step_proc_data(self, next_tensordict_out: TensorDictBase) -> TensorDictBase:
        """:meth:`_step`'s output as it is: TorchRL's pass over a step's output reshapes rewards to ``[B, 1]`` and
        adds missing done entries, which :meth:`_step` writes itself (about 7% of a collected 1-env frame). With
        ``run_type_checks`` on, TorchRL's pass and its type checks run."""
        if self.run_type_checks:
            return super()._step_proc_data(next_tensordict_out)
        return next_tensordict_out

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """TorchRL's reset of the finished rows of ``tensordict`` (``step_mdp``'s output of a step), without a reset
        call where the vector env started those rows' new episodes in that step: their first observations and
        zero returns are written in and their done flags cleared, as ``EnvBase.maybe_reset`` would through
        :meth:`_reset` and its merge of the reset rows (20% of a collected step at 8 CartPole envs otherwise).
        Any other finished row takes TorchRL's path."""
        done = tensordict.get("done")
        done = (done if self.device is None else done.cpu()).numpy().reshape(-1)  # numpy's any is cheaper here
        if not done.any():
            return tensordict
        if (done & ~self._fresh).any():
            return super().maybe_reset(tensordict)
        self._fresh &= ~done
        for key, value in self._last.items():  # the rows that played on are at these observations too
            tensordict.set(key, value)
        tensordict.set("episode_reward", self._tensor(self._return))
        for key in ("done", "terminated", "truncated"):
            tensordict.set(key, torch.zeros_like(tensordict.get(key)))
        return tensordict

    def _set_seed(self, seed: int | None) -> None:
        self._seed = self._seeded_with = seed
        self._restored = False

    def resume_state(self) -> dict:
        """What continues the episodes in progress exactly, for envs whose state is plain attributes
        (:data:`RESTORABLE_MODULES`: classic control, toy text): every sub-env's and the vector env's attributes
        and generators (:func:`snapshot`), the current observations, fresh rows and returns, and the seed this
        env was given. Other envs (Box2D, ALE... hold state that is not plain attributes) give ``{}``: a resumed
        run starts new episodes there."""
        if self._last is None or not isinstance(self.vector, gym.vector.SyncVectorEnv) or not all(
                type(e.unwrapped).__module__.startswith(RESTORABLE_MODULES) for e in self.vector.envs):
            return {}
        return {"seed": self._seeded_with, "vector": snapshot(self.vector),
                "envs": [snapshot(e) for e in self.vector.envs],
                "last": {k: v.cpu().clone() for k, v in self._last.items()},
                "fresh": torch.from_numpy(self._fresh.copy()), "return": torch.from_numpy(self._return.copy())}

    def load_resume_state(self, state: dict, keep_row_seeds: bool = False) -> bool:
        """Restore :meth:`resume_state`: the collector's next full reset hands out the saved step, and the envs
        go on from it. A state saved with another seed (another DDP rank's envs) or another number of envs (an
        evaluation's env), or an empty one, is not applied: the envs start new episodes.

        Returns:
            Whether the state was applied.

        Raises:
            RestoredStateError: a state that is not this env's (another stack of wrappers, other parameters,
                values of another kind or shape, not finite; see :func:`envs.gym_state.restore`).
        """
        if not state:
            return False
        restored_mapping(state, "env state", ("seed", "vector", "envs", "last", "fresh", "return"))
        if state["seed"] != self._seeded_with or not isinstance(state["envs"], list) or len(state["envs"]) != len(
                self.vector.envs):
            return False
        b = self.batch_size[0]
        last = restored_mapping(state["last"], "env state.last")
        spec = self.observation_spec
        observed = sorted(k for k in spec.keys() if k != "episode_reward")
        if sorted(last) != observed:
            raise RestoredStateError(f"env state.last holds {sorted(last)}, this env observes {observed}")
        last = {k: restored_tensor(v, f"env state.last.{k}", shape=tuple(spec[k].shape), dtype=spec[k].dtype)
                for k, v in last.items()}
        fresh = restored_tensor(state["fresh"], "env state.fresh", shape=(b,), dtype=torch.bool)
        returns = restored_tensor(state["return"], "env state.return", shape=tuple(self._return.shape))
        self.vector.reset(seed=0)  # every attribute of the envs' state exists, to check the snapshot against (all set)
        restore(self.vector, state["vector"], "env state.vector")
        for i, (env, env_state) in enumerate(zip(self.vector.envs, state["envs"], strict=True)):
            restore(env, env_state, f"env state.envs[{i}]")
        self._last = {k: v.to(self.device) for k, v in last.items()}
        self._fresh = fresh.numpy().copy()
        self._return = returns.cpu().numpy().astype(self._np_reward_dtype)
        self._restored, self._seed = True, None
        return True

    def render_frame(self, row: int = 0) -> np.ndarray:
        """Row ``row``'s env drawn by gymnasium now, ``[H, W, 3]`` uint8 (a video's frame). After the step that
        ends an episode it shows the next episode's start (the vector env resets within that step).

        Raises:
            ValueError: the env was built without ``render_mode: rgb_array``.
        """
        if self.render_mode != "rgb_array":
            raise ValueError(f"{self.env_id} was built without render_mode: rgb_array (env.render_mode)")
        return np.asarray(self.vector.envs[row].render(), dtype=np.uint8)

    def close(self, *, raise_if_closed: bool = True) -> None:
        if self._vector is not None:
            self._vector.close()
        super().close(raise_if_closed=raise_if_closed)
