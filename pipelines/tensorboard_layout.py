"""What a run writes to TensorBoard once, at its start: the resolved config's hyper-parameters (HPARAMS tab: the
model's, the data pipeline's and the env's settings, and the seed), and a custom-scalars layout that puts each
reference line in its metric's chart (the training return beside the evaluation return, the Bayes classifier's
accuracy beside the embedding model's, the greedy baseline's cost beside the sampled one's).

Charts come from the module and the callbacks: each may define ``chart_groups() -> {title: [tag, ...]}``."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger

from callbacks.compat import add_summary

SKIPPED = {"device", "worker_timeout_s", "scratch_dir", "instances", "oracle_checkpoint"}  # not hyper-parameters


def hyperparameters(config: dict) -> dict[str, Any]:
    """The flat ``{name: scalar}`` of a resolved config (plain data, as ``config.yaml``): ``seed``, ``model.<arg>``
    (``model.network.<arg>`` for the network's), ``data.<arg>``, ``env.<arg>`` and the three classes' names. Lists
    and other values become strings; None and settings that are not hyper-parameters (devices, paths) are left out.
    """
    flat: dict[str, Any] = {"seed": config.get("seed_everything")}
    model, data = config.get("model") or {}, config.get("data") or {}
    env = (data.get("init_args") or {}).get("env") or {}
    for prefix, section in (("model", model), ("data", data), ("env", env)):
        if not isinstance(section, dict):
            continue
        flat[f"{prefix}.class"] = str(section.get("class_path", "")).rpartition(".")[2]
        _flatten(flat, prefix, {k: v for k, v in (section.get("init_args") or {}).items()
                                if not (prefix == "data" and k == "env")})
    return {k: v for k, v in flat.items() if v is not None}


def _flatten(into: dict, prefix: str, values: dict) -> None:
    for key, value in values.items():
        if key in SKIPPED or value is None:
            continue
        if isinstance(value, dict) and "class_path" in value:  # a nested object (a network)
            into[f"{prefix}.{key}"] = str(value["class_path"]).rpartition(".")[2]
            _flatten(into, f"{prefix}.{key}", value.get("init_args") or {})
        elif isinstance(value, dict):
            _flatten(into, f"{prefix}.{key}", value)
        else:
            into[f"{prefix}.{key}"] = value if isinstance(value, (bool, int, float, str)) else str(value)


def chart_groups(trainer) -> dict[str, list[str]]:
    """``{title: [tags]}`` of the module's and every callback's ``chart_groups()``."""
    groups: dict[str, list[str]] = {}
    for source in [trainer.lightning_module, *trainer.callbacks]:
        found = getattr(source, "chart_groups", None)
        for title, tags in (found() if callable(found) else {}).items():
            groups.setdefault(title, [])
            groups[title] += [t for t in tags if t not in groups[title]]
    return groups


def write_run_header(trainer, config: dict, metrics: list[str]) -> None:
    """Write the HPARAMS (with ``metrics`` as the table's metric columns, read from their scalars; nothing is
    logged under them here) and the custom-scalars layout to every TensorBoard logger of ``trainer``."""
    from torch.utils.tensorboard.summary import hparams

    params = hyperparameters(config)
    groups = chart_groups(trainer)
    for logger in trainer.loggers:
        if not isinstance(logger, TensorBoardLogger):
            continue
        writer = logger.experiment
        for summary in hparams(params, {m: 0.0 for m in metrics}):
            add_summary(writer, summary)
        if groups:
            writer.add_custom_scalars({"metric and references": {t: ["Multiline", tags] for t, tags in groups.items()}})
