"""Self-play: a bounded pool of snapshots of the policy, drawn as opponents next to scripted ones."""

from __future__ import annotations

import copy
import logging

import lightning as L
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torchrl.envs import ExplorationType, set_exploration_type

from callbacks.base import RLCallback
from envs import unwrap
from envs.restored import RestoredStateError, restored_mapping, restored_number, restored_tensor
from modules.checks import check_loaded_weights
from modules.loading import weights_difference
from modules.schedule import FrameSchedule

log = logging.getLogger(__name__)

KINDS = ("self", "static", "weak", "strong")  # "self": a snapshot of the policy (the env's "policy" opponent)


class SelfPlay(RLCallback):
    """Every ``every_n_frames`` collected frames the current policy's weights join a pool of at most
    ``pool_size`` snapshots (the oldest leaves). After every collected batch, each training env row draws
    who it meets from its next episode on: ``self`` (a snapshot), or a scripted ``static`` / ``weak`` /
    ``strong`` opponent, with the configured ``probabilities``; the snapshot the ``self`` rows meet is
    drawn uniformly from the pool once per batch. Until the first snapshot exists, ``self`` draws go to
    the scripted kinds in proportion to their probabilities. Snapshots play greedily
    (``ExplorationType.DETERMINISTIC``), batched inside the env's step. Without a ``self`` share it is a mix of
    scripted opponents (``configs/hockey_ppo.yaml``: weak 40%, strong 60%).

    Who sets the training envs' opponents is explicit: the env config's ``opponent`` at build, the settings
    of ``configure_env`` (e.g. a ``callbacks.CurriculumPhases`` phase) from each row's next reset, and this
    callback's draws while it is ``active`` (its one writer is :meth:`set_active`: the config's ``active``, then
    each ``callbacks.CurriculumPhases`` phase's ``self_play``; in the checkpoint).

    The env must offer ``set_opponent(kinds per row)`` and ``set_opponent_policy(callable)`` (the hockey
    env); the callback acts through the data module's ``set_opponents`` / ``set_opponent_policy``, so it
    works with in-process envs and with rollout workers (``data.collector.workers``) alike. Pool, draw generator,
    schedule, ``active`` and the snapshot played (``pick``) are in the checkpoint, under a ``state_key`` of the
    callback's own (its interval, pool size and seed), so two may coexist. A resumed run whose envs go on with the
    checkpoint's games (the data module's ``resumed_env``: their drawn opponents are in the env's state) sets that
    snapshot again instead of drawing; otherwise it draws at its start. Logged: ``schedule/self_play_pool_size`` and
    ``schedule/self_play_share_<kind>`` (the kinds drawn for the batch). Runs the same on every rank (each rank's
    envs draw from their own stream, seeded ``seed + rank``).

    Args:
        every_n_frames: snapshot interval in collected frames (all ranks).
        pool_size: the most snapshots kept.
        probabilities: ``{kind: p}`` over ``self``, ``static``, ``weak``, ``strong``, summing to 1.
        seed: seed of the draws; null: the run's seed (``pipelines.fit`` sets it from ``seed_everything``; 0 when
            built in Python).
        active: draw opponents from the start (snapshots are taken either way); ``callbacks.CurriculumPhases``
            switches it per phase (``self_play: true``), so a curriculum can end in self-play.

    Raises:
        ValueError: a non-positive interval or pool size, an unknown kind, a negative probability or a sum
            other than 1 (the message names the key); at the start of training, an env without opponents.
    """

    def __init__(self, every_n_frames: int = 100_000, pool_size: int = 10,
                 probabilities: dict[str, float] | None = None, seed: int | None = None, active: bool = True) -> None:
        probabilities = dict(probabilities or {"self": 0.5, "weak": 0.25, "strong": 0.25})
        if every_n_frames < 1 or pool_size < 1:
            raise ValueError(f"SelfPlay: every_n_frames and pool_size must be >= 1, got {every_n_frames}, {pool_size}")
        unknown = set(probabilities) - set(KINDS)
        if unknown:
            raise ValueError(f"SelfPlay.probabilities has unknown kinds {sorted(unknown)}: allowed {', '.join(KINDS)}")
        if any(p < 0 for p in probabilities.values()) or abs(sum(probabilities.values()) - 1.0) > 1e-6:
            raise ValueError(f"SelfPlay.probabilities={probabilities} must be >= 0 and sum to 1")
        self.schedule = FrameSchedule(every_n_frames)
        self.pool_size = pool_size
        self.probabilities = probabilities
        self.seed = 0 if seed is None else int(seed)
        self.active = active
        self.pool: list[dict[str, Tensor]] = []
        self.drawn = dict.fromkeys(KINDS, 0)  # opponents drawn in this process (a statistic)
        self._generator: torch.Generator | None = None
        self._opponent = None  # a copy of the policy that plays the drawn snapshot
        self.pick: int | None = None  # the pool index of the snapshot the "self" rows meet now

    # ------------------------------------------------------------------ state
    @property
    def state_key(self) -> str:
        return self._generate_state_key(every_n_frames=self.schedule.every_n_frames, pool_size=self.pool_size,
                                        seed=self.seed)

    def state_dict(self) -> dict:
        return {"pool": self.pool, **self.schedule.state_dict(), "active": self.active, "pick": self.pick,
                "generator": self._generator.get_state() if self._generator is not None else None}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`, checked (the snapshots' weights again, against the policy, at the train start).

        Raises:
            RestoredStateError: a pool that is not a list of at most ``pool_size`` weight mappings, a ``pick`` that
                is no index of it, a generator state that is not a torch generator's (names the entry)."""
        state = restored_mapping(state_dict, "SelfPlay", ("pool",))
        pool = state["pool"]
        if not isinstance(pool, list) or len(pool) > self.pool_size or not all(isinstance(p, dict) for p in pool):
            raise RestoredStateError(f"SelfPlay.pool is not a list of at most {self.pool_size} weight snapshots")
        pick = state.get("pick")
        if pick is not None:
            restored_number(pick, "SelfPlay.pick", low=0, high=len(pool) - 1)
        generator = state.get("generator")
        if generator is not None:
            restored_tensor(generator, "SelfPlay.generator", torch.Generator().get_state())
        self.pool = list(pool)
        self.schedule.load_state_dict(state_dict)
        self.active = bool(state.get("active", self.active))
        self.pick, self._saved_generator = pick, generator

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A checkpoint written before ``active`` was the callback's keeps it as the data module's ``self_play``:
        taken from there (the callback's own state, loaded next, has none)."""
        for key, state in checkpoint.items():
            if isinstance(key, str) and key.endswith("DataModule") and isinstance(state, dict) and "self_play" in state:
                self.active = bool(state["self_play"])

    def set_active(self, on: bool) -> None:
        """Whether this callback draws the training envs' opponents after every batch (on) or the env's settings
        set them (off): the config's ``active`` at the start, then ``callbacks.CurriculumPhases`` per phase."""
        self.active = bool(on)

    @property
    def next_frames(self) -> int:
        """The frame count of the next snapshot."""
        return self.schedule.next_frames

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.datamodule.env_has("set_opponent", "set_opponent_policy"):
            raise ValueError(f"SelfPlay needs an env with opponents (set_opponent, set_opponent_policy), "
                             f"got {type(unwrap(trainer.datamodule.env)).__name__}")
        self._generator = torch.Generator().manual_seed(self.seed + trainer.global_rank)
        saved = getattr(self, "_saved_generator", None)
        if saved is not None:
            self._generator.set_state(saved)
        self._opponent = SnapshotPlayer(pl_module.collector_policy)
        shapes = {k: v.shape for k, v in self._opponent.policy.state_dict().items()}
        for i, snapshot in enumerate(self.pool):  # a checkpoint's snapshots: the policy's weights, finite
            difference = weights_difference(shapes, snapshot)
            if difference is not None:
                raise RestoredStateError(f"SelfPlay.pool[{i}]: {difference}")
            check_loaded_weights(snapshot, self._opponent.policy)
        if saved is not None and trainer.datamodule.resumed_env:
            # the envs go on with the checkpoint's games and their drawn opponents: only the snapshot is set again
            if self.active and self.pick is not None:
                self._play_snapshot(trainer.datamodule, self.pick)
            return
        self._draw(trainer, pl_module)

    def on_batch_collected(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: TensorDict) -> None:
        if self.schedule.due(pl_module.collected_frames):
            self.snapshot(pl_module)
        self._draw(trainer, pl_module)

    # ------------------------------------------------------------------ pool
    def snapshot(self, pl_module: L.LightningModule) -> None:
        """Add the current policy's weights to the pool (dropping the oldest beyond ``pool_size``)."""
        self.pool.append({k: v.detach().clone() for k, v in pl_module.collector_policy.state_dict().items()})
        del self.pool[:-self.pool_size]
        log.info("self-play pool: %d snapshots at %d frames", len(self.pool), pl_module.collected_frames)

    def draw_kinds(self, rows: int) -> list[str]:
        """The opponent kinds of ``rows`` env rows, drawn with the configured probabilities (``self``
        shared out to the scripted kinds while the pool is empty)."""
        kinds = [k for k in KINDS if self.probabilities.get(k, 0.0) > 0 and (k != "self" or self.pool)]
        if not kinds:
            raise ValueError("SelfPlay: only 'self' has probability > 0 and the pool is still empty: give a scripted "
                             "opponent some probability")
        weights = torch.tensor([self.probabilities[k] for k in kinds], dtype=torch.float64)
        picks = torch.multinomial(weights, rows, replacement=True, generator=self._generator)
        return [kinds[i] for i in picks.tolist()]

    def _draw(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        data = trainer.datamodule
        if not self.active:
            return
        kinds = self.draw_kinds(data.num_envs)
        if self.pool:
            self._play_snapshot(data, int(torch.randint(len(self.pool), (1,), generator=self._generator)))
        data.set_opponents(["policy" if k == "self" else k for k in kinds])
        for kind in kinds:
            self.drawn[kind] += 1
        pl_module.record("schedule/self_play_pool_size", float(len(self.pool)))
        for kind in KINDS:
            pl_module.record(f"schedule/self_play_share_{kind}", sum(k == kind for k in kinds) / len(kinds))

    def _play_snapshot(self, data, pick: int) -> None:
        """Make the pool's snapshot ``pick`` the one the ``self`` rows meet (worker envs get its weights too)."""
        self.pick = pick
        self._opponent.policy.load_state_dict(self.pool[pick])
        data.set_opponent_policy(self._opponent)


class SnapshotPlayer(nn.Module):
    """A copy of a collecting policy that plays greedily (``ExplorationType.DETERMINISTIC``) from opponent
    observations: the callable of the env's ``set_opponent_policy`` (picklable, so worker envs get it).

    Args:
        policy: the collecting policy (a TensorDict module reading ``observation``, writing ``action``);
            copied, without gradients.
    """

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = copy.deepcopy(policy).requires_grad_(False)

    def forward(self, observation: Tensor) -> Tensor:
        """The greedy action ``[k, A]`` (or int64 ``[k]`` for discrete actions) for observations ``[k, F]``."""
        td = TensorDict(observation=observation, batch_size=observation.shape[:1])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            return self.policy(td)["action"]
