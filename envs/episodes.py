"""Playing episodes and reading their results: the one place that turns finished episodes into numbers, used
by the training statistics (``modules.base``), the periodic evaluation (``callbacks.PolicyEvaluation``) and
``pipelines.evaluate``.

An episode's results are its undiscounted return (``RewardSum``'s ``episode_reward`` at its last step; a
multi-agent env's is the team's, summed over the agents, with each agent's own as ``agent<i>/episode_return``)
and every entry the env reports under ``info`` at that step (an env's info is its own: the DVRP env's plan
cost and served customers, the hockey env's win / draw / loss; a per-agent entry is averaged over the agents,
with each agent's own as ``agent<i>/<key>``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.envs import EnvBase, ExplorationType, set_exploration_type
from torchrl.envs.utils import step_mdp

from envs.policy_state import recurrent_env


def episode_results(step: TensorDictBase, finished: Tensor) -> dict[str, Tensor]:
    """The results of the episodes that end at ``finished``.

    Args:
        step: the ``next`` entries of env steps, batch ``[*S]`` (e.g. a collected ``[B, T]`` batch's
            ``("next",)``), with ``episode_reward`` ``[*S, 1]`` or ``[*S, R, 1]`` and optionally ``info``.
        finished: bool ``[*S]``, the steps whose episode is counted (e.g. ``done``).

    Returns:
        ``{name: [N] float tensor}`` over the N finished episodes in ``finished``'s (row-major) order:
        ``episode_return``, ``agent<i>/episode_return`` (multi-agent), ``<info key>`` and
        ``agent<i>/<info key>`` (per-agent info entries).
    """
    n = int(finished.sum())
    returns = step["episode_reward"][finished].float().reshape(n, -1)  # [N, R]
    out = {"episode_return": returns.sum(-1)}
    if returns.shape[1] > 1:
        out.update({f"agent{i}/episode_return": returns[:, i] for i in range(returns.shape[1])})
    if "info" in step.keys():
        for key, value in step["info"].items():
            value = value[finished].float().reshape(n, -1)  # [N, 1], or [N, R] per agent
            out[key] = value.mean(-1)
            if value.shape[1] > 1:
                out.update({f"agent{i}/{key}": value[:, i] for i in range(value.shape[1])})
    return out


def play_episodes(env: EnvBase, policy: Callable[[TensorDictBase], TensorDictBase], episodes_per_row: int = 1,
                  max_steps: int | None = None,
                  on_step: Callable[[TensorDictBase, Tensor], None] | None = None,
                  stochastic: bool = False, sample_seed: int = 0) -> dict[str, Tensor]:
    """Play the first ``episodes_per_row`` episodes of every row of ``env`` (from a reset) with ``policy``,
    deterministically (``ExplorationType.DETERMINISTIC``), or with ``stochastic`` its actions sampled
    (``ExplorationType.RANDOM``) from the torch RNG seeded ``sample_seed`` in a fork of it (the caller's random
    stream, e.g. a training run's, is left as it was), with no gradients.

    Args:
        env: a batched env ``[B]`` that writes ``episode_reward`` (e.g. from ``envs.make_env``); played with what a
            recurrent policy needs of it (:func:`envs.policy_state.recurrent_env`).
        policy: reads an observation TensorDict ``[B]``, writes ``action``.
        episodes_per_row: episodes counted per row (rows that finish early play on uncounted).
        max_steps: stop after this many steps even if some episodes are unfinished (they are not counted).
        on_step: called after every step with the step's TensorDict (``[B]``, with ``next``) and the bool
            ``[B]`` mask of the rows whose counted episode ended at it, before those rows are reset (the env
            still holds the finished episodes' state, e.g. a plan to export or draw).

    Returns:
        :func:`episode_results` of the counted episodes, ordered by (episode index in its row, row).
    """
    env = recurrent_env(env, policy)  # (a recurrent policy's is_init and states; as it is otherwise)
    b = env.batch_size[0]
    counts = torch.zeros(b, dtype=torch.long)
    parts: dict[str, list[Tensor]] = {}
    order: list[Tensor] = []
    td = env.reset()
    steps = 0
    exploration = ExplorationType.RANDOM if stochastic else ExplorationType.DETERMINISTIC
    with torch.no_grad(), set_exploration_type(exploration), torch.random.fork_rng(devices=[], enabled=stochastic):
        if stochastic:
            torch.manual_seed(sample_seed)
        while bool((counts < episodes_per_row).any()) and (max_steps is None or steps < max_steps):
            step = env.step(policy(td))
            steps += 1
            finished = step["next", "done"].reshape(b).cpu() & (counts < episodes_per_row)
            if on_step is not None:
                on_step(step, finished)
            if bool(finished.any()):
                for key, value in episode_results(step["next"], finished.to(step.device)).items():
                    parts.setdefault(key, []).append(value.cpu())
                rows = finished.nonzero().squeeze(-1)
                order.append(counts[rows] * b + rows)
            counts += finished.long()
            td = env.maybe_reset(step_mdp(step, reward_keys=env.reward_keys, done_keys=env.done_keys,
                                          action_keys=env.action_keys))
    if not order:
        return {}
    sort = torch.cat(order).argsort(stable=True)
    return {key: torch.cat(values)[sort] for key, values in parts.items()}


def masked_uniform(mask: Tensor) -> Tensor:
    """One uniform draw among the allowed actions of every row: bool ``mask`` ``[*B, A]`` -> int64 ``[*B]``, from
    the global torch RNG (``torch.multinomial`` over the mask, the draw TorchRL's ``Categorical.rand`` makes with a
    mask).

    Raises:
        RuntimeError: a row with no allowed action (from ``torch.multinomial``).
    """
    return torch.multinomial(mask.reshape(-1, mask.shape[-1]).float(), 1).reshape(mask.shape[:-1])


class UniformRandomPolicy:
    """The random baseline of any env: uniform over each agent's allowed actions (``action_mask``,
    ``[*B, A]`` -> categorical ``action`` ``[*B]``), else a draw from the per-sample ``action_spec``
    (both from the global torch RNG).

    Args:
        action_spec: the env's ``action_spec_unbatched``.
    """

    def __init__(self, action_spec) -> None:
        self.action_spec = action_spec

    def __call__(self, td: TensorDict) -> TensorDict:
        if "action_mask" in td.keys():
            td["action"] = masked_uniform(td["action_mask"])
        else:
            td["action"] = self.action_spec.rand(td.batch_size)
        return td
