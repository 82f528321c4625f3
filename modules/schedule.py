"""The one "every N frames" rule of every schedule: evaluations, snapshots and model updates, on the collected-frame
counter."""

from __future__ import annotations

from envs.restored import restored_mapping, restored_number


class FrameSchedule:
    """Due once each time the collected-frame counter reaches the next multiple of ``every_n_frames`` (a batch
    that crosses several multiples makes it due once). It reads the checkpointed frame counter it is given,
    so a resumed run keeps the schedule (its state: ``next_frames``).

    Args:
        every_n_frames: the interval, in collected frames (all ranks).

    Raises:
        ValueError: ``every_n_frames < 1``.
    """

    def __init__(self, every_n_frames: int) -> None:
        if every_n_frames < 1:
            raise ValueError(f"every_n_frames must be >= 1, got {every_n_frames}")
        self.every_n_frames = every_n_frames
        self.next_frames = every_n_frames

    def due(self, frames: int) -> bool:
        """Whether ``frames`` reached the next multiple; if so the schedule moves past ``frames``."""
        if frames < self.next_frames:
            return False
        while self.next_frames <= frames:
            self.next_frames += self.every_n_frames
        return True

    def state_dict(self) -> dict:
        return {"next_frames": self.next_frames}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            RestoredStateError: ``next_frames`` is not a positive integer (at most 2**53: no run reaches more)."""
        state = restored_mapping(state_dict, "schedule state", ("next_frames",))
        self.next_frames = restored_number(state["next_frames"], "schedule state.next_frames", low=1, high=2**53)
