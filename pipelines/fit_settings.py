"""The settings a ``pipelines.fit`` command line runs with, resolved by its own parser without building anything
(:func:`fit_settings`): what tells two runs' settings apart for ``pipelines.seeds`` and ``pipelines.tune``."""

from __future__ import annotations

import argparse
import json

from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from pipelines.parser import one_line
from pipelines.run_folder import plain_config


class _ParseOnlyCLI(FitCLI):
    """``pipelines.fit``'s command line, parsed and checked by its own parser (every key, type and class path),
    with nothing seeded, built or written."""

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


def fit_settings(args: list[str], drop: tuple[str, ...] = ()) -> dict:
    """The settings ``pipelines.fit <args>`` runs with, resolved by its own parser without building anything: the
    config files' contents merged, the overrides applied and every default filled in, as plain data (what the run's
    ``config.yaml`` holds before ``pipelines.fit`` adds its per-run entries), less the dotted keys in ``drop``.

    This is what tells two runs' settings apart, rather than the config files' text or the ``config.yaml`` a fit
    writes: two spellings of one setting (``--model.lr=0.001`` and ``--model.init_args.lr=1.0e-3``, a value written
    in the file or left to its default) resolve the same; a changed config file's content counts (not its path),
    and so does a changed default in the code; and the new settings are known before any fit starts (a fit's
    ``config.yaml`` also holds what it adds per run: seeds shared from ``seed_everything``, its output folders).

    Raises:
        ValueError: the fit's parser refused ``args`` (one line naming the key), or a config file it refused.
    """
    try:
        cli = _ParseOnlyCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                            auto_configure_optimizers=False, args=list(args),
                            parser_kwargs={"exit_on_error": False})
    except argparse.ArgumentError as err:
        raise ValueError(one_line(str(err)) or " ".join(str(err).split())) from None
    settings = plain_config(cli.parser, cli.config)
    for key in drop:
        *parents, last = key.split(".")
        node = settings
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.loads(json.dumps(settings))  # as a settings.json file gives it back
