"""Config keys renamed to the field's terms. A config (file, command line or a run's saved ``config.yaml``) that
still uses an old name stops before any work with one line naming the new one (:func:`pipelines.parser.one_line`),
instead of jsonargparse's "no such key".

Keyed by the class's name (its class path may be written short, ``callbacks.EpsilonDecay``, or long,
``callbacks.epsilon.EpsilonDecay``).
"""

from __future__ import annotations

RENAMED_KEYS: dict[str, dict[str, str]] = {
    # TorchRL's and the RL Zoo's term for the frames of a linear schedule
    "EpsilonDecay": {"decay_frames": "annealing_frames"},
    # TorchRL's MultiStepTransform(n_steps) and SB3's n_steps
    "DQNModule": {"n_step": "n_steps"},
    # one name for "every N frames" (PolicyEvaluation, SelfPlay, EmbeddingUpdate use it too)
    "REINFORCEModule": {"eval_interval_frames": "every_n_frames"},
}


def renamed_key(class_path: str, key: str) -> str | None:
    """The new name of ``key`` of the class at ``class_path``, or None when it was not renamed."""
    return RENAMED_KEYS.get(class_path.rpartition(".")[2], {}).get(key)
