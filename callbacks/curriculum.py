"""Curriculum phases: runtime env settings that change when an advance rule is met."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from callbacks.evaluation import PolicyEvaluation, new_evaluation
from callbacks.selfplay import SelfPlay
from envs.restored import RestoredStateError, restored_mapping, restored_number

log = logging.getLogger(__name__)

_PHASE_KEYS = {"name", "settings", "until", "clear_buffer", "self_play"}


def _has(trainer: L.Trainer, kind: type) -> bool:
    return any(isinstance(c, kind) for c in trainer.callbacks)


def _phase_error(i: int, key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"CurriculumPhases.phases[{i}].{key}={value!r} is not allowed: {allowed}")


class CurriculumPhases(L.Callback):
    """Phases declared in YAML; each sets the training env's runtime settings (``configure``, e.g. the
    hockey env's ``mode``, ``opponent`` and reward weights) and ends by its advance rule:

    * ``until: {frames: N}``: after N collected frames (all ranks) in the phase;
    * ``until: {metric: eval/weak/won, at_least: 0.8, evaluations: 3}``: when the mean of that metric
      over the last ``evaluations`` evaluations of ``callbacks.PolicyEvaluation`` made in the phase is at
      least ``at_least``;
    * no ``until``: the phase lasts to the end (the last phase's rule is ignored).

    A phase with ``self_play: true`` turns the run's ``callbacks.SelfPlay`` on (``SelfPlay.set_active``: it then
    draws the opponents); every other phase turns it off (the phase's settings set them; the pool keeps taking
    snapshots). The metric rules read the evaluations a ``callbacks.PolicyEvaluation`` publishes in
    ``trainer.callback_metrics`` (each new one told by its ``eval/frames``), keeping the phase's values in a
    window of their own (in the checkpoint); an evaluation without the rule's metric stops the run, naming the
    metrics it has (as Lightning's ``EarlyStopping(strict=True)`` does).

    On a transition every env of the run gets the new settings at once (an env may apply them from each
    row's next reset, as the hockey env does, so no episode mixes two phases), the replay buffer is
    emptied (the data module's ``clear_replay``) when the new phase has ``clear_buffer: true``, and
    ``schedule/curriculum_phase`` (the index) is logged.
    The phase and the frame it began at are in the checkpoint; a resumed run re-applies its phase's
    settings. Under DDP rank 0 decides (it alone evaluates) and the decision is broadcast.

    Args:
        phases: a list of ``{name, settings: {...}, until: {...}, clear_buffer: bool, self_play: bool}``.

    Raises:
        ValueError: an empty list, a duplicate name, an unknown key or rule (the message names
            ``phases[i].<key>``); at the start of training, ``clear_buffer`` without a replay buffer, a metric rule
            without a ``PolicyEvaluation`` callback or ``self_play`` without a ``SelfPlay`` callback; in training, an
            evaluation without the rule's metric.
    """

    def __init__(self, phases: list[dict[str, Any]]) -> None:
        if not phases:
            raise ValueError("CurriculumPhases.phases must list at least one phase")
        names = set()
        for i, phase in enumerate(phases):
            unknown = set(phase) - _PHASE_KEYS
            if unknown:
                raise _phase_error(i, sorted(unknown)[0], phase[sorted(unknown)[0]], f"keys are {sorted(_PHASE_KEYS)}")
            name = phase.get("name")
            if not isinstance(name, str) or not name or name in names:
                raise _phase_error(i, "name", name, "a non-empty name, unique among the phases")
            names.add(name)
            if not isinstance(phase.get("settings", {}), dict):
                raise _phase_error(i, "settings", phase.get("settings"), "a mapping of env settings")
            until = phase.get("until")
            if until is None:
                continue
            if set(until) == {"frames"}:
                if not isinstance(until["frames"], int) or until["frames"] < 1:
                    raise _phase_error(i, "until", until, "{frames: N} with N >= 1")
            elif set(until) == {"metric", "at_least", "evaluations"}:
                if not isinstance(until["evaluations"], int) or until["evaluations"] < 1:
                    raise _phase_error(i, "until", until, "evaluations >= 1")
            else:
                raise _phase_error(i, "until", until, "{frames: N} or {metric: KEY, at_least: X, evaluations: n}")
        self.phases = [dict(p) for p in phases]
        self.phase = 0
        self.phase_start = 0  # collected frames when the phase began
        self.window: list[float] = []  # the rule's metric at each evaluation of the phase read so far
        self._read_frames: float | None = None  # eval/frames of the last evaluation read

    @property
    def name(self) -> str:
        return self.phases[self.phase]["name"]

    def state_dict(self) -> dict:
        return {"phase": self.phase, "phase_start": self.phase_start, "window": self.window,
                "read_frames": self._read_frames}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`, checked.

        Raises:
            RestoredStateError: a phase that is no phase of this config, a negative start, a window of other than
                finite numbers (names the entry)."""
        state = restored_mapping(state_dict, "CurriculumPhases", ("phase", "phase_start"))
        self.phase = restored_number(state["phase"], "CurriculumPhases.phase", low=0, high=len(self.phases))
        self.phase_start = restored_number(state["phase_start"], "CurriculumPhases.phase_start", low=0)
        window = state.get("window", [])
        if not isinstance(window, list):
            raise RestoredStateError("CurriculumPhases.window is not a list of numbers")
        self.window = [float(restored_number(v, "CurriculumPhases.window", integer=False)) for v in window]
        read = state.get("read_frames")
        self._read_frames = None if read is None else restored_number(read, "CurriculumPhases.read_frames",
                                                                     integer=False, low=0)
        legacy = getattr(self, "_legacy_history", None)
        until = self.phases[self.phase].get("until") or {} if self.phase < len(self.phases) else {}
        if "window" not in state_dict and legacy and "metric" in until:  # as its rule read them then
            read = [h for h in legacy if h["frames"] > self.phase_start and until["metric"] in h]
            self.window = [float(h[until["metric"]]) for h in read]
            self._read_frames = read[-1]["frames"] if read else None

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A checkpoint written before the window was the callback's keeps the evaluations in the module's state
        (``rl_state.evaluations``): kept here for :meth:`load_state_dict` (called next) to fill the window."""
        self._legacy_history = (checkpoint.get("rl_state") or {}).get("evaluations", [])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if any(p.get("clear_buffer") for p in self.phases) and not hasattr(trainer.datamodule, "clear_replay"):
            raise ValueError("CurriculumPhases: clear_buffer needs an off-policy data module (a replay buffer)")
        if any("metric" in (p.get("until") or {}) for p in self.phases[:-1]) and not _has(trainer, PolicyEvaluation):
            raise ValueError("CurriculumPhases: a metric rule needs a callbacks.PolicyEvaluation in trainer.callbacks")
        if any(p.get("self_play") for p in self.phases) and not _has(trainer, SelfPlay):
            raise ValueError("CurriculumPhases: self_play needs a callbacks.SelfPlay in trainer.callbacks")
        self._apply(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self.phase + 1 >= len(self.phases):
            return
        advance = trainer.strategy.broadcast(self._rule_met(trainer, pl_module), src=0)
        if advance:
            self.phase += 1
            self.phase_start = pl_module.collected_frames
            self.window = []
            if self.phases[self.phase].get("clear_buffer"):
                trainer.datamodule.clear_replay()
            self._apply(trainer, pl_module)

    # ------------------------------------------------------------------ internals
    def _rule_met(self, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        until = self.phases[self.phase].get("until")
        if until is None:
            return False
        if "frames" in until:
            return pl_module.collected_frames - self.phase_start >= until["frames"]
        self._read_evaluation(trainer, until["metric"])
        if len(self.window) < until["evaluations"]:
            return False
        recent = self.window[-until["evaluations"]:]
        return sum(recent) / len(recent) >= until["at_least"]

    def _read_evaluation(self, trainer: L.Trainer, metric: str) -> None:
        """Add the rule's metric of an evaluation published since the last read (and in this phase) to the window.

        Raises:
            ValueError: the evaluation has no such metric (names the ones it has).
        """
        frames = new_evaluation(trainer, self._read_frames)
        if frames is None or frames <= self.phase_start:
            return
        self._read_frames = frames
        published = trainer.callback_metrics
        if metric not in published:
            have = sorted(k for k in published if k.startswith("eval/") and k != "eval/frames")
            raise ValueError(f"CurriculumPhases.phases[{self.phase}].until.metric={metric!r}: the evaluation at "
                             f"{int(frames):,} frames has no such metric; it has {', '.join(have) or 'none'}")
        self.window.append(float(published[metric]))

    def _apply(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        settings = self.phases[self.phase].get("settings") or {}
        if settings:
            trainer.datamodule.configure_env(settings)
        for self_play in (c for c in trainer.callbacks if isinstance(c, SelfPlay)):
            self_play.set_active(bool(self.phases[self.phase].get("self_play", False)))
        for logger in pl_module.loggers:
            logger.log_metrics({"schedule/curriculum_phase": float(self.phase)}, step=pl_module.collected_frames)
        log.info("curriculum phase %d (%s) from %d frames", self.phase, self.name, pl_module.collected_frames)
