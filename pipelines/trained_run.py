"""A trained run loaded to be played, on any device and whatever it trained on: its fit configs set to play here
(:data:`PLAY_HERE`), its checkpoint checked as ``pipelines.fit --ckpt_path`` checks it (the env may differ), its
weights and its learned env model loaded (``pipelines.evaluate``, benchmarks)."""

from __future__ import annotations

import os
import sys

from jsonargparse import Namespace

from modules.base import RLModule
from pipelines.checkpoints import MODEL_KEYS, run_configs
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from pipelines.parser import config_exit
from pipelines.trained_weights import load_env_models, load_weights, read_checkpoint

# what a config's data module and trainer get for playing episodes here: the collector and trainer options meant
# for the training's hardware (rollout workers, Ray, a compiled or CUDA-graph collector policy, GPUs, DDP) play
# no part in evaluation, which steps its own envs with the policy in this process
PLAY_HERE = {"data": {"collector": {"workers": 0, "mode": "sync", "ray": None, "compile_policy": False,
                                    "cudagraph_policy": False}},
             "trainer": {"accelerator": "cpu", "devices": 1, "strategy": "auto", "num_nodes": 1, "precision": None}}


class _EvaluationCLI(FitCLI):
    """Fit's CLI for an evaluation: the checkpoint must share the model and networks only (the env may differ),
    and the config is set to play on ``device`` (:data:`PLAY_HERE`, ``data.device``) before anything is built."""

    checkpoint_keys = MODEL_KEYS  # the same model and networks; the env may differ (other instances, sizes)
    trains = False  # the checkpoint is played, not continued

    def __init__(self, *args, device: str = "cpu", **kwargs) -> None:
        self.play_device = device
        super().__init__(*args, **kwargs)

    def before_instantiate_classes(self) -> None:
        data = (self.config.get("data") or Namespace()).get("init_args") or Namespace()
        trainer = self.config.get("trainer") or Namespace()
        for node, values in ((data, {**PLAY_HERE["data"], "device": self.play_device}),
                             (trainer, PLAY_HERE["trainer"])):
            _set_present(node, values)
        super().before_instantiate_classes()


def _set_present(node: Namespace, values: dict) -> None:
    """Set ``values`` (nested dicts for sections) in ``node`` where its config has the key (the keys a data module
    has: ``EpisodeDataModule`` has no collector)."""
    for key, value in values.items():
        if key in node and isinstance(value, dict):
            _set_present(node[key], value)
        elif key in node:
            node[key] = value


def load_run(configs: str | list[str] | None, ckpt_path: str, overrides: list[str],
             device: str = "cpu") -> tuple[RLModule, RLDataModule]:
    """Build model and data module from fit configs (later ones override earlier ones, then the dotted
    overrides; None: the run's own, :func:`pipelines.checkpoints.run_configs`), set to play on ``device``
    (:data:`PLAY_HERE`), and load the checkpoint: the weights and the env models trained during the run (the data
    module's ``trained_env_models``, e.g. the DVRP flexibility model), nothing else of the training's state (the
    envs' resume positions, which are the training's and fit only its ``num_envs``). The checkpoint is checked as
    ``pipelines.fit --ckpt_path`` checks it, before anything is built, except that the env may differ from the one
    it was trained on.

    Returns:
        The module (eval mode, on ``device``) and the data module (its env on ``device``).

    Raises:
        FileNotFoundError: a config or the checkpoint does not exist.
        SystemExit: 2, for a checkpoint that is unreadable, was trained with another config, has weights or an env
            model that do not fit this config's, or (without ``configs``) has no config beside it or in it (one
            message).
    """
    if configs is None:
        try:
            configs, source = run_configs(ckpt_path)
        except ValueError as err:
            config_exit(err)
        print(f"config: {source}", file=sys.stderr)
    configs = [configs] if isinstance(configs, str) else list(configs)
    for path, what in [*((c, "config") for c in configs if "\n" not in c), (ckpt_path, "checkpoint")]:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{what} not found: {path!r}")
    cli = _EvaluationCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, device=device,
                 args=[*(a for c in configs for a in ("--config", c)), f"--ckpt_path={ckpt_path}",  # checked first
                       "--trainer.logger=false",
                       "--trainer.enable_checkpointing=false", "--trainer.callbacks=[]", *overrides])
    model, data = cli.model, cli.datamodule
    data.setup("validate")
    model.build_on(data.env_specs())  # (specs on the CPU: the module moves to the device once loaded)
    try:  # (tensors and plain data only)
        checkpoint = read_checkpoint(ckpt_path, "--ckpt_path")
        load_weights(model, checkpoint, ckpt_path, "--ckpt_path")
        load_env_models(data, checkpoint, ckpt_path, "--ckpt_path")
    except ValueError as err:
        config_exit(err)
    model.to(device)
    model.eval()
    return model, data


def run_name(ckpt_path: str) -> str:
    """A checkpoint's run, for a table label: ``<name>/<version>`` of ``<name>/<version>/checkpoints/x.ckpt``."""
    parts = os.path.abspath(ckpt_path).split(os.sep)
    return "/".join(parts[-4:-2]) if len(parts) > 3 and parts[-2] == "checkpoints" else os.path.basename(ckpt_path)
