"""Episodes of an env config played by a policy: the per-episode results of many (with the plans and days an env
exports, for ``pipelines.evaluate``'s tables), and one episode as a video."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from envs import EnvConfig, has, make_env, unwrap
from envs.episodes import play_episodes
from envs.video import record_episode, write_video


def play(config: EnvConfig, make_policy: Callable, episodes: int, num_envs: int, seed: int,
         settings: dict | None = None, keep_plans: bool = False, device: str | torch.device = "cpu",
         models: dict | None = None) -> dict:
    """Play ``episodes`` episodes of ``config``'s env (``num_envs`` rows seeded ``seed, seed + 1, ...``, the
    first ``ceil(episodes / num_envs)`` episodes of each) with the policy ``make_policy(env)``, deterministically
    (sampled for an env config with ``stochastic_evaluation``: games).

    Args:
        settings: runtime settings applied through the env's ``configure`` first (e.g. an opponent).
        keep_plans: also keep each episode's exported plan (the env's ``export_episodes``) under ``plans``, and
            its whole day (``export_days``, where the env has it: the hindsight oracle's input) under ``days``.
        device: where the env steps (the policy must be there too).
        models: the run's learned env models (``RLDataModule.env_models``; ``EnvConfig.new_models``), if the env
            takes any.

    Returns:
        :func:`envs.episodes.play_episodes`'s per-episode results ``[episodes]`` (float64), plus ``plans``.

    Raises:
        ValueError: ``settings`` the env rejects, or ``keep_plans`` for an env that exports no plans.
    """
    env = _env(config, num_envs, seed, settings, device, models)
    base = unwrap(env)
    if keep_plans and not has(base, "export_episodes"):
        raise ValueError(f"--routes_out / --pyvrp_episodes need an env that exports its plans, "
                         f"got {type(base).__name__}")
    plans: list[tuple[int, dict]] = []
    days: list[tuple[int, dict]] = []
    counts = torch.zeros(num_envs, dtype=torch.long)

    def export(step, finished) -> None:  # before the finished rows are reset
        rows = finished.nonzero().squeeze(-1).tolist()
        episode = [int(counts[r]) * num_envs + r for r in rows]  # each finished row's episode index
        plans.extend(zip(episode, base.export_episodes(rows), strict=True))
        if has(base, "export_days"):
            days.extend(zip(episode, base.export_days(rows), strict=True))
        counts[finished] += 1

    result = play_episodes(env, make_policy(env), -(-episodes // num_envs), on_step=export if keep_plans else None,
                           stochastic=config.stochastic_evaluation, sample_seed=seed)
    env.close()
    out = {key: value[:episodes].double().cpu() for key, value in result.items()}
    out["plans"] = [plan for _, plan in sorted(plans, key=lambda p: p[0])][:episodes]
    out["days"] = [day for _, day in sorted(days, key=lambda p: p[0])][:episodes]
    return out


def _env(config: EnvConfig, num_envs: int, seed: int, settings: dict | None, device: str | torch.device = "cpu",
         models: dict | None = None):
    """``config``'s env on ``device``, with the run's learned ``models``, with runtime ``settings`` applied
    (``configure``).

    Raises:
        ValueError: ``settings`` for an env without ``configure``, or ones it rejects.
    """
    env = make_env(config, num_envs, seed, device, models)
    if settings:
        base = unwrap(env)
        if not has(base, "configure"):
            raise ValueError(f"evaluation settings {settings} need an env with configure(), got {type(base).__name__}")
        base.configure(**settings)
    return env


def record_video(config: EnvConfig, make_policy: Callable, path: str, seed: int, settings: dict | None,
                 fps: float, device: str | torch.device = "cpu", models: dict | None = None) -> int:
    """One episode of ``config``'s env (row 0, seeded ``seed``, with ``settings``, on ``device``) played by
    ``make_policy(env)``,
    written to ``path`` (:func:`envs.video.write_video`); a gymnasium env is built with ``render_mode: rgb_array``.

    Returns:
        The frames written (one per step of the episode).

    Raises:
        ValueError: an env that cannot draw itself, or a file name that is not ``.mp4`` / ``.gif``.
    """
    if getattr(config, "render_mode", "") is None:
        config = copy.copy(config)
        config.render_mode = "rgb_array"
    env = _env(config, 1, seed, settings, device, models)
    try:
        frames = record_episode(env, make_policy(env), stochastic=config.stochastic_evaluation, sample_seed=seed)
    finally:
        env.close()
    write_video(path, frames, fps)
    return len(frames)
