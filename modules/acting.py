"""The trained policy as users call it: the collector's TensorDict policy, pinned to an exploration setting
(:meth:`Acting.torchrl_policy`), as a plain module to export, and ``module.predict(observation)``."""

from __future__ import annotations

from abc import abstractmethod

import torch
from tensordict import NestedKey, TensorDict
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.envs.utils import ExplorationType

from envs.policy_state import carried_states
from modules.policy import Action, FixedExplorationPolicy, Observation, exportable, policy_input


class Acting:
    """The acting methods :class:`modules.base.RLModule` has from here (a mixin before ``LightningModule``): they
    read its :attr:`collector_policy`, ``env_specs`` and ``device``.

    What :meth:`predict` takes: ``observation`` is the env's observation as the run's TorchRL env hands it to the
    collector, per sample:

    * one entry (gymnasium envs: ``observation``): a numpy array or a tensor of the per-sample shape (CartPole
      ``[4]`` float32, Pendulum ``[3]``), or a batch ``[N, ...]`` of them. For gymnasium's classic-control and
      toy-text envs that is gymnasium's own observation, so ``module.predict(obs)`` plays ``gym.make(env_id)``.
    * several entries: a dict (or TensorDict) of them, e.g. DVRP's ``customers`` ``[N, F]``, ``request``
      ``[F]``, ``vehicles`` ``[M, 3]``, ``depot`` ``[2]``, ``offers`` ``[A, F_o]`` float32 and ``action_mask``
      ``[A]`` bool (``envs.dvrp.DVRPEnv``), or the robot vacuum's ``observation`` ``[R, F]``, ``agent_id``
      ``[R, R]`` and ``action_mask`` ``[R, 5]`` for its R robots; other entries (``episode_reward``, ``done``)
      are ignored, so a TensorDict from ``env.reset()`` / ``env.step`` can be passed as it is.

    The keys, per-sample shapes and dtypes are the recorded env specs' (:attr:`env_specs`, in the checkpoint);
    an entry of another numeric dtype is cast (an integer or bool array to float32; a float where integers or
    booleans are expected is refused). What the env computes is part of its observation and is not redone
    here: the emulated games' (``envs.games``) grayscale, resize and frame stack (``pixels`` ``[4, 84, 84]``
    uint8, not the raw screen), the DVRP env's flexibility features (from the env's learned model). None of this
    project's envs normalises observations outside the networks (pixels are scaled to [0, 1] inside the CNN; PPO's
    running observation normalisation, ``normalize_observation``, is the module's and applies here too)."""

    @property
    @abstractmethod
    def collector_policy(self) -> TensorDictModuleBase:
        """The TensorDict module the collector runs (exploration on)."""

    def export_policy(self) -> tuple[nn.Module, list[NestedKey]]:
        """The evaluation policy as a plain module ``(*inputs) -> action`` and its input keys
        (:func:`modules.policy.exportable` of :attr:`collector_policy`), for ``pipelines.export``.

        Raises:
            NotImplementedError: a policy with no plain module of fixed inputs under it (REINFORCE's routing policy).
        """
        return exportable(self.collector_policy)

    def export_example(self) -> TensorDict:
        """An example input of :meth:`export_policy`'s module, by its input keys (``[1]``): the env's example
        observation (:attr:`env_specs`)."""
        return self.env_specs.example_observation

    def torchrl_policy(self, deterministic: bool = True) -> FixedExplorationPolicy:
        """The trained policy as a TorchRL TensorDict policy, for ``env.rollout(n, module.torchrl_policy())`` or a
        collector: :attr:`collector_policy` pinned to ``ExplorationType.DETERMINISTIC`` (the evaluation policy:
        DQN's greedy action, PPO's most likely one, SAC's squashed mean) or, with ``deterministic=False``, to
        ``ExplorationType.RANDOM`` (the collector's exploration: DQN's epsilon-greedy at the module's epsilon, PPO's
        and SAC's samples of their distribution), whatever ``set_exploration_type`` the caller has set, and run
        without gradients. It shares this module's weights (no copy).

        It reads the env's observation entries (its ``in_keys``: ``observation``; DVRP's ``customers``, ``request``,
        ``vehicles``, ``depot``, ``offers``, ``action_mask``) from a TensorDict ``[*B]`` as the TorchRL env of the
        run (``envs.make_env``, ``data.make_eval_env``) hands it out, and writes ``action`` (``[*B]`` int64 for a
        discrete action, ``[*B, A]`` continuous, ``[*B, R]`` for R agents) and the policy's other outputs (PPO's
        ``action_log_prob`` and ``hidden``).
        """
        mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        return FixedExplorationPolicy(self.collector_policy, mode)

    def _input_entries(self, policy: TensorDictModuleBase, carried: tuple = ()
                       ) -> dict[NestedKey, tuple[torch.Size, torch.dtype]]:
        """The per-sample shape and dtype of every entry ``policy`` reads but those it ``carried`` (a recurrent
        policy's states and ``is_init``), from the recorded env specs.

        Raises:
            RuntimeError: the recorded specs lack an entry the policy reads.
        """
        example = self.env_specs.example_observation
        dims = example.batch_dims
        entries = {}
        for key in (k for k in policy.in_keys if k not in carried):
            value = example.get(key, None)
            if value is None:
                raise RuntimeError(f"the recorded env specs have no {key!r}, which the policy reads")
            entries[key] = (value.shape[dims:], value.dtype)
        return entries

    def predict(self, observation: Observation, deterministic: bool = True, *, state: dict | None = None,
                episode_start: object = None) -> Action | tuple[Action, dict]:
        """The action of the trained policy for ``observation`` (Stable-Baselines3's ``model.predict``):
        ``action = module.predict(obs)``; for a recurrent policy (an LSTM's) also the states it carries, as
        sb3-contrib's: ``action, state = module.predict(obs, state=state, episode_start=done)``.

        Args:
            observation: the env's observation (see the class docstring); one, or a batch ``[N, ...]``.
            deterministic: the evaluation policy (greedy, the mode, SAC's squashed mean); False: the collector's
                exploration (:meth:`torchrl_policy`): DQN's epsilon-greedy at the module's current epsilon (the
                one the checkpoint was saved with, ``module.epsilon()``; ``module.set_epsilon(e)`` sets another),
                PPO's and SAC's samples of their distribution, drawn from the global torch RNG
                (``torch.manual_seed`` makes them repeatable).
            state: a recurrent policy's states from its previous call (a dict: ``actor_hidden``, ``actor_cell``,
                ``critic_hidden``, ``critic_cell``, each ``[1, H]`` per sample, with the observation's batch dim);
                None: zeros, an episode's start.
            episode_start: a recurrent policy's episode starts (bool, per sample ``[]``, with the observation's
                batch dim ``[N]``): where True the states start again from zeros (the env was reset, as after
                ``done``); None: True without ``state``, else False.

        Returns:
            The action, per sample as the env takes it: a discrete action as its index (int64, ``[]``; ``[R]`` for R
            agents), a continuous one ``[A]`` (float32, within the action spec's bounds); with a leading ``[N]`` for a
            batch. A numpy array if any entry of ``observation`` was not a tensor (numpy in, numpy out), else a
            tensor on the observation's device. A recurrent policy returns ``(action, state)``: the states to pass
            to its next call, as ``state`` above.

        Raises:
            ValueError: a missing entry, a wrong shape, an uncastable dtype or an ``action_mask`` row that allows no
                action (one line naming the expected keys, shapes and dtypes).
            RuntimeError: a module that records no env specs (built in Python and never shaped: see
                :meth:`build_on`).

        A ``state`` or ``episode_start`` given to a policy that carries no state, a state of another shape or an
        ``episode_start`` of another length also raise ``ValueError``.
        """
        if self.env_specs is None:
            raise RuntimeError(f"{type(self).__name__} records no env specs: shape it on an env first "
                               f"(module.build_on(envs.EnvSpecs.of(env))) or load it from a checkpoint")
        policy = self.torchrl_policy(deterministic)
        states = carried_states(self.collector_policy)
        if not states and (state is not None or episode_start is not None):
            raise ValueError("state and episode_start are a recurrent policy's: this policy carries no state")
        entries = self._input_entries(policy, carried=(*states, "is_init"))
        td, batched, as_numpy, device_in = policy_input(observation, entries, self.device)
        if states:
            td.update(_carried_input(states, state, episode_start, td.batch_size, batched, self.device))
        out = policy(td)

        def returned(value: torch.Tensor) -> Action:
            value = value if batched else value[0]
            if as_numpy:
                return value.detach().cpu().numpy()
            return value if device_in is None else value.to(device_in)

        action = returned(out.get("action"))
        return (action, {key: returned(out.get(("next", key))) for key in states}) if states else action

    def forward(self, observation: Observation, deterministic: bool = True) -> Action:
        """``module(observation)``: :meth:`predict` (the same arguments, returns and errors). The training never
        calls it (the updates call the networks and losses), so the module's call is free to mean what a user of a
        loaded checkpoint expects of it: the trained policy's action."""
        return self.predict(observation, deterministic)


def _carried_input(states: dict, state: dict | None, episode_start: object, batch: torch.Size, batched: bool,
                   device: torch.device | str) -> dict:
    """A recurrent policy's carried entries for a :meth:`Acting.predict` input ``[N]``: its states (``state``
    checked as the policy's inputs are, or zeros) and ``is_init`` ``[N, 1]`` (``episode_start``, or True where no
    state is given)."""
    if state is None:
        carried = {key: torch.zeros(*batch, *shape, dtype=dtype, device=device) for key, (shape, dtype) in
                   states.items()}
    else:
        given, given_batched, _, _ = policy_input(state, states, device)
        if given_batched != batched or given.batch_size != batch:
            raise ValueError(f"state is for a batch of {list(given.batch_size)}, the observation "
                             f"{list(batch) if batched else 'one sample'}")
        carried = given.to_dict()
    start = torch.as_tensor(state is None if episode_start is None else episode_start, device=device)
    if start.numel() not in (1, batch.numel()):
        raise ValueError(f"episode_start holds {start.numel()} values for {batch.numel()} observations (one each, "
                         f"or one for all)")
    carried["is_init"] = start.to(torch.bool).reshape(-1, 1).expand(*batch, 1).clone()
    return carried
