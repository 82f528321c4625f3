"""Periodic evaluation of the deterministic policy on its own seeded envs, with a route plot or game frame strip."""

from __future__ import annotations

import contextlib
import logging
import math
import os

import lightning as L
import numpy as np
import torch

from callbacks.compat import add_summary
from envs import has, unwrap
from envs.episodes import play_episodes
from envs.restored import RestoredStateError, restored_number
from envs.video import can_render, gif_bytes
from modules.checks import nonfinite_weights
from modules.schedule import FrameSchedule

log = logging.getLogger(__name__)


class PolicyEvaluation(L.Callback):
    """Every ``every_n_frames`` collected frames (and at the end), play the first episode of each of
    ``num_envs`` evaluation envs (seeds ``seed, seed + 1, ...``, the same episodes every time) with
    the deterministic policy (sampled where the env config's ``stochastic_evaluation`` says so: games;
    :func:`envs.episodes.play_episodes`) and log ``eval/episode_return`` and the
    env's ``info`` entries (``eval/<name>``). Envs that can draw their plan (``render_routes``) log row 0's
    as the image ``eval/routes``; envs that can draw a game (``render_game``, the hockey env) log a frame
    strip of row 0's first game as ``eval[/<name>]/game``; with ``video_frames``, envs that draw themselves
    (``render_frame``: hockey, vacuum, DVRP, gymnasium envs with ``render_mode: rgb_array``) log row 0's first
    frames as a clip, ``eval[/<name>]/video`` (an animated GIF in TensorBoard's Images tab). With two or more
    episodes it also logs the return's standard error over them, ``eval[/<name>]/episode_return_se``. These are
    validation episodes (``seed`` 1,000,000 by default, what ``save_best`` chooses on); ``pipelines.evaluate``
    plays held-out ones (seed 10,000,000). Runs on global rank 0
    only; its schedule is in the checkpoint. The end of training evaluates once more unless the schedule just did
    at the same frame count.

    With ``save_best``, an evaluation whose ``best_metric`` beats every earlier one saves the run at that
    moment as ``best.ckpt`` beside the other checkpoints (the ``ModelCheckpoint``'s folder, else
    ``<log dir>/checkpoints``): value-based policies can get worse late in training, and the best
    evaluated one is what ``pipelines.evaluate --ckpt_path .../best.ckpt`` should then play.

    With ``settings``, each named entry is a separate evaluation env with those runtime settings
    (``configure``, e.g. ``{weak: {opponent: weak}, strong: {opponent: strong}}`` on the hockey env),
    logged as ``eval/<name>/<key>``; never the training envs.

    Every evaluation's metrics are published where Lightning keeps metrics for other callbacks,
    ``trainer.callback_metrics`` (as ``EarlyStopping`` and ``ModelCheckpoint(monitor=...)`` read them), with
    ``eval/frames``, the frame count they were measured at, so a reader tells a new evaluation from the last
    (``callbacks.CurriculumPhases``); and they are kept in :attr:`history` (in the checkpoint; :func:`evaluations`
    reads it). Each instance has its own ``state_key`` (its interval, seed and settings), so two may coexist.

    Args:
        every_n_frames: interval in collected frames (all ranks).
        num_envs: evaluation episodes per evaluation (per setting).
        seed: seed of the evaluation envs (keep it away from the training seeds).
        max_steps: step limit of an evaluation (episodes unfinished then are not counted).
        save_best: keep the best evaluated checkpoint as ``best.ckpt``.
        settings: named runtime settings of separate evaluation envs, or null for one plain env.
        best_metric: the metric ``save_best`` maximises, e.g. ``eval/weak/won``.
        video_frames: frames of row 0's first episode logged as a clip at every evaluation (0: none).
        video_fps: frames per second of the clip.

    Raises:
        ValueError: a non-positive interval or number of envs.
    """

    def __init__(self, every_n_frames: int = 200_000, num_envs: int = 64, seed: int = 1_000_000,
                 max_steps: int = 10_000, save_best: bool = False, settings: dict[str, dict] | None = None,
                 best_metric: str = "eval/episode_return", video_frames: int = 0, video_fps: float = 10.0) -> None:
        if every_n_frames < 1 or num_envs < 1 or video_frames < 0 or video_fps <= 0:
            raise ValueError(f"PolicyEvaluation: every_n_frames and num_envs must be >= 1, video_frames >= 0 and "
                             f"video_fps > 0, got {every_n_frames}, {num_envs}, {video_frames}, {video_fps}")
        self.schedule = FrameSchedule(every_n_frames)
        self.num_envs = num_envs
        self.seed = seed
        self.max_steps = max_steps
        self.save_best = save_best
        self.settings = dict(settings) if settings else None
        self.best_metric = best_metric
        self.best = -math.inf
        self.video_frames = video_frames
        self.video_fps = video_fps
        self._envs: dict[str | None, object] = {}
        self._warned = False
        self._evaluated_at: int | None = None  # frames of the last evaluation (the end does not repeat it)
        self.history: list[dict[str, float]] = []  # every evaluation's metrics and frame count (rank 0)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(every_n_frames=self.schedule.every_n_frames, seed=self.seed,
                                        settings=sorted(self.settings or {}))

    def state_dict(self) -> dict:
        return {**self.schedule.state_dict(), "best": self.best, "history": self.history}

    def load_state_dict(self, state_dict: dict) -> None:
        self.schedule.load_state_dict(state_dict)
        best = state_dict.get("best", -math.inf)
        self.best = best if best == -math.inf else restored_number(best, "PolicyEvaluation.best", integer=False)
        history = state_dict.get("history", self.history)
        if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
            raise RestoredStateError("PolicyEvaluation.history is not a list of evaluations")
        for i, entry in enumerate(history):  # (a NaN there was printed as the best result, exit 0)
            restored_number(entry.get("frames"), f"PolicyEvaluation.history[{i}].frames", integer=False, low=0)
            for name, value in entry.items():
                if not isinstance(name, str):
                    raise RestoredStateError(f"PolicyEvaluation.history[{i}] has the key {name!r}, not a metric")
                restored_number(value, f"PolicyEvaluation.history[{i}].{name}", integer=False)
        self.history = list(history)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A checkpoint written before the history was the callback's keeps it in the module's state
        (``rl_state.evaluations``): taken from there (the callback's own state, loaded next, has none)."""
        self.history = list((checkpoint.get("rl_state") or {}).get("evaluations", []))

    def best_path(self, trainer: L.Trainer) -> str:
        """Where ``best.ckpt`` goes: the ``ModelCheckpoint``'s folder, else ``<log dir>/checkpoints``."""
        folder = getattr(trainer.checkpoint_callback, "dirpath", None)
        if folder is None:
            folder = os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")
        return os.path.join(folder, "best.ckpt")

    def chart_groups(self) -> dict[str, list[str]]:
        """The evaluation return of every setting in the episode-return chart (:mod:`pipelines.tensorboard_layout`)."""
        names = [None] if not self.settings else list(self.settings)
        return {"episode return": [f"eval/{n + '/' if n else ''}episode_return" for n in names]}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self.schedule.due(pl_module.collected_frames):
            self._evaluate_and_keep_best(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._evaluated_at != pl_module.collected_frames:  # not when the schedule just evaluated these frames
            self._evaluate_and_keep_best(trainer, pl_module)

    def _evaluate_and_keep_best(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._evaluated_at = pl_module.collected_frames
        metrics = self.evaluate(trainer, pl_module)
        if not self.save_best or getattr(trainer, "fast_dev_run", False):  # (Lightning's fast_dev_run writes nothing)
            return
        value = trainer.strategy.broadcast(metrics.get(self.best_metric), src=0)  # rank 0 evaluated
        if value is not None and value > self.best:
            bad = trainer.strategy.broadcast(nonfinite_weights(pl_module), src=0)
            if bad:  # never written over a finite best.ckpt
                log.warning("not writing %s: %d weights are not finite (e.g. %s)", self.best_path(trainer), len(bad),
                            bad[0])
                return
            self.best = value
            # a full checkpoint (optimiser and callback state too: it resumes a run); a collective: every rank calls it
            trainer.save_checkpoint(self.best_path(trainer), weights_only=False)
            log.info("new best evaluation %s %.3f at %d frames: %s", self.best_metric, value,
                     pl_module.collected_frames, self.best_path(trainer))

    def evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Run the evaluation and log it (rank 0); returns the metrics."""
        if not trainer.is_global_zero:
            return {}
        was_training = pl_module.training
        pl_module.eval()
        metrics = {}
        # a stop signal ends the run at once while the evaluation plays (a long one outlasted the stop's deadline):
        # it holds nothing to save, and the checkpoint written then is the state after the training step
        with getattr(trainer.datamodule, "interruptible", contextlib.nullcontext)():
            for name, settings in (self.settings or {None: None}).items():
                if name not in self._envs:
                    self._envs[name] = trainer.datamodule.make_eval_env(self.num_envs, self.seed, settings)
                prefix = "eval/" if name is None else f"eval/{name}/"
                metrics.update({prefix + k: v for k, v in self._play(self._envs[name], pl_module, prefix).items()})
        pl_module.train(was_training)
        frames = float(pl_module.collected_frames)
        self.history.append({"frames": frames, **metrics})
        trainer.callback_metrics.update({k: torch.tensor(v) for k, v in {**metrics, "eval/frames": frames}.items()})
        for logger in pl_module.loggers:
            logger.log_metrics(metrics, step=pl_module.collected_frames)
        log.info("evaluation at %d frames: %s", pl_module.collected_frames, metrics)
        return metrics

    def _play(self, env, pl_module: L.LightningModule, prefix: str = "eval/") -> dict[str, float]:
        """The first episode of every row of ``env`` (seeded ``seed`` again): mean results (keys without the
        ``eval/`` prefix); row 0's plan image or game frame strip is logged at the end of its episode."""
        env.set_seed(self.seed)
        base, images, frames, clip = unwrap(env), {}, [], []
        drawn, filming = False, self.video_frames > 0 and can_render(env)
        if self.video_frames > 0 and not filming and not self._warned:
            log.warning("PolicyEvaluation.video_frames: %s cannot draw itself (a gymnasium env needs env.render_mode: "
                        "rgb_array); no clip is logged", type(base).__name__)
            self._warned = True

        def draw_row0(step, finished) -> None:  # row 0's first episode, drawn when it ends (before its reset)
            nonlocal drawn
            if drawn:
                return
            if has(base, "render_game"):
                frames.append(step["observation"][0])
            if filming and len(clip) < self.video_frames:
                clip.append(base.render_frame(0))
            if bool(finished[0]):
                drawn = True
                if has(base, "render_routes"):
                    images["eval/routes"] = base.render_routes(0)
                if has(base, "render_game"):
                    images[prefix + "game"] = base.render_game(torch.stack(frames))

        stochastic = pl_module.trainer.datamodule.env_config.stochastic_evaluation
        results = play_episodes(env, pl_module.collector_policy, 1, self.max_steps, on_step=draw_row0,
                                stochastic=stochastic, sample_seed=self.seed)
        metrics = {key: value.mean().item() for key, value in results.items()}
        returns = results.get("episode_return")
        if returns is not None and returns.numel() > 1:  # its standard error over the episodes
            metrics["episode_return_se"] = (returns.double().std() / math.sqrt(returns.numel())).item()
        for logger in pl_module.loggers:
            if not hasattr(logger.experiment, "add_image"):
                continue
            for tag, image in images.items():
                logger.experiment.add_image(tag, np.ascontiguousarray(image), pl_module.collected_frames,
                                            dataformats="HWC")
            if clip:
                log_clip(logger.experiment, prefix + "video", clip, pl_module.collected_frames, self.video_fps)
        return metrics


def new_evaluation(trainer: L.Trainer, read_frames: float | None) -> float | None:
    """The ``eval/frames`` of the evaluation published in ``trainer.callback_metrics`` when it is not the one read
    at ``read_frames`` (None before any is read); None when there is none or no new one."""
    frames = trainer.callback_metrics.get("eval/frames")
    return None if frames is None or float(frames) == read_frames else float(frames)


def evaluations(trainer: L.Trainer) -> list[dict[str, float]]:
    """Every evaluation of the run's :class:`PolicyEvaluation` callbacks (metrics and ``frames``), in frame order;
    [] without one (or off rank 0, which alone evaluates)."""
    found = [h for c in trainer.callbacks if isinstance(c, PolicyEvaluation) for h in c.history]
    return sorted(found, key=lambda h: h["frames"])


def log_clip(writer, tag: str, frames: list[np.ndarray], step: int, fps: float) -> None:
    """Log ``frames`` ``[H, W, 3]`` uint8 to a TensorBoard ``SummaryWriter`` as an animated GIF image (what the
    writer's ``add_video`` makes, encoded by imageio instead of moviepy); TensorBoard's Images tab plays it."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width = frames[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif_bytes(frames, fps))
    add_summary(writer, Summary(value=[Summary.Value(tag=tag, image=image)]), step)
