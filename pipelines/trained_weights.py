"""A trained checkpoint's weights put into a run's objects: the module's weights and the env models the checkpoint's
run trained (e.g. the DVRP flexibility model), each checked before it is loaded. Used to play a trained run
(:mod:`pipelines.trained_run`) and to start a new run from one (``pipelines.fit --weights_from``: fine-tuning, as RL
Zoo's ``--trained-agent``). A checkpoint is read as tensors and plain data (``weights_only=True``), never run."""

from __future__ import annotations

import copy

import lightning as L
import torch

from envs.factory import EnvSpecs
from envs.restored import RestoredStateError
from modules.base import RLModule
from modules.checks import check_loaded_weights, keep_config_values
from pipelines.checkpoints import weights_mismatch
from pipelines.compatibility import random_states_kept
from pipelines.data import RLDataModule
from pipelines.data.base import trained_env_model_states


def read_checkpoint(path: str, option: str) -> dict:
    """``path``'s checkpoint, as tensors and plain data.

    Raises:
        ValueError: no such file, a file torch cannot read so, or one without a ``state_dict`` mapping (the message
            names ``option``, the command's option that gave the file).
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"{option}={path!r}: no such file") from None
    except Exception as err:  # (pickle, zip and unpickler errors of every kind)
        raise ValueError(f"{option}={path!r} is not a checkpoint this project can read: "
                         f"{' '.join(str(err).split())[:200]}") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ValueError(f"{option}={path!r} holds no state_dict (not a checkpoint of pipelines.fit)")
    return checkpoint


def load_weights(model: RLModule, checkpoint: dict, path: str, option: str) -> None:
    """Load the checkpoint's ``state_dict`` into ``model`` (shaped already), after checking it
    (:func:`modules.checks.check_loaded_weights`).

    Raises:
        ValueError: a weight that is not a finite tensor of the module's dtype, or weights of other shapes or names
            than the module's (the message names ``option``, the file and the first mismatch).
    """
    try:
        check_loaded_weights(checkpoint["state_dict"], model)
        model.load_state_dict(checkpoint["state_dict"])
    except RestoredStateError as err:
        raise ValueError(f"{option}={path!r}: {err}") from None
    except RuntimeError as err:
        mismatch = weights_mismatch(err, path, option)
        if mismatch is None:
            raise
        raise mismatch from None


def load_env_models(data: RLDataModule, checkpoint: dict, path: str, option: str) -> None:
    """Load the weights of the env models the checkpoint's run trained (e.g. the DVRP flexibility model) into the
    data module's (``data.env_models``, shared by every env it builds).

    Raises:
        ValueError: a model the config's env has not, or one of other shapes or not finite (one message naming
            ``option`` and the file).
    """
    state = checkpoint.get(type(data).__qualname__) or {}
    try:
        weights = trained_env_model_states(state, data.trained_env_models)
    except RestoredStateError as err:
        raise ValueError(f"{option}={path!r}: {err}") from None
    for name, model_weights in weights.items():
        if name not in data.trained_env_models:
            raise ValueError(f"{option}={path!r} has a learned env model {name!r} but this config's env trains "
                             f"{list(data.trained_env_models) or 'none'} (was it trained with another env config?)")
        try:
            data.restore_env_model(name, model_weights)
        except RestoredStateError as err:
            raise ValueError(f"{option}={path!r}: {err} (was it trained with another env config?)") from None


def initial_weights(model: RLModule, data: RLDataModule, path: str, specs: EnvSpecs | None) -> dict:
    """For ``pipelines.fit --weights_from``, before anything is written: the weights of ``path`` checked against
    ``model`` shaped on ``specs`` (a copy of it, so ``model`` is shaped by the run as any other, the random streams
    untouched), the module's own settings kept in place of the file's (:func:`modules.checks.keep_config_values`:
    ``gamma``, ``clip_epsilon``), and the trained env models loaded into ``data`` now. Every weight comes from the
    file: the policy, the critic, a target network, an observation normaliser.

    Returns:
        The module's ``state_dict`` to load when the fit starts (:class:`InitialWeights`).

    Raises:
        ValueError: what :func:`read_checkpoint`, :func:`load_weights` and :func:`load_env_models` raise.
    """
    option = "--weights_from"
    checkpoint = read_checkpoint(path, option)
    with random_states_kept():
        shaped = copy.deepcopy(model)
        if specs is not None:
            with torch.device("cpu"):
                shaped.build_on(specs)
        keep_config_values(checkpoint["state_dict"], shaped)
        load_weights(shaped, checkpoint, path, option)
    load_env_models(data, checkpoint, path, option)
    return shaped.state_dict()


class InitialWeights(L.Callback):
    """Loads a new run's initial weights (:func:`initial_weights`) into the module when the fit starts: after
    Lightning shaped the networks and built the optimisers on them (a copy into the same parameters), before the
    first collection.

    Args:
        state_dict: the module's weights, checked.
    """

    def __init__(self, state_dict: dict) -> None:
        self.state_dict_to_load = state_dict

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.load_state_dict(self.state_dict_to_load)
