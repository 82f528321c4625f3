"""Config keys renamed to the field's terms or moved to the object they configure, and classes renamed. A config
(file or command line) that still uses an old key or class path stops before any work with one line naming the new
one (:func:`pipelines.parser.one_line`),
instead of jsonargparse's "no such key". A config recorded by an older run (its ``config.yaml``, or the copy in a
checkpoint), which its user cannot be asked to edit, is brought to the new keys by :func:`upgrade_config` when a
checkpoint is played (``pipelines.evaluate``, ``pipelines.export``).

Keyed by the class's name (its class path may be written short, ``callbacks.EpsilonDecay``, or long,
``callbacks.epsilon.EpsilonDecay``). A new name with a dot is a move: relative to the class's own keys
(``collector.num_envs``), or from the config's root (``model.init_args.ppo_epochs``).
"""

from __future__ import annotations

import copy

# the collector's and the replay buffer's keys, each in its own object since the data modules took them as sections
_COLLECTOR = {key: f"collector.{key}" for key in ("num_envs", "frames_per_batch", "workers", "worker_timeout_s", "ray",
                                                   "compile_policy", "cudagraph_policy")}
_REPLAY = {key: f"replay_buffer.{key}" for key in ("buffer_size", "batch_size", "utd_ratio", "init_random_frames",
                                                    "storage", "scratch_dir", "prioritized", "priority_alpha",
                                                    "priority_beta")}
_PPO_EPOCHS = {key: f"model.init_args.{key}" for key in ("ppo_epochs", "mini_batch_size")}  # SB3 keeps them on PPO

RENAMED_KEYS: dict[str, dict[str, str]] = {
    # TorchRL's and the RL Zoo's term for the frames of a linear schedule
    "EpsilonDecay": {"decay_frames": "annealing_frames"},
    # TorchRL's MultiStepTransform(n_steps) and SB3's n_steps
    "DQNModule": {"n_step": "n_steps"},
    # one name for "every N frames" (PolicyEvaluation, SelfPlay, FlexibilityUpdate use it too)
    "REINFORCEModule": {"eval_interval_frames": "every_n_frames"},
    # one object per RL concern: the collector's options, the replay buffer's, PPO's epochs on the PPO module
    "OnPolicyDataModule": {**_COLLECTOR, **_PPO_EPOCHS},
    "OffPolicyDataModule": {**_COLLECTOR, **_REPLAY},
}

# classes renamed (by class name) or moved (by their old class path): the new class path
RENAMED_CLASSES: dict[str, str] = {
    # what it retrains is the DVRP config's flexibility model (modules.flexibility.FlexibilityModel)
    "EmbeddingUpdate": "callbacks.FlexibilityUpdate",
    # one class path per class, the defining module's (as --help lists it): no re-export in modules.dqn
    "modules.dqn.QNetwork": "modules.q_networks.QNetwork",
    "modules.dqn.MultiAgentQNetwork": "modules.q_networks.MultiAgentQNetwork",
}

# keys of a nested class that its owner now gives when it builds it (the arguments of a ``Callable[[...], Class]``
# key), so that the two cannot disagree: owner class -> {its key: {the nested class's key: what gives it}}
GIVEN_KEYS: dict[str, dict[str, dict[str, str]]] = {
    "DVRPConfig": {"flexibility": {"num_types": "K, the length of env.type_mix",
                                   "num_attributes": "K, the length of env.type_mix (a customer has K attributes)"}},
}

# an old key that still exists with another meaning: the old value's kind -> where that value goes now
RETYPED_KEYS: dict[str, dict[str, str]] = {
    "OnPolicyDataModule": {"collector": "collector.mode"},
    "OffPolicyDataModule": {"collector": "collector.mode"},
}


def renamed_key(class_path: str, key: str) -> str | None:
    """The new name of ``key`` of the class at ``class_path``, or None when it was not renamed."""
    return RENAMED_KEYS.get(class_path.rpartition(".")[2], {}).get(key)


def renamed_class(class_path: str) -> str | None:
    """The new class path of the class at ``class_path`` (short or long), or None when it was not renamed."""
    path = str(class_path)
    return RENAMED_CLASSES.get(path) or RENAMED_CLASSES.get(path.rpartition(".")[2])


def retyped_key(class_path: str, key: str) -> str | None:
    """Where an old-style value of ``key`` (e.g. ``collector: async``) goes now, relative to the class's keys, or
    None."""
    return RETYPED_KEYS.get(class_path.rpartition(".")[2], {}).get(key)


def given_key(class_path: str, key: str, nested_key: str) -> str | None:
    """What now gives ``nested_key`` of the class at ``key`` of the class at ``class_path``, or None when the config
    still sets it."""
    return GIVEN_KEYS.get(class_path.rpartition(".")[2], {}).get(key, {}).get(nested_key)


def new_place(path: list[str], new: str) -> str:
    """Where the renamed key at ``path`` (its parent's keys, e.g. ``["data", "init_args"]``) is now, in full."""
    return new if _absolute(new) else ".".join([*path, new])


def _absolute(new: str) -> bool:
    return "." in new and new.split(".")[0] in ("model", "data", "trainer")


def upgrade_config(config: dict) -> tuple[dict, list[str]]:
    """``config`` (a resolved fit config as plain data) with every renamed class path and key of its ``model``,
    ``data`` and callback entries put where it is now, and what was moved (``old -> new``, empty when nothing was).

    A key whose new place is already set is left where it is, for the parser to refuse.
    """
    config, moved = copy.deepcopy(config), []
    for where, entry in _class_entries(config):  # every class_path, at any depth (e.g. a module's network)
        if renamed_class(entry["class_path"]):
            moved.append(f"{where}.class_path {entry['class_path']} -> {renamed_class(entry['class_path'])}")
            entry["class_path"] = renamed_class(entry["class_path"])
    callbacks = (config.get("trainer") or {}).get("callbacks") if isinstance(config.get("trainer"), dict) else None
    entries = [(section, config.get(section)) for section in ("model", "data")]
    data_args = (config.get("data") or {}).get("init_args") if isinstance(config.get("data"), dict) else None
    if isinstance(data_args, dict):
        entries.append(("data.init_args.env", data_args.get("env")))
    entries += [(f"trainer.callbacks.{i}", c) for i, c in enumerate(callbacks if isinstance(callbacks, list) else [])]
    for where, entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("init_args"), dict):
            continue
        name, init = str(entry.get("class_path", "")).rpartition(".")[2], entry["init_args"]
        for old, new in RETYPED_KEYS.get(name, {}).items():
            if isinstance(init.get(old), str):  # e.g. collector: async -> collector: {mode: async}
                section, leaf = new.split(".")
                init[section] = {leaf: init.pop(old)}
                moved.append(f"{where}.init_args.{old} -> {where}.init_args.{new}")
        for old, new in RENAMED_KEYS.get(name, {}).items():
            if old in init and _move(config if _absolute(new) else init, new, init, old):
                moved.append(f"{where}.init_args.{old} -> {new_place([where, 'init_args'], new)}")
        for key, given in GIVEN_KEYS.get(name, {}).items():
            nested = (init.get(key) or {}).get("init_args") if isinstance(init.get(key), dict) else None
            for old in given if isinstance(nested, dict) else ():
                if nested.pop(old, None) is not None:
                    moved.append(f"{where}.init_args.{key}.init_args.{old} -> removed (given: {given[old]})")
    return config, moved


def _move(root: dict, target: str, init: dict, old: str) -> bool:
    """Move ``init[old]`` to the dotted ``target`` under ``root`` (made where missing), unless ``target`` is set
    or a value other than a mapping is in its way; whether it moved."""
    *parents, leaf = target.split(".")
    node = root
    for key in parents:
        if not isinstance(node.get(key, {}), dict):
            return False
        node = node.setdefault(key, {})
    if leaf in node:
        return False
    node[leaf] = init.pop(old)
    return True


def _class_entries(node: object, where: str = "") -> list[tuple[str, dict]]:
    """Every mapping with a string ``class_path`` under ``node``, with its dotted place (list entries by index)."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("class_path"), str):
            found.append((where, node))
        for key, value in node.items():
            found += _class_entries(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _class_entries(value, f"{where}.{i}")
    return found
