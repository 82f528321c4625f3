"""SAC: the continuous and discrete variants build on their action specs and update every part (actor,
twin critics, temperature, targets); the Pendulum config runs through the pipeline (and, marked slow,
reaches its goal)."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical

from modules.sac import SACModule, SACNetworks
from pipelines.evaluate import main as evaluate
from pipelines.fit import main
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import REPO

PENDULUM = str(REPO / "configs" / "pendulum_sac.yaml")


def _batch(n: int, action: torch.Tensor) -> TensorDict:
    nxt = TensorDict(observation=torch.randn(n, 3), reward=torch.randn(n, 1), done=torch.zeros(n, 1, dtype=torch.bool),
                     terminated=torch.zeros(n, 1, dtype=torch.bool), batch_size=[n])
    return TensorDict(observation=torch.randn(n, 3), action=action, next=nxt, batch_size=[n])


def _step(module: SACModule, batch: TensorDict) -> None:
    """One optimiser step outside Lightning: the module's summed loss, its optimiser and target update."""
    optimizer = module.configure_optimizers()
    out = module.loss(batch)
    sum(out[k] for k in ("loss_actor", "loss_qvalue", "loss_alpha")).backward()
    optimizer.step()
    module.target.step()


@pytest.mark.parametrize("discrete", [False, True])
def test_one_update_moves_actor_critics_temperature_and_targets(discrete):
    torch.manual_seed(0)
    spec = Categorical(3) if discrete else Bounded(-2.0, 2.0, shape=(1,))
    module = SACModule(SACNetworks((16,), (16,)), actor_lr=1e-2, critic_lr=1e-2, alpha_lr=1e-2, tau=0.5)
    module.build(spec, TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
    before = {k: v.detach().clone() for k, v in module.named_parameters()}
    target_before = [p.clone() for p in module.target.parameters()]
    action = torch.randint(3, (32,)) if discrete else spec.rand((32,))
    _step(module, _batch(32, action))
    moved = {k for k, v in module.named_parameters() if not torch.equal(v, before[k])}
    assert any(k.startswith("network.actor") for k in moved)
    assert {k.split(".")[2] for k in moved if k.startswith("critics.nets")} == {"0", "1"}  # both twin critics
    assert "log_alpha" in moved
    assert not any(k.startswith("network.critic") for k in moved)  # the template is not trained
    target_now = module.target.parameters()
    assert any(not torch.equal(p, q) for p, q in zip(target_now, target_before, strict=True))  # soft update
    # the collector's actions respect the spec: in [-2, 2] (tanh squashing to the bounds) or valid indices
    with torch.no_grad():
        acted = module.collector_policy(TensorDict(observation=torch.randn(256, 3) * 10, batch_size=[256]))["action"]
    assert spec.is_in(acted)


def test_unsupported_action_spec_is_rejected():
    from torchrl.data import Unbounded

    module = SACModule(SACNetworks((8,), (8,)))
    with pytest.raises(ValueError, match="bounded continuous"):
        module.build(Unbounded(shape=(2,)), TensorDict(observation=torch.zeros(1, 3), batch_size=[1]))
    with pytest.raises(ValueError, match="model.tau"):
        SACModule(SACNetworks(), tau=0.0)


def test_pendulum_config_runs_resumes_and_evaluates(tmp_path, capsys):
    args = ["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            "--trainer.callbacks+=callbacks.ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps=100", "--trainer.callbacks.save_top_k=-1",
            "--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
            "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]",
            f"--trainer.logger.init_args.save_dir={tmp_path}"]
    cli = main([*args, "--data.init_args.total_frames=400"])
    assert cli.trainer.global_step == (400 - 104) // 8 * 8  # 8 updates per collected batch, in one training step
    assert cli.datamodule.num_training_steps() == (400 - 104) // 8
    assert set(cli.model.latest_metrics) >= {"train/loss_actor", "train/loss_qvalue", "train/alpha", "train/entropy"}
    last = periodic_checkpoints(tmp_path / "pendulum_sac" / "version_0" / "checkpoints")[200]
    assert last.name == "frames=304.ckpt"  # named by frames: 104 random + 200 (8 updates per 8 frames)
    assert torch.load(last, weights_only=True)["rl_state"]["collected_frames"] == 104 + 200  # 8 updates per 8 frames
    resumed = main([*args, "--data.init_args.total_frames=480", f"--ckpt_path={last}"])
    assert resumed.model.collected_frames == 480 and resumed.trainer.global_step == (480 - 104) // 8 * 8
    capsys.readouterr()
    table = evaluate(["--config", PENDULUM, "--ckpt_path", str(last), "--episodes", "4", "--num_envs", "4",
                      "--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
                      "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == table
    assert set(table) == {"sac", "random"} and -2000 < table["random"]["mean_return"] < 0


@pytest.mark.slow
def test_pendulum_config_reaches_its_goal(tmp_path):
    """The full config (20,000 frames, about 4 min on 1 thread): best greedy return above -200."""
    cli = main(["--config", PENDULUM, "--trainer.enable_progress_bar=false",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.PolicyEvaluation",
                "--trainer.callbacks.every_n_frames=4000", "--trainer.callbacks.num_envs=10"])
    assert cli.model.latest_metrics  # ran
    evaluation = next(c for c in cli.trainer.callbacks if type(c).__name__ == "PolicyEvaluation")
    assert evaluation.evaluate(cli.trainer, cli.model)["eval/episode_return"] > -200


@pytest.mark.parametrize("discrete", [False, True])
def test_collector_policy_draws_what_torchrl_actor_draws(discrete):
    """The lean collector policy gives TorchRL's ProbabilisticActor's actions on the same random state: samples
    under RANDOM, the deterministic action under DETERMINISTIC and outside any setting."""
    from tensordict.nn import TensorDictModule
    from torch.distributions import Categorical as TorchCategorical
    from torchrl.envs import ExplorationType, set_exploration_type
    from torchrl.modules import ProbabilisticActor, TanhNormal

    torch.manual_seed(0)
    spec = Categorical(3) if discrete else Bounded(-2.0, torch.tensor([2.0, 1.0]), shape=(2,))
    module = SACModule(SACNetworks((16,), (16,)))
    obs = TensorDict(observation=torch.randn(256, 3), batch_size=[256])
    module.build(spec, obs)
    if discrete:
        theirs = ProbabilisticActor(TensorDictModule(module.network.actor, ["observation"], ["logits"]), ["logits"],
                                    spec=spec, distribution_class=TorchCategorical)
    else:
        theirs = ProbabilisticActor(TensorDictModule(module.network.actor, ["observation"], ["loc", "scale"]),
                                    ["loc", "scale"], spec=spec, distribution_class=TanhNormal,
                                    distribution_kwargs={"low": spec.space.low, "high": spec.space.high})
    actions = {}
    for mode in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC, None):
        with torch.no_grad(), set_exploration_type(mode):
            torch.manual_seed(1)
            ours = module.collector_policy(obs.clone())["action"]
            torch.manual_seed(1)
            assert torch.equal(ours, theirs(obs.clone())["action"]), mode
        actions[mode] = ours
    assert not torch.equal(actions[ExplorationType.RANDOM], actions[ExplorationType.DETERMINISTIC])
    assert torch.equal(actions[None], actions[ExplorationType.DETERMINISTIC])
