"""One loading policy for every path that builds an object from a file: a checkpoint's hyper-parameters may name
only what the import policy allows, at any depth (a network's ``activation_class``, a hook, an alias of a loader,
Lightning's ``_instantiator``), through ``RLModule.load_from_checkpoint`` (the README's Python snippet) and
``pipelines.export`` alike; the routing-policy loader builds only a ``modules`` class defined there, from plain
arguments, and refuses sizes its weights do not have before taking any memory. No payload ever runs."""

from __future__ import annotations

import copy
import os
import pathlib

import pytest
import torch

from modules.base import RLModule
from modules.compat import import_path_settings, set_import_path_settings
from modules.import_policy import check_named_objects, enforced
from modules.routing import RoutingPolicy
from pipelines.env_models import load_exported_model
from tests.pipelines.conftest import REPO, run_module

CARTPOLE = str(REPO / "configs" / "cartpole_dqn.yaml")


@pytest.fixture(scope="module")
def dqn_checkpoint(tmp_path_factory) -> str:
    """A tiny CartPole DQN run's ``last.ckpt`` (trained by pipelines.fit in a subprocess)."""
    out = tmp_path_factory.mktemp("dqn")
    proc = run_module("pipelines.fit", "--config", CARTPOLE, "--data.init_args.total_frames=512",
                      "--data.init_args.replay_buffer.init_random_frames=128", "--trainer.enable_progress_bar=false",
                      "--model.init_args.network.init_args.hidden_dims=[16]", f"--trainer.default_root_dir={out}",
                      timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(out / "runs" / "cartpole_dqn" / "version_0" / "checkpoints" / "last.ckpt")


def _network(class_path: str, **init_args) -> dict:
    return {"class_path": class_path, "init_args": init_args}


def _touch(marker: pathlib.Path) -> dict:
    return {"command": f"touch {marker}"}


# (name, how the hyper-parameters are edited given the marker file, the key the refusal names)
CASES = [
    ("issue: torchrl MLP calling os.system",
     lambda m: {"network": _network("torchrl.modules.models.models.MLP", in_features=4, out_features=2, num_cells=[8],
                                    activation_class="os.system", activation_kwargs=_touch(m))},
     "hyper_parameters.network.class_path"),
    ("an allowed class whose callable argument is os.system",
     lambda m: {"network": _network("torch.nn.TransformerEncoderLayer", d_model=4, nhead=1, activation="os.system")},
     "hyper_parameters.network.init_args.activation"),
    ("an allowed module's alias of torch.load",
     lambda m: {"network": _network("torch.nn.TransformerEncoderLayer", d_model=4, nhead=1,
                                    activation="torch.nn.modules.module.torch.load")},
     "hyper_parameters.network.init_args.activation"),
    ("a Lightning callback's hook naming exec",
     lambda m: {"network": _network("lightning.pytorch.callbacks.LambdaCallback", on_fit_start="builtins.exec")},
     "hyper_parameters.network.init_args.on_fit_start"),
    ("a subprocess class as a network",
     lambda m: {"network": _network("subprocess.Popen", args=["touch", str(m)])},
     "hyper_parameters.network.class_path"),
    ("a module argument naming a callable",
     lambda m: {"loss_function": "os.system"}, "hyper_parameters.loss_function"),
    ("another instantiator than Lightning's",
     lambda m: {"_instantiator": "os.system"}, "hyper_parameters._instantiator"),
    ("the module class itself",
     lambda m: {"_class_path": "subprocess.Popen"}, "hyper_parameters._class_path"),
    ("a class path inside a list",
     lambda m: {"in_keys": [{"class_path": "os.system", "init_args": _touch(m)}]},
     "hyper_parameters.in_keys[0].class_path"),
    ("an allowed function as the class path of a callable argument (jsonargparse called it with the file's "
     "arguments: it ran the command)",
     lambda m: {"network": _network("torch.nn.TransformerEncoderLayer", d_model=4, nhead=1,
                                    activation=_network("pipelines.import_roms._run", command=["touch", str(m)]))},
     "hyper_parameters.network.init_args.activation.class_path"),
    ("an allowed function as a network's class path",
     lambda m: {"network": _network("pipelines.seeds.main", argv=["--help"])}, "hyper_parameters.network.class_path"),
    ("an allowed function named as a callable",
     lambda m: {"network": _network("torch.nn.TransformerEncoderLayer", d_model=4, nhead=1,
                                    activation="pipelines.import_roms._run")},
     "hyper_parameters.network.init_args.activation"),
    ("a name padded with spaces",
     lambda m: {"network": _network("torch.nn.TransformerEncoderLayer", d_model=4, nhead=1, activation=" os.system")},
     "hyper_parameters.network.init_args.activation"),
    ("an allowed module's alias of a loader's method",
     lambda m: {"network": _network("lightning.pytorch.plugins.io.torch_plugin.TorchCheckpointIO.load_checkpoint",
                                    path=str(m), weights_only=False)},
     "hyper_parameters.network.class_path"),
]


def _hostile(source: str, tmp_path: pathlib.Path, edit) -> tuple[str, pathlib.Path]:
    marker = tmp_path / "MARKER"
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"].update(edit(marker))
    path = tmp_path / "hostile.ckpt"
    torch.save(checkpoint, path)
    return str(path), marker


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_load_from_checkpoint_refuses_every_named_object_outside_the_policy(dqn_checkpoint, tmp_path, case):
    """The README's ``RLModule.load_from_checkpoint``: one ValueError naming the file and the key, nothing built or
    run, and the process's own jsonargparse settings left as they were."""
    _, edit, key = case
    path, marker = _hostile(dqn_checkpoint, tmp_path, edit)
    before = import_path_settings()
    with pytest.raises(ValueError) as refused:
        RLModule.load_from_checkpoint(path)
    message = str(refused.value)
    assert path in message and f"{key}=" in message and "is not allowed" in message, message
    assert not marker.exists()
    assert import_path_settings() == before


def test_the_policy_holds_while_building_even_past_the_name_check(dqn_checkpoint, tmp_path, monkeypatch):
    """With the check of names switched off, jsonargparse still refuses the payload while Lightning builds from the
    hyper-parameters (the policy is enforced during the build), and the settings are restored after."""
    monkeypatch.setattr("modules.loading.check_named_objects", lambda tree, where: None)
    path, marker = _hostile(dqn_checkpoint, tmp_path, CASES[0][1])
    before = import_path_settings()
    with pytest.raises(ValueError, match="not allowed"):
        RLModule.load_from_checkpoint(path)
    assert not marker.exists() and import_path_settings() == before


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[6]], ids=[CASES[i][0] for i in (0, 2, 6)])
def test_export_refuses_it_in_one_line(dqn_checkpoint, tmp_path, case):
    """``pipelines.export`` of a hostile checkpoint: one line naming the key, exit 2, nothing written or run."""
    _, edit, key = case
    path, marker = _hostile(dqn_checkpoint, tmp_path, edit)
    proc = run_module("pipelines.export", "--ckpt_path", path, "--out", str(tmp_path / "p.pt"), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and f"{key}=" in lines[0], proc.stderr
    assert not marker.exists() and sorted(os.listdir(tmp_path)) == ["hostile.ckpt"]


def test_hyper_parameters_that_do_not_build_the_module_are_one_line(dqn_checkpoint, tmp_path):
    """An argument the network does not take (an edited file): one ValueError line naming the file, from Python
    and from ``pipelines.export`` (exit 2), not the constructor's traceback."""
    edit = lambda m: {"network": _network("modules.q_networks.QNetwork", hidden_dims=[16], hook="x")}  # noqa: E731
    path, _ = _hostile(dqn_checkpoint, tmp_path, edit)
    with pytest.raises(ValueError, match="cannot be built from its hyper_parameters.*hook"):
        RLModule.load_from_checkpoint(path)
    proc = run_module("pipelines.export", "--ckpt_path", path, "--out", str(tmp_path / "p.pt"), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and path in lines[0], proc.stderr[-2000:]


def test_evaluate_refuses_a_recorded_config_naming_a_function(dqn_checkpoint, tmp_path):
    """``pipelines.evaluate --ckpt_path`` alone builds from the config the checkpoint records: a function given
    as the class path of a callable argument there (called with the file's arguments) is refused naming the key,
    exit 2, before anything is built."""
    marker = tmp_path / "MARKER"
    checkpoint = torch.load(dqn_checkpoint, map_location="cpu", weights_only=True)
    checkpoint["fit_config"]["model"]["init_args"]["network"] = _network(
        "torch.nn.TransformerEncoderLayer", d_model=4, nhead=1,
        activation=_network("pipelines.import_roms._run", command=["touch", str(marker)]))
    path = tmp_path / "hostile.ckpt"
    torch.save(checkpoint, path)
    proc = run_module("pipelines.evaluate", "--ckpt_path", str(path), "--episodes", "1", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: model.init_args.network.init_args.activation.class_path=") and "not a class" in last
    assert not marker.exists()


def test_a_legitimate_checkpoint_still_loads_and_plays(dqn_checkpoint):
    before = import_path_settings()
    module = RLModule.load_from_checkpoint(dqn_checkpoint)
    assert type(module).__name__ == "DQNModule" and import_path_settings() == before
    action = module.predict(torch.zeros(4).numpy(), deterministic=True)
    assert int(action) in (0, 1)
    with pytest.raises(ValueError, match="hparams_file is not taken"):
        RLModule.load_from_checkpoint(dqn_checkpoint, hparams_file="hparams.yaml")


def test_enforced_restores_the_settings_and_user_packages(monkeypatch):
    """``enforced`` applies the policy inside the block only (a Python user's jsonargparse, which warns by default,
    is left so); a package named by RLPIPE_ALLOW_IMPORTS is allowed."""
    original = import_path_settings()
    before = ({"jsonargparse": False, "os": False}, False)  # jsonargparse's defaults: warn, do not refuse
    set_import_path_settings(before)
    try:
        with enforced():
            inside = import_path_settings()
            assert inside[1] and inside[0]["modules"] and inside[0]["*"] is False
        assert import_path_settings() == before
    finally:
        set_import_path_settings(original)
    monkeypatch.setenv("RLPIPE_ALLOW_IMPORTS", "my_nets")
    check_named_objects({"network": {"class_path": "my_nets.Net"}}, "hyper_parameters")
    monkeypatch.setenv("RLPIPE_ALLOW_IMPORTS", "jsonargparse")
    with pytest.raises(ValueError, match="RLPIPE_ALLOW_IMPORTS: 'jsonargparse' is not allowed"):
        check_named_objects({"network": {"class_path": "my_nets.Net"}}, "hyper_parameters")


# ---------------------------------------------------------------- the routing-policy loader


@pytest.fixture
def routing_file(tmp_path) -> tuple[pathlib.Path, dict]:
    policy = RoutingPolicy(embed_dim=16, num_heads=4, num_layers=1)
    checkpoint = {"state_dict": {f"policy.{k}": v for k, v in policy.state_dict().items()},
                  "routing_policy": {"class_path": "modules.routing.RoutingPolicy", "config": dict(policy.config),
                                     "num_customers": 20, "num_vehicles": 2}}
    return tmp_path / "oracle.ckpt", checkpoint


@pytest.mark.parametrize("edit, match", [
    ({"class_path": "modules.recurrent.LSTMModule"}, "defined in this project's modules package"),  # torchrl's
    ({"class_path": "modules.routing.nn.Linear"}, "defined in this project's modules package"),
    ({"class_path": "modules.routing.torch.load"}, "defined in this project's modules package"),
    ({"config": {"embed_dim": 16, "hook": "os.system"}}, "config.hook is not an argument of RoutingPolicy"),
    ({"config": {"embed_dim": {"class_path": "os.system"}}}, "config.embed_dim=.* is not allowed"),
    ({"config": {"embed_dim": 400_000, "num_heads": 4, "num_layers": 1}}, "do not fit the network its config asks"),
])
def test_routing_loader_refuses_other_classes_arguments_and_sizes(routing_file, edit, match):
    """Only a ``modules`` class defined there, from its named plain arguments; a config asking 640 GB of weights the
    file does not hold is refused before any memory is taken; the message names the routing policy's file, not
    ``--ckpt_path``."""
    path, checkpoint = routing_file
    hostile = copy.deepcopy(checkpoint)
    hostile["routing_policy"].update(edit)
    torch.save(hostile, path)
    with pytest.raises(ValueError, match=match) as refused:
        load_exported_model(str(path), "routing_policy")
    assert str(path) in str(refused.value) and "--ckpt_path" not in str(refused.value)
